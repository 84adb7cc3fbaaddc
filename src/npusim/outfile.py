"""Every file npusim writes goes through here: reports (``--json``, ``--csv``, ``--html``),
figures (``--plots``, ``pareto``), topology CSVs (``export-topology``), a store's tables
(``sweep export``), the trained-weights cache.

The rules, the same for every target:

- ``-`` is standard output (``STDOUT``);
- a target that exists must be a regular file that we may write; anything else (a symbolic
  link, even to a regular file, a FIFO, a device, a socket, a folder) is refused with an
  ``OutputError`` naming the path and what it is, and is left as it is;
- the text goes to a temporary file in the target's folder, which then replaces the target
  (``os.replace``): a reader sees the old file or the whole new one, and a failure leaves the
  old file as it was and no temporary file behind;
- an existing regular file is replaced only when npusim wrote it: it is empty, or it carries
  the mark of the kind of file being written where npusim puts it (``MARKS``: a JSON report's
  first keys ``"schema_version"`` and ``"npusim_version"``, a CSV table's header line, the HTML
  report's generator tag in its head, a figure's ``Software``/creator metadata in its header,
  a Parquet table's footer). A file that only mentions a mark (a user's script that reads
  ``"npusim_version"`` out of a report, notes that name npusim) is not npusim's: anything but
  a marked file (a README, a user's data, a SCALE-Sim topology of their own) is refused and
  left as it is;
- the new file's mode is ``0o666`` less the umask (0644 under the usual umask 022), what a
  plain ``open(path, "w")`` gives a new file, whatever mode an old file had.
"""

from __future__ import annotations

import os
import re
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from .errors import OutputError

STDOUT = "-"
FILE_MODE = 0o666  # before the umask
MARK_WINDOW = 8192  # bytes at each end of a file where its kind's mark is looked for


@dataclass(frozen=True)
class Mark:
    """How a kind of file npusim writes is told from any other: ``head`` matches at the
    start of its first ``MARK_WINDOW`` bytes, and ``tail`` (if given) at the end of its last
    ones; ``name`` says where the mark stands, for messages."""

    name: str
    head: re.Pattern[bytes]
    tail: re.Pattern[bytes] | None = None

    def on(self, head: bytes, tail: bytes) -> bool:
        """Whether a file whose first and last bytes are ``head`` and ``tail`` carries it."""
        return bool(self.head.match(head)) and (self.tail is None
                                                or self.tail.search(tail) is not None)


def _mark(name: str, head: bytes, tail: bytes | None = None) -> Mark:
    return Mark(name, re.compile(head, re.DOTALL),
                None if tail is None else re.compile(tail, re.DOTALL))


# Each kind of file npusim writes -> its mark (any one of the tuple); None: the format has no
# room for one (a SCALE-Sim topology: a file that exists is never replaced).
MARKS: dict[str, tuple[Mark, ...] | None] = {
    "json": (_mark('"npusim_version" as its first key, or the next after "schema_version"',
                   rb'\s*\{\s*(?:"schema_version"\s*:\s*\d+\s*,\s*)?"npusim_version"\s*:'),),
    "csv": (_mark("a header line of npusim's run, compare or sweep tables",
                  rb"(?:name,dataflow,shape,|layer,arch,cycles,|(?:[^\n]*,)?model,density,"
                  rb"status,reason,version,seconds(?:,|\r?\n|\Z))"),),
    "html": (_mark('<meta name="generator" content="npusim ..."> in its head',
                   rb'<!DOCTYPE html>\s*<html[^>]*>\s*<head>\s*<meta charset="utf-8">\s*'
                   rb'<meta name="generator" content="npusim '),),
    "figure": (_mark("a PNG whose Software text is npusim's",
                     rb"\x89PNG\r\n\x1a\n(?:(?!IDAT).)*?tEXtSoftware\x00npusim "),
               _mark("an SVG whose creator is npusim",
                     rb"<\?xml(?:(?!</metadata>).)*?<dc:creator>\s*<cc:Agent>\s*"
                     rb"<dc:title>npusim ")),
    "parquet": (_mark("a Parquet file whose generator is npusim", rb"PAR1",
                      rb"generator.{1,8}npusim .*PAR1\Z"),),
    "topology": None,
    "cache": (_mark("a file in npusim's cache folder", rb""),),  # npusim's, whatever it holds
}
KIND_NAMES = {"json": "a JSON report", "csv": "a CSV table", "html": "an HTML report",
              "figure": "a figure", "parquet": "a Parquet table", "topology": "a topology CSV",
              "cache": "a cache file"}  # each kind as messages name it
