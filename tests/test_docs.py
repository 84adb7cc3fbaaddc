"""The examples of README.md and docs/*.md run as written, from a fresh folder.

A fenced block that is an example (Python, or shell lines calling npusim, python or tools/)
carries a marker on the line before its fence:

- ``<!-- runnable -->`` or ``<!-- runnable slow -->``: run here, in a temporary folder holding a
  copy of ``examples/`` (so nothing is written into the checkout). Shell lines run in bash with
  ``set -e`` and this interpreter's environment first on PATH (``npusim`` is its entry point);
  in a transcript (lines starting ``$ ``) only those lines run, the rest is shown output. A
  Python block runs as a script with this interpreter.
- ``<!-- template -->``: placeholders to fill in (MODEL, FILE), not run.
- ``<!-- not run: WHY -->``: real commands, not run here for the reason given (the README's two
  commands, for example, are what CI runs).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- (runnable(?: slow)?|template|not run: .+|(?:main|test)-command) -->$")
SHELL_START = re.compile(r"^(\$ |npusim\b|python3?\b|tools/|\S+=\S* tools/)")
TIMEOUT_S = 600


@dataclass(frozen=True)
class Block:
    """One fenced block: where it starts, its info string, its text, its marker (or None)."""

    doc: Path
    line: int
    info: str
    text: str
    marker: str | None

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def is_python(self) -> bool:
        return self.info in ("python", "py")

    @property
    def is_example(self) -> bool:
        """Code a reader would run: Python, or shell lines calling npusim, python or tools/."""
        if self.is_python or self.info in ("sh", "bash", "shell", "console"):
            return True
        return self.info == "" and any(SHELL_START.match(s) for s in self.text.splitlines())


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of a Markdown file, with the marker on the line before each."""
    lines = doc.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```"):
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            before = lines[i - 1].strip() if i else ""
            m = MARKER.match(before)
            found.append(Block(doc, i + 1, lines[i][3:].strip(), "\n".join(lines[i + 1:end]),
                               m.group(1) if m else None))
            i = end
        i += 1
    return found


ALL = [b for doc in DOCS for b in blocks(doc)]
RUNNABLE = [pytest.param(b, id=b.id, marks=[pytest.mark.slow] if b.marker.endswith("slow") else [])
            for b in ALL if b.marker and b.marker.startswith("runnable")]


def shell_script(text: str) -> str:
    """The commands of a shell block: continuation lines joined; only the ``$ `` lines of a
    transcript."""
    lines = text.replace("\\\n", " ").splitlines()
    if any(s.startswith("$ ") for s in lines):
        lines = [s[2:] for s in lines if s.startswith("$ ")]
    return "\n".join(["set -ex", *lines])


def run_block(block: Block, cwd: Path) -> subprocess.CompletedProcess:
    """Run one example in ``cwd`` with this interpreter's environment."""
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["MPLBACKEND"] = "Agg"
    if block.is_python:
        script = cwd / "example.py"
        script.write_text(block.text + "\n")
        cmd = [sys.executable, str(script)]
    else:
        cmd = ["bash", "-c", shell_script(block.text)]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)


def test_every_example_is_marked():
    unmarked = [b.id for b in ALL if b.is_example and b.marker is None]
    assert not unmarked, f"examples with no runnable/template/not run marker: {unmarked}"
    assert len(RUNNABLE) >= 6  # the convention is in use, not silently matching nothing


def test_npusim_entry_point_is_this_interpreters():
    assert (Path(sys.executable).parent / "npusim").is_file()


@pytest.mark.parametrize("block", RUNNABLE)
def test_example_runs_as_written(block, tmp_path):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    before = sorted(p.name for p in ROOT.iterdir())
    done = run_block(block, tmp_path)
    assert done.returncode == 0, (f"{block.id} failed (exit {done.returncode}):\n"
                                  f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    assert sorted(p.name for p in ROOT.iterdir()) == before  # nothing written into the checkout


def test_shell_script_takes_the_commands_of_a_transcript():
    text = "$ npusim run a \\\n  --quiet\nsome output\n$ npusim archs   # comment"
    assert shell_script(text) == "set -ex\nnpusim run a    --quiet\nnpusim archs   # comment"
    assert shell_script("npusim models\nnpusim archs") == "set -ex\nnpusim models\nnpusim archs"


def zoo_table_models() -> list[str]:
    """The first column of docs/zoo.md's model table."""
    text = (ROOT / "docs" / "zoo.md").read_text(encoding="utf-8")
    table = text.split("| model |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return [row.split("|")[1].strip() for row in table]


def test_zoo_page_lists_every_model_npusim_lists():
    from npusim.frontends import zoo

    assert zoo_table_models() == zoo.names()


def test_zoo_page_conv_counts_are_the_built_networks():
    from npusim.frontends import zoo

    text = (ROOT / "docs" / "zoo.md").read_text(encoding="utf-8")
    rows = {r.split("|")[1].strip(): r.split("|") for r in text.splitlines() if r.startswith("| ")}
    for name in ("resnet18", "mtcnn-onet", "lenet-digits", "edgetpu_v2_like"):
        assert int(rows[name][4]) == len(zoo.build(name).conv_nodes), name


@pytest.mark.parametrize("preset", ["systolic-32x32-ws", "input-reuse-1024", "sparse-pairs-32x32",
                                    "dilated-grid-2x2-h3", "group-tile-64mac"])
def test_every_count_a_machine_reports_is_named_on_its_page(preset):
    """Each key of a machine's ``LayerStats.extra`` (the JSON's ``extra``, the CSV's columns)
    appears in backticks, or as ``extra["key"]``, on the machine's page or the JSON schema."""
    import npusim
    from npusim.frontends import zoo
    from npusim.frontends.prune import prune

    graph = prune(zoo.build("mtcnn-rnet"), 0.5)  # zeros for the skipping machines to count
    result = npusim.simulate(graph, zoo.input_for("mtcnn-rnet"), preset, mode="estimate")
    keys = {k for st in result.layers for k in st.extra}
    page = (ROOT / "docs" / f"{result.arch.dataflow}.md").read_text(encoding="utf-8")
    schema = (ROOT / "docs" / "json-schema.md").read_text(encoding="utf-8")
    named = set(re.findall(r"`([a-z_0-9]+)`|extra\[\"([a-z_0-9]+)\"\]", page + schema))
    named = {a or b for a, b in named}
    assert keys and not keys - named, sorted(keys - named)


def test_arch_page_shows_the_example_file():
    """docs/arch.md's TOML is examples/my_npu.toml, which the README runs."""
    (toml,) = [b for b in blocks(ROOT / "docs" / "arch.md") if b.info == "toml"]
    assert toml.text + "\n" == (ROOT / "examples" / "my_npu.toml").read_text(encoding="utf-8")
