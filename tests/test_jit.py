"""The package's numba caches are dropped when any of its sources changes: numba checks only a
kernel's own file, and a cached caller holds the machine code of the kernels it calls."""

from pathlib import Path

from npusim.jit import STAMP, drop_stale_caches


def _tree(root):
    """A package with a kernel module, a subpackage calling it, and numba caches of both."""
    (root / "sub" / "__pycache__").mkdir(parents=True)
    (root / "__pycache__").mkdir()
    (root / "engine.py").write_text("@njit\ndef split(): return 1\n")
    (root / "sub" / "caller.py").write_text("from ..engine import split\n@njit\ndef f(): ...\n")
    (root / "cli.py").write_text("print('no kernel here')\n")
    caches = [root / "__pycache__" / "engine.split-1.py311.nbi",
              root / "__pycache__" / "engine.split-1.py311.1.nbc",
              root / "sub" / "__pycache__" / "caller.f-1.py311.nbi",
              root / "sub" / "__pycache__" / "caller.f-1.py311.1.nbc"]
    for path in caches:
        path.write_bytes(b"compiled")
    return caches


def test_caches_of_unknown_or_changed_sources_are_dropped_and_kept_otherwise(tmp_path):
    caches = _tree(tmp_path)
    pyc = tmp_path / "__pycache__" / "engine.cpython-311.pyc"
    pyc.write_bytes(b"bytecode")
    assert drop_stale_caches(tmp_path)  # no stamp: made from sources nobody recorded
    assert not any(p.exists() for p in caches) and pyc.exists()
    assert (tmp_path / "__pycache__" / STAMP).exists()
    for path in caches:
        path.write_bytes(b"compiled")
    assert not drop_stale_caches(tmp_path)  # the same sources: kept
    assert all(p.exists() for p in caches)
    (tmp_path / "cli.py").write_text("print('still none')\n")  # no kernel: caches kept
    assert not drop_stale_caches(tmp_path)
    (tmp_path / "engine.py").write_text("@njit\ndef split(): return 2\n")  # the callee alone
    assert drop_stale_caches(tmp_path)
    assert not any(p.exists() for p in caches)  # the caller's cache too
    for path in caches:
        path.write_bytes(b"compiled")
    (tmp_path / "sub" / "new.py").write_text("@intrinsic\ndef g(): ...\n")  # a module added
    assert drop_stale_caches(tmp_path)


def test_a_package_that_cannot_be_written_is_left_alone(tmp_path, monkeypatch):
    """A read-only install: no error, nothing removed (numba then caches by its own rule)."""
    caches = _tree(tmp_path)

    def refuse(path, *args, **kwargs):
        raise PermissionError(f"read-only: {path}")

    monkeypatch.setattr(Path, "unlink", refuse)
    monkeypatch.setattr(Path, "write_text", refuse)
    assert not drop_stale_caches(tmp_path)
    assert all(p.exists() for p in caches)