KINDS = ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a folder"),
         (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
         (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def target(text: str) -> Path:
    """An argparse type for a path to write: refused when empty (``Path("")`` is ``.``, the
    folder npusim runs in, which a flag would then name)."""
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: an empty name; give a file name (or "
                                         f"'{STDOUT}' for standard output where it is one)")
    return Path(text)


def is_stdout(target: str | Path) -> bool:
    """Whether ``target`` names standard output (``-``)."""
    return str(target) == STDOUT


def check_target(target: str | Path, what: str, kind: str) -> None:
    """Refuse, before any work, a target that ``write_text`` would refuse or fail on:
    an existing non-regular file, a file npusim did not write (``kind``: a key of
    ``MARKS``), an unwritable file, a missing folder. ``what`` names the target in the
    message (a flag such as ``--json``)."""
    if is_stdout(target):
        return
    path = Path(target)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise OutputError(f"{what} {path}: cannot inspect it: {e.strerror}") from None
    if st is not None:
        _check_existing(path, st, what)
        _check_ours(path, st, what, kind)
    folder = path.parent
    if not folder.is_dir():
        raise OutputError(f"{what} {path}: folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{what} {path}: folder {folder} is not writable")


def _check_existing(path: Path, st: os.stat_result, what: str) -> None:
    kind = next((word for test, word in KINDS if test(st.st_mode)), None)
    if kind is not None:
        raise OutputError(f"{what} {path}: is {kind}, not a regular file; npusim writes only "
                          "regular files (or '-' for standard output) and left it as it is")
    if not os.access(path, os.W_OK):
        raise OutputError(f"{what} {path}: the file is not writable (mode "
                          f"{stat.S_IMODE(st.st_mode):o}); left as it is")


def _check_ours(path: Path, st: os.stat_result, what: str, kind: str) -> None:
    """Refuse an existing regular file npusim cannot tell it wrote (``MARKS[kind]``)."""
    if st.st_size == 0 or _marked(*_ends(path), MARKS[kind]):
        return
    marks, name = MARKS[kind], KIND_NAMES[kind]
    if marks is None:
        raise OutputError(f"{what} {path}: exists, and {name} carries no mark to tell "
                          "npusim's from another's, so npusim replaces none and left it as it "
                          "is: remove it or name another file")
    raise OutputError(f"{what} {path}: exists and is not {name} npusim wrote (it does not "
                      f"carry their mark, {' or '.join(m.name for m in marks)}); npusim "
                      "replaces only its own files and left it as it is: remove it or name "
                      "another file")


def _ends(path: Path) -> tuple[bytes, bytes]:
    """The first and the last ``MARK_WINDOW`` bytes of the file at ``path`` (a file that
    cannot be read has none)."""
    try:
        with path.open("rb") as f:
            head = f.read(MARK_WINDOW)
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - MARK_WINDOW))
            return head, f.read(MARK_WINDOW)
    except OSError:
        return b"", b""


def _marked(head: bytes, tail: bytes, marks: tuple[Mark, ...] | None) -> bool:
    return marks is not None and any(m.on(head, tail) for m in marks)


def write_text(target: str | Path, text: str, what: str, kind: str) -> None:
    """Write ``text`` (UTF-8, its own line ends) to ``target``, or to standard output for
    ``-``, by the rules above; an ``OSError`` while writing becomes an ``OutputError``
    naming ``what`` and the path."""
    write_bytes(target, text.encode("utf-8"), what, kind)


def write_bytes(target: str | Path, data: bytes, what: str, kind: str) -> None:
    """Write ``data``, a file of ``kind`` (a key of ``MARKS``, whose mark it carries), to
    ``target`` atomically by the rules above."""
    if MARKS[kind] is not None and not _marked(data[:MARK_WINDOW], data[-MARK_WINDOW:],
                                               MARKS[kind]):
        raise ValueError(f"{what}: {KIND_NAMES[kind]} of npusim's without its mark "
                         f"({MARKS[kind][0].name}): a later run could not tell it from "
                         "another's")
    if is_stdout(target):
        _to_stdout(data, what)
        return
    path = Path(target)
    check_target(path, what, kind)
    try:
        _replace_with(path, data, what, kind)
    except OSError as e:
        raise OutputError(f"{what} {path}: cannot write: {e.strerror or e}") from None


def _to_stdout(data: bytes, what: str) -> None:
    """``data`` on standard output (its text stream, flushed first, when it has no bytes
    buffer, as under pytest's capture); a closed pipe is one clear error."""
    try:
        sys.stdout.flush()
        buffer = getattr(sys.stdout, "buffer", None)
        if buffer is None:
            sys.stdout.write(data.decode("utf-8"))
        else:
            buffer.write(data)
        sys.stdout.flush()
    except BrokenPipeError:
        raise  # its reader left: the command line stops quietly (``cli.main``)
    except OSError as e:
        raise OutputError(f"{what} -: cannot write to standard output: "
                          f"{e.strerror or e}") from None


def _replace_with(path: Path, data: bytes, what: str, kind: str) -> None:
    """A temporary file beside ``path`` with ``data``, renamed onto ``path`` (checked again
    just before, in case it changed while the data was written). tempfile (with shutil and
    random) is imported here: every command imports this module, few write a file."""
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, FILE_MODE & ~_umask())
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        check_target(path, what, kind)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    """The process umask (read by setting it and putting it back)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask
