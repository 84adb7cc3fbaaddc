"""Modern networks as a new user brings them: each block of post-2018 networks
(tests/data/import/modern_blocks.py, built as torchvision defines them, and YOLOv5's
detection head) through the PyTorch importer (``file.py:factory``) and exported to ONNX,
the example network quantised to int8 (QDQ), and the zoo's real trained models, each run
as ``npusim run ... --check`` in a fresh process; prints the import path, the check's worst
relative error and the command's wall time (seconds, start-up included).

    python bench/bench_import.py [--arch PRESET] [--skip-trained]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = ROOT / "tests" / "data" / "import" / "modern_blocks.py"
FACTORIES = ["se_block", "mobilenet_v3_block", "mbconv", "shufflenet_unit", "mnasnet_head",
             "convnext_block", "deconv_decoder", "detect_head"]
QUANTISED = ROOT / "examples" / "small_cnn_int8.onnx"
TRAINED = ["ppocr-cls", "ppocr-v4-det", "ppocr-v4-rec", "nudenet-320n"]
SHAPE = (1, 3, 64, 64)
CHECK = re.compile(r"worst relative error (\S+) .*?\): (\w+)")


def npusim_check(model: str, arch: str, *extra: str) -> tuple[str, float]:
    """(the check's worst error and verdict, wall seconds) of ``npusim run MODEL --check``."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "npusim", "run", model, "--arch", arch,
                           "--check", "--quiet", *extra], capture_output=True, text=True,
                          cwd=ROOT)
    seconds = time.perf_counter() - start
    found = CHECK.search(done.stdout)
    if found is None:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"failed: {last[:70]}", seconds
    return f"{float(found.group(1)):.2e} {found.group(2)}", seconds


def export_onnx(factory: str, folder: Path) -> Path:
    """The block exported by torch.onnx (the TorchScript exporter, opset 17)."""
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("modern_blocks", BLOCKS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    path = folder / f"{factory}.onnx"
    with warnings.catch_warnings():  # the TorchScript exporter's deprecation notice
        warnings.simplefilter("ignore")
        torch.onnx.export(getattr(module, factory)(), (torch.zeros(SHAPE),), str(path),
                          dynamo=False, opset_version=17)
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="systolic-32x32-ws")
    ap.add_argument("--skip-trained", action="store_true")
    args = ap.parse_args(argv)
    shape = ",".join(map(str, SHAPE))
    print(f"arch {args.arch}; blocks at input {shape}")
    print(f"{'model':<20} {'import path':<22} {'--check worst error':<26} {'wall s':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for factory in FACTORIES:
            rows = [("from_torch", f"{BLOCKS}:{factory}", ("--input-shape", shape)),
                    ("torch.onnx, from_onnx", str(export_onnx(factory, Path(tmp))), ())]
            for path, model, extra in rows:
                check, seconds = npusim_check(model, args.arch, *extra)
                print(f"{factory:<20} {path:<22} {check:<26} {seconds:7.1f}", flush=True)
    check, seconds = npusim_check(str(QUANTISED), args.arch)
    print(f"{QUANTISED.stem:<20} {'QDQ ONNX, from_onnx':<22} {check:<26} {seconds:7.1f}",
          flush=True)
    if not args.skip_trained:
        for name in TRAINED:
            check, seconds = npusim_check(name, args.arch)
            print(f"{name:<20} {'zoo (ONNX wheel)':<22} {check:<26} {seconds:7.1f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
