"""Every file npusim writes (``npusim.outfile``): '-' is standard output, only regular files
are replaced, atomically, with one mode rule; checked on the helper and through the CLI."""

import json
import os
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from npusim import cli, outfile
from npusim.errors import OutputError
from npusim.frontends.topology import HEADER, read_topology

JSON = '{\n  "npusim_version": "0.1.0"\n}\n'  # a report, as small as it comes
NPUSIM = [sys.executable, "-c", "import sys; from npusim.cli import main; sys.exit(main())"]


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def snapshot(folder: Path) -> dict:
    """Every entry of ``folder``: its lstat type and mode bits, and a regular file's bytes."""
    out = {}
    for p in sorted(folder.iterdir()):
        st = os.lstat(p)
        out[p.name] = (stat.S_IFMT(st.st_mode), st.st_rdev,
                       p.read_bytes() if stat.S_ISREG(st.st_mode) else os.readlink(p)
                       if stat.S_ISLNK(st.st_mode) else None)
    return out


def char_device(tmp_path: Path) -> Path:
    """A character device to be refused: a fresh node with /dev/null's numbers where we may
    create one (root), else /dev/null itself (never written: refused before any write)."""
    node = tmp_path / "dev-null-like"
    try:
        os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        return node
    except (PermissionError, OSError):
        return Path("/dev/null")


def unix_socket(tmp_path: Path):
    sock = socket.socket(socket.AF_UNIX)
    path = tmp_path / "s.sock"
    sock.bind(str(path))
    return sock, path


@pytest.fixture
def no_temp_file(monkeypatch):
    """Make any attempt to create the temporary file fail loudly: proves a refusal came first."""
    def forbidden(*a, **k):
        raise AssertionError("a temporary file was created for a refused target")
    monkeypatch.setattr(tempfile, "mkstemp", forbidden)


# ---- the helper ---------------------------------------------------------------------------

def test_new_and_replaced_files_get_the_plain_open_mode(tmp_path):
    old = tmp_path / "old.json"
    old.write_text('{"npusim_version": "old"}')
    old.chmod(0o600)
    for path in (old, tmp_path / "new.json"):
        outfile.write_text(path, JSON, "--json", "json")
        assert path.read_text() == JSON
        assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask()
    assert sorted(os.listdir(tmp_path)) == ["new.json", "old.json"]


