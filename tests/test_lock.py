"""requirements.lock: one exact version per package, within pyproject.toml's ranges, the CPU
torch build, and both README commands install it."""

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def locked() -> dict[str, Version]:
    """The lock's pins, by canonical package name."""
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and not line.startswith("-"), f"not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = Version(version)
    return pins


def test_every_dependency_is_locked_within_its_range():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + [r for extra in ("torch", "onnx", "dev")
                                        for r in project["optional-dependencies"][extra]]
    pins = locked()
    for text in wanted:
        req = Requirement(text)
        version = pins[canonicalize_name(req.name)]
        # torch is locked as its CPU build, 2.13.0+cpu, which ==2.13.0 admits
        assert req.specifier.contains(version, prereleases=False), (text, version)


def test_torch_is_the_cpu_build_and_no_cuda_package_is_locked():
    pins = locked()
    assert pins["torch"] == Version("2.13.0+cpu")
    assert not [n for n in pins if n.startswith(("nvidia-", "triton"))]


def test_both_readme_commands_install_with_the_lock():
    readme = (ROOT / "README.md").read_text()
    for name in ("main-command", "test-command"):
        block = re.search(rf"<!-- {name} -->\n```\n(.+?)\n```\n<!-- /{name} -->", readme, re.S)
        assert block and "pip install -q -c requirements.lock -e" in block.group(1), name