def test_dash_is_standard_output(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    outfile.write_text("-", JSON, "--json", "json")
    assert capsys.readouterr().out == JSON
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("kind", ["symlink to a file", "dangling symlink", "FIFO", "device",
                                  "socket", "folder"])
def test_non_regular_targets_are_refused_and_left_as_they_are(tmp_path, kind, no_temp_file):
    (tmp_path / "real.json").write_text("real")
    sock = None
    if kind == "symlink to a file":
        target, word = tmp_path / "link.json", "symbolic link"
        target.symlink_to(tmp_path / "real.json")
    elif kind == "dangling symlink":
        target, word = tmp_path / "link.json", "symbolic link"
        target.symlink_to(tmp_path / "nowhere.json")
    elif kind == "FIFO":
        target, word = tmp_path / "fifo", r"FIFO \(named pipe\)"
        os.mkfifo(target)
    elif kind == "device":
        target, word = char_device(tmp_path), "character device"
    elif kind == "socket":
        sock, target = unix_socket(tmp_path)
        word = "socket"
    else:
        target, word = tmp_path / "dir", "folder"
        target.mkdir()
    before = snapshot(tmp_path)
    try:
        with pytest.raises(OutputError, match=f"--json {target}: is an? {word}, not a regular "
                                              "file; .*left it as it is"):
            outfile.write_text(target, JSON, "--json", "json")
    finally:
        if sock:
            sock.close()
    assert snapshot(tmp_path) == before


def test_failure_mid_write_leaves_the_old_file_and_no_temp(tmp_path, monkeypatch):
    path = tmp_path / "r.csv"
    path.write_text("name,dataflow,shape,old")
    real_fdopen = os.fdopen

    class DiskFull:
        """A file that takes half of the data, then runs out of space."""
        def __init__(self, fd, mode):
            self.f = real_fdopen(fd, mode)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(outfile.os, "fdopen", DiskFull)
    with pytest.raises(OutputError, match=r"--csv .*r\.csv: cannot write: No space left"):
        outfile.write_text(path, "name,dataflow,shape,new\n" * 100, "--csv", "csv")
    assert path.read_text() == "name,dataflow,shape,old"
    assert os.listdir(tmp_path) == ["r.csv"]


def test_missing_folder_is_refused(tmp_path):
    with pytest.raises(OutputError, match=r"r\.json: folder .*no does not exist"):
        outfile.write_text(tmp_path / "no" / "r.json", JSON, "--json", "json")
    assert os.listdir(tmp_path) == []


def test_unwritable_folder_is_one_clear_error(tmp_path, monkeypatch):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    if os.access(folder, os.W_OK):  # root writes anyway: make the folder refuse it
        def refused(*a, **k):
            raise PermissionError(13, "Permission denied")
        monkeypatch.setattr(tempfile, "mkstemp", refused)
    try:
        with pytest.raises(OutputError, match=r"--json .*ro/r\.json: (folder .*ro is not "
                                              r"writable|cannot write: Permission denied)"):
            outfile.write_text(folder / "r.json", JSON, "--json", "json")
        assert os.listdir(folder) == []
    finally:
        folder.chmod(0o755)


# ---- through the command line -------------------------------------------------------------

def npusim(*argv, cwd=None):
    return subprocess.run([*NPUSIM, *map(str, argv)], capture_output=True, text=True, cwd=cwd,
                          timeout=300)


def test_cli_json_to_a_symlink_is_refused_before_the_run(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("keep me")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    done = npusim("run", "mtcnn-pnet", "--quiet", "--json", link)
    assert done.returncode == 2
    assert done.stderr == (f"npusim: error: --json {link}: is a symbolic link, not a regular "
                           "file; npusim writes only regular files (or '-' for standard output) "
                           "and left it as it is\n")
    assert link.is_symlink() and real.read_text() == "keep me"


def test_cli_reports_and_topology_to_standard_output(tmp_path):
    done = npusim("run", "mtcnn-pnet", "--json", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)  # stdout holds the report alone; the tables went to stderr
    assert doc["model"] == "mtcnn-pnet" and "mtcnn-pnet on" in done.stderr
    done = npusim("export-topology", "mtcnn-pnet", "-", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == HEADER
    assert "wrote 5 conv layers of mtcnn-pnet to standard output" in done.stderr
    assert os.listdir(tmp_path) == []


def test_cli_fifo_and_device_are_refused_and_kept(tmp_path, capsys, no_temp_file):
    fifo = tmp_path / "fifo.csv"
    os.mkfifo(fifo)
    device = char_device(tmp_path)
    for argv in (["run", "mtcnn-pnet", "--quiet", "--csv", fifo],
                 ["export-topology", "mtcnn-pnet", fifo],
                 ["run", "mtcnn-pnet", "--quiet", "--json", device]):
        before = snapshot(tmp_path)
        assert cli.main(list(map(str, argv))) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "not a regular file" in err, err
        assert snapshot(tmp_path) == before
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and stat.S_ISCHR(os.lstat(device).st_mode)


def test_cli_writes_every_file_with_one_mode(tmp_path, capsys):
    report, topo = tmp_path / "r.json", tmp_path / "t.csv"
    assert cli.main(["run", "mtcnn-pnet", "--quiet", "--json", str(report)]) == 0
    assert cli.main(["export-topology", "mtcnn-pnet", str(topo)]) == 0
    capsys.readouterr()
    modes = {stat.S_IMODE(p.stat().st_mode) for p in (report, topo)}
    assert modes == {0o666 & ~umask()}
    assert len(read_topology(topo)) == 5  # P-Net: conv1-3, conv4-1, conv4-2


# ---- only npusim's own files are replaced -------------------------------------------------

TOPOLOGY = "c1, 18, 18, 3, 3, 8, 16, 1,\n"


def test_an_existing_file_is_replaced_only_when_it_carries_its_kinds_mark(tmp_path):
    big = b"x" * (3 * outfile.MARK_WINDOW)
    cases = {  # existing bytes -> replaced?
        b"": True,  # empty: nothing to lose
        b'{"npusim_version": "0.0.1", "model": "old"}': True,
        b'{\n  "schema_version": 1,\n  "npusim_version": "0.1.0",\n  "model": "m"\n}\n': True,
        big + b'"npusim_version"': False,  # a mention, not a report's first key
        b'import json\nprint(json.load(open("r.json"))["npusim_version"])\n': False,
        b'{"model": "m", "npusim_version": "0.1.0"}': False,  # not where a report has it
        b'{"name": "my own notes"}': False,
        b"name,dataflow,shape,dense_macs\n": False,  # a CSV report's mark, not a JSON's
    }
    for n, (old, replaced) in enumerate(cases.items()):
        path = tmp_path / f"r{n}.json"
        path.write_bytes(old)
        if replaced:
            outfile.write_text(path, JSON, "--json", "json")
            assert path.read_text() == JSON
        else:
            with pytest.raises(OutputError, match=rf"--json {path}: exists and is not a JSON "
                               r"report npusim wrote \(it does not carry their mark, "
                               r"\"npusim_version\" as its first key.*\); .*left it as it is"):
                outfile.write_text(path, JSON, "--json", "json")
            assert path.read_bytes() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"r{n}.json" for n in range(8)]


PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(17)
FOOTER = b"\x19,\x18\tgenerator\x18\x0cnpusim 0.1.0\x00" + bytes(8) + b"PAR1"


@pytest.mark.parametrize("kind,name,data,ours", [
    ("csv", "t.csv", b"name,dataflow,shape,dense_macs\nconv1,systolic,1x1,1\n", True),
    ("csv", "t.csv", b"rows,model,density,status,reason,version,seconds\n8,m,,ok,,0.1,1\n",
     True),  # a store's table: the swept parameters first
    ("csv", "t.csv", b"model,density,status,reason,version,seconds\n", True),
    ("csv", "t.csv", b"# notes: npusim's header is name,dataflow,shape,...\n", False),
    ("csv", "t.csv", b"a,b\nname,dataflow,shape,x\n", False),  # not the header line
    ("csv", "t.csv", b"my_model,density,status,reason,version,seconds\n", False),
    ("html", "p.html", b'<!DOCTYPE html>\n<html><body>npusim pages carry <meta name="generator" '
     b'content="npusim 0.1"></body></html>\n', False),  # in the body, not the head
    ("figure", "f.png", PNG + b"\x00\x00\x00\x1atEXtSoftware\x00npusim 0.1.0", True),
    ("figure", "f.png", PNG + b"IDAT" + bytes(9) + b"tEXtSoftware\x00npusim 0.1.0", False),
    ("figure", "f.png", b"notes: tEXtSoftware\x00npusim ", False),  # no PNG at all
    ("figure", "f.svg", b"<p>the SVGs say <dc:creator><cc:Agent><dc:title>npusim 0.1</p>",
     False),
    ("parquet", "t.parquet", b"PAR1" + bytes(40) + FOOTER, True),
    ("parquet", "t.parquet", b"# my notes\nnpusim sweeps export Parquet\n", False),
    ("parquet", "t.parquet", b"PAR1" + bytes(40) + b"\x19\x18\x03own" + bytes(8) + b"PAR1",
     False),  # someone else's Parquet file
])
def test_a_mark_counts_only_where_npusim_puts_it(tmp_path, kind, name, data, ours):
    """A file that mentions a mark is not npusim's: only one with the mark where npusim's
    files carry it (a report's first key, a table's header line, the page's head, the
    figure's header, the Parquet footer) is replaced. A mention anywhere in a file's first
    or last 8 KiB once made it npusim's."""
    path = tmp_path / name
    path.write_bytes(data)
    if ours:
        outfile.check_target(path, "--out", kind)
    else:
        with pytest.raises(OutputError, match="does not carry their mark"):
            outfile.check_target(path, "--out", kind)


def test_a_users_script_that_reads_reports_is_not_replaced(tmp_path):
    """``npusim run ... --json analyse.py``, a user's script that reads reports: refused
    before the run and left as it is (it was replaced by a report, exit 0)."""
    script = tmp_path / "analyse.py"
    text = 'import json\nreport = json.load(open("r.json"))\nprint(report["npusim_version"])\n'
    script.write_text(text)
    code = cli.main(["run", "Resnet18.csv", "-q", "--json", str(script)])
    assert code == 2 and script.read_text() == text


def test_what_npusim_writes_must_carry_its_mark(tmp_path):
    with pytest.raises(ValueError, match="without its mark"):
        outfile.write_text(tmp_path / "r.json", "{}\n", "--json", "json")
    assert os.listdir(tmp_path) == []


def user_files(folder: Path) -> dict[str, bytes]:
    """Files a user keeps, each at a name some npusim command below is pointed at."""
    folder.mkdir()
    files = {"README.md": b"# my project\n", "data.csv": b"a,b\n1,2\n",
             "page.html": b"<!DOCTYPE html>\n<html><body>mine</body></html>\n",
             "front.png": b"\x89PNG\r\n\x1a\n" + bytes(64),
             "mine.csv": ("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                          "Channels, Num Filter, Strides,\n" + TOPOLOGY).encode()}
    (folder / "figs").mkdir()
    files["figs/cycles.png"] = b"\x89PNG\r\n\x1a\n" + bytes(64)
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return files


def test_cli_refuses_every_users_file_before_any_work_and_replaces_its_own(tmp_path, capsys):
    topo = tmp_path / "net.csv"
    topo.write_text(HEADER + "\n" + TOPOLOGY)
    store = tmp_path / "s.db"
    spec = tmp_path / "spec.toml"
    spec.write_text(f'base = "systolic-32x32-ws"\nmodels = ["{topo}"]\n'
                    '[parameters]\n"systolic.rows" = [8, 16]\n')
    assert cli.main(["sweep", str(spec), "--store", str(store), "--quiet"]) == 0
    home = tmp_path / "user"
    files = user_files(home)
    commands = {  # each command, once at the user's file and once at a file of its own
        "README.md": ["run", "mtcnn-pnet", "--quiet", "--json"],
        "data.csv": ["compare", str(topo), "--arch", "systolic-32x32-ws", "systolic-32x32-os",
                     "--quiet", "--csv"],
        "page.html": ["run", str(topo), "--quiet", "--html"],
        "front.png": ["pareto", str(store), "--x", "cycles", "--y", "utilisation", "--png"],
        "mine.csv": ["export-topology", "mtcnn-pnet"],
        "figs": ["run", str(topo), "--quiet", "--plots"],
    }
    (tmp_path / "own").mkdir()
    for name, argv in commands.items():
        assert cli.main([*argv, str(home / name)]) == 2, name
        err = capsys.readouterr().err
        refusal = ("a topology CSV carries no mark" if name == "mine.csv"
                   else "npusim wrote (it does not carry their mark")
        assert err.count("\n") == 1 and refusal in err and "\0" not in err, err
        assert {n: (home / n).read_bytes() for n in files} == files  # all left as they were
        own = tmp_path / "own" / name
        assert cli.main([*argv, str(own)]) == 0, capsys.readouterr().err
        again = cli.main([*argv, str(own)])  # its own file: replaced, but a topology never
        assert again == (2 if name == "mine.csv" else 0), capsys.readouterr().err
        capsys.readouterr()
    assert sorted(str(p.relative_to(home)) for p in home.rglob("*")) == sorted(["figs", *files])
    code = cli.main(["sweep", "export", str(store), "--csv", str(home / "data.csv")])
    assert code == 2 and (home / "data.csv").read_bytes() == files["data.csv"]


def closed_stdout_run(*argv, cwd=None, buffered=True):
    """npusim with a standard output whose reader has left (``npusim ... | head -1`` once
    ``head`` is gone): every write to it fails with EPIPE; ``buffered``: Python's block
    buffering of a pipe (the failure shows at the last flush), else PYTHONUNBUFFERED."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    read, write = os.pipe()
    os.close(read)
    try:
        return subprocess.run([*NPUSIM, *map(str, argv)], stdout=write, stderr=subprocess.PIPE,
                              text=True, cwd=cwd, env=env, timeout=300)
    finally:
        os.close(write)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs Linux's /dev/full")
@pytest.mark.parametrize("buffered", [True, False])
def test_a_standard_output_that_cannot_be_written_is_one_line(tmp_path, buffered):
    """A full disk (/dev/full) or a closed descriptor (``>&-``): one line on stderr, exit 2,
    the files written before the tables kept; a quiet run never writes there and succeeds
    (both were tracebacks from rich or from the last flush)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if not buffered:
        env["PYTHONUNBUFFERED"] = "1"
    run = ["run", "mtcnn-pnet", "--json", "r.json"]

    def npusim(argv, **how):
        return subprocess.run([*NPUSIM, *argv], stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                              env=env, timeout=300, **how)

    with open("/dev/full", "w") as full:
        done = npusim(run, stdout=full)
    assert done.returncode == cli.EXIT_BAD_INPUT
    assert done.stderr == ("npusim: error: standard output: No space left on device; nothing "
                           "more was written there\n")
    assert json.loads((tmp_path / "r.json").read_text())["model"] == "mtcnn-pnet"
    with open("/dev/full", "w") as full:  # nowhere to say it either: the exit code alone
        both = subprocess.run([*NPUSIM, "archs"], stdout=full, stderr=full, cwd=tmp_path,
                              env=env, timeout=300)
    assert both.returncode == cli.EXIT_BAD_INPUT
    closed = npusim(["archs"], stdout=subprocess.DEVNULL, pass_fds=(),
                    preexec_fn=lambda: os.close(1))
    assert (closed.returncode, closed.stderr) == (
        cli.EXIT_BAD_INPUT, "npusim: error: standard output: its descriptor is closed; "
                            "nothing more was written there\n")
    quiet = npusim([*run, "--quiet"], stdout=subprocess.DEVNULL, preexec_fn=lambda: os.close(1))
    assert (quiet.returncode, quiet.stderr) == (0, "")


@pytest.mark.parametrize("buffered", [True, False])
def test_a_closed_standard_output_stops_quietly_after_the_files_are_written(tmp_path, buffered):
    for argv in (["models"], ["run", "mtcnn-pnet", "--json", "r.json", "--csv", "r.csv"],
                 ["run", "mtcnn-pnet", "--quiet", "--json", "-"],
                 ["export-topology", "mtcnn-pnet", "-"],
                 ["compare", "mtcnn-pnet", "--arch", "systolic-32x32-ws", "systolic-32x32-os",
                  "--json", "c.json"]):
        done = closed_stdout_run(*argv, cwd=tmp_path, buffered=buffered)
        assert (done.returncode, done.stderr) == (cli.EXIT_PIPE_CLOSED, ""), argv
    assert json.loads((tmp_path / "r.json").read_text())["model"] == "mtcnn-pnet"
    assert (tmp_path / "r.csv").read_text().startswith("name,dataflow,shape,")
    assert len(json.loads((tmp_path / "c.json").read_text())["archs"]) == 2
