"""The command line, run for real: reports, --check, and every bad input (one line, exit 2,
nothing written)."""

import csv
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import npusim
from npusim import cli
from npusim.arch import presets
from npusim.frontends import zoo

SMALL = ["resnet18", "--input-shape", "1,3,32,32"]  # the real ResNet-18 on a 32x32 photo
NPUSIM = shutil.which("npusim", path=str(Path(sys.executable).parent)) or shutil.which("npusim")


def main(capsys, *argv):
    """(exit code, stdout, stderr) of ``npusim argv``."""
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def topology(tmp_path, rows: str, name: str = "net.csv") -> Path:
    path = tmp_path / name
    path.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, "
                    "Channels, Num Filter, Strides,\n" + rows)
    return path


def one_op_onnx(path: Path, op: str, weight: np.ndarray, x_shape, y_shape, *, opset: int = 13,
                name: str = "c", **attrs) -> Path:
    """An ONNX file at ``path`` of one ``op`` node (``name``) of ``x`` and the constant ``w``
    (``weight``) to ``y``, stamped with ``opset``."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node(op, ["x", "w"], ["y"], name=name, **attrs)], path.stem,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(y_shape))],
        [numpy_helper.from_array(weight, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


# ---- commands that work -------------------------------------------------------------------

def test_version(capsys):
    code, out, _ = main(capsys, "--version")
    assert code == 0 and out.strip() == f"npusim {npusim.__version__}"


def test_models_lists_every_zoo_model_with_a_description(capsys):
    code, out, _ = main(capsys, "models")
    assert code == 0
    for name in zoo.names():
        line = next(line for line in out.splitlines() if line.split()[:1] == [name])
        assert len(line.split()) > 2, f"{name} has no description"


def test_archs_lists_every_preset_with_its_dataflow(capsys):
    code, out, _ = main(capsys, "archs")
    assert code == 0
    for name in presets():
        arch = npusim.load_arch(name)
        assert any(line.split()[:2] == [name, arch.dataflow] for line in out.splitlines())
    assert "memory of every preset: SRAM ifmap 64 KiB" in out  # the presets share one memory


def test_bandwidth_flag_times_the_same_layers_on_another_memory(tmp_path, capsys):
    """A 3x3 conv whose filters stream through DRAM: slower at 1 B/cycle, compute-only when
    unlimited; the report says which memory it timed."""
    csv_path = topology(tmp_path, "conv1, 30, 30, 3, 3, 16, 40, 1,\n")
    docs = {}
    for bw in ("1", "unlimited"):
        out_json = tmp_path / f"{bw}.json"
        code, out, _ = main(capsys, "run", csv_path, "--bandwidth", bw, "--json", out_json)
        assert code == 0
        docs[bw] = json.loads(out_json.read_text())["totals"]
    assert docs["unlimited"]["stall_cycles"] == 0 < docs["1"]["stall_cycles"]
    assert docs["unlimited"]["compute_cycles"] == docs["1"]["compute_cycles"]
    assert "unlimited DRAM bandwidth" in docs["unlimited"]["memory"]
    assert "DRAM 1 B/cycle" in docs["1"]["memory"]


def test_no_command_prints_help_and_exits_2(capsys):
    code, out, _ = main(capsys)
    assert code == 2 and "run" in out and "models" in out and "archs" in out


def test_run_prints_layer_table_and_totals(capsys):
    code, out, err = main(capsys, "run", *SMALL)
    assert code == 0 and err == "", err  # no progress bar when stderr is not a terminal
    lines = out.splitlines()
    photo = zoo.MODELS["resnet18"]().photo
    assert lines[0] == f"resnet18 on systolic-32x32-ws | float32 | mode run | input: {photo}"
    assert lines[1] == "systolic rows=32 cols=32 stationary=ws stream_tile=0"
    graph = zoo.build("resnet18", size=32)
    names = [line.split("│")[0].strip() for line in lines if "│" in line]
    assert names[1:] == [n.name for n in graph.conv_nodes] + ["vector unit", "total"]
    for key in ("cycles", "time at 1000 MHz", "utilisation", "energy", "DRAM traffic"):
        assert any(line.startswith(key) for line in lines), key


def test_json_and_csv_reports(tmp_path, capsys):
    j, c = tmp_path / "r.json", tmp_path / "r.csv"
    code, out, _ = main(capsys, "run", "mtcnn-rnet", "--arch", "systolic-32x32-os", "--batch", "2",
                       "--json", j, "--csv", c)
    assert code == 0
    doc = json.loads(j.read_text())
    graph = zoo.build("mtcnn-rnet", batch=2)
    assert [layer["name"] for layer in doc["layers"]] == [n.name for n in graph.nodes]
    assert (doc["model"], doc["mode"], doc["dtype"], doc["dataflow"], doc["batch"]) == \
        ("mtcnn-rnet", "run", "float32", "systolic", 2)
    assert doc["npusim_version"] == npusim.__version__
    assert doc["arch"]["name"] == "systolic-32x32-os"
    assert doc["arch"]["params"]["stationary"] == "os"
    assert doc["check"] is None
    conv1 = graph.layers["conv1"]
    assert doc["layers"][0]["dense_macs"] == conv1.macs == 2 * 28 * 22 * 22 * 3 * 3 * 3
    assert doc["totals"]["cycles"] == sum(layer["cycles"] for layer in doc["layers"])
    rows = list(csv.DictReader(c.open()))
    assert [r["name"] for r in rows] == [n.name for n in graph.nodes] + ["total"]
    assert int(rows[-1]["cycles"]) == doc["totals"]["cycles"]
    assert f"{doc['totals']['cycles']:,}" in out


def test_quiet_prints_nothing_and_still_writes(tmp_path, capsys):
    path = tmp_path / "r.json"
    code, out, err = main(capsys, "run", "mtcnn-pnet", "--quiet", "--json", path)
    assert (code, out, err) == (0, "", "")
    assert json.loads(path.read_text())["model"] == "mtcnn-pnet"


def test_topology_csv_runs_shape_only_with_scalesims_cycle_count(tmp_path, capsys):
    """Two rows on the 32x32 WS array; SCALE-Sim's count per layer: Ho = ceil((H - Fh + S) / S),
    ceil(Fh*Fw*C / 32) * ceil(K / 32) folds of (2*32 + 32 + Ho*Wo - 2) cycles, minus one."""
    csv_path = topology(tmp_path, "conv1, 30, 30, 3, 3, 16, 40, 1,\nconv2, 28, 28, 1, 1, 40, "
                                  "8, 2,\n")
    out_json = tmp_path / "t.json"
    code, out, _ = main(capsys, "run", csv_path, "--json", out_json, "--bandwidth",
                        "unlimited")  # SCALE-Sim's stall-free count
    assert code == 0 and "input: shapes only" in " ".join(out.split("layer")[0].split())
    doc = json.loads(out_json.read_text())
    expected = [math.ceil(144 / 32) * math.ceil(40 / 32) * (96 + 28 * 28 - 2) - 1,
                math.ceil(40 / 32) * math.ceil(8 / 32) * (96 + 15 * 15 - 2) - 1]  # 29/2 -> 15
    assert [layer["cycles"] for layer in doc["layers"]] == expected
    assert doc["mode"] == "estimate" and doc["input"].startswith("shapes only")


@pytest.mark.parametrize("channels, source", [(3, "chelsea"), (2, "seeded standard normal")])
def test_imported_model_gets_a_photo_or_seeded_values(tmp_path, capsys, channels, source):
    pytest.importorskip("torch")
    factory = tmp_path / "net.py"
    factory.write_text("import torch.nn as nn\n\n\ndef build():\n"
                       f"    return nn.Sequential(nn.Conv2d({channels}, 4, 3), nn.ReLU())\n")
    report = tmp_path / "r.json"
    code, out, _ = main(capsys, "run", f"{factory}:build", "--input-shape",
                        f"2,{channels},12,12", "--check", "--quiet", "--json", report)
    assert code == 0 and out.endswith(": ok\n")
    doc = json.loads(report.read_text())
    assert doc["input"].startswith(source) and doc["input_shape"] == [2, channels, 12, 12]
    assert doc["layers"][0]["dense_macs"] == 2 * 4 * 10 * 10 * channels * 3 * 3


# ---- --check ------------------------------------------------------------------------------

def test_check_float32_passes_against_torch(tmp_path, capsys):
    path = tmp_path / "r.json"
    code, out, _ = main(capsys, "run", *SMALL, "--check", "--quiet", "--json", path)
    assert code == 0
    nodes = len(zoo.build("resnet18", size=32).nodes)
    line = out.strip()
    assert line.startswith(f"check against torch, {nodes} nodes: worst relative error ")
    assert line.endswith("(tolerance 0.0001): ok")
    check = json.loads(path.read_text())["check"]
    assert check["passed"] and check["worst_relative_error"] < 1e-4
    assert check["nodes_compared"] == nodes and check["limit"] == 1e-4


def test_check_int8_stays_within_the_rounding_bound(capsys):
    code, out, _ = main(capsys, "run", "mtcnn-rnet", "--dtype", "int8", "--check", "--quiet")
    assert code == 0
    assert "6 convs on their own int8-run inputs" in out and "(limit 1): ok" in out


@pytest.mark.parametrize("dtype, node, shift", [("float32", "conv3", 1e-3),
                                                ("int8", "conv3", 0.1)])
def test_check_fails_with_exit_1_naming_the_layer(tmp_path, capsys, monkeypatch, dtype, node,
                                                   shift):
    """A torch reference off at one layer (by ``shift`` x its largest value) must be caught
    and named. (int8: only the reference conv is shifted, not the convs of |x| and |w| that
    make the rounding bound, recognisable by having no bias.)"""
    from npusim import torch_ref

    real = torch_ref.torch_outputs

    def off(graph, x):
        values = real(graph, x)
        if node in values and graph.node(node).op.bias is not None:
            values[node] = values[node] + shift * np.abs(values[node]).max()
        return values

    monkeypatch.setattr(torch_ref, "torch_outputs", off)
    path = tmp_path / "r.json"
    code, out, _ = main(capsys, "run", "mtcnn-rnet", "--dtype", dtype, "--check", "--quiet",
                       "--json", path)
    assert code == 1
    assert "FAILED" in out and f" at {node}" in out
    assert json.loads(path.read_text())["check"]["passed"] is False


def test_check_without_torch_is_one_clear_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    path = tmp_path / "r.json"
    code, _, err = main(capsys, "run", "mtcnn-pnet", "--check", "--json", path)
    assert code == 2
    assert err == ("npusim: error: --check needs PyTorch, which is not installed: "
                   "pip install 'npusim[torch]'\n")
    assert not path.exists()


# ---- bad input: one line on stderr, exit 2, nothing written -------------------------------

def bad_cases(tmp: Path):
    (tmp / "bad.toml").write_text("[systolic]\nrows = = 4\n")
    (tmp / "unknown.toml").write_text("[systolic]\nrows = 4\nheight = 2\n")
    (tmp / "zero.toml").write_text("[systolic]\nrows = 0\n")
    (tmp / "notes.jpg").write_text("not a picture\n")
    (tmp / "binary.toml").write_bytes(bytes([0x98, 0xff, 0x00]))
    (tmp / "junk.onnx").write_bytes(bytes(range(7, 200)))
    (tmp / "folder.onnx").mkdir()  # once "no such file": the path exists
    (tmp / "model.pt").write_bytes(b"PK\x03\x04")
    topology(tmp, "conv1, -5, 224, 7, 7, 3, 64, 2,\n", "negative.csv")
    topology(tmp, "conv1, 224, 224, 7, 7, 3, 64, 2,\n", "good.csv")
    return [
        (["resnet19"], r"model 'resnet19': not in the zoo; choose one of alexnet, vgg16, "
                       r"resnet18, .*lenet-digits"),
        (["mtcnn-pnet", "--arch", tmp / "bad.toml"], r"bad\.toml: not valid TOML: .*line 2"),
        (["mtcnn-pnet", "--arch", tmp / "unknown.toml"],
         r"unknown\.toml: systolic: unknown key\(s\) height; valid keys: cols, rows, stationary"),
        (["mtcnn-pnet", "--arch", tmp / "zero.toml"],
         r"zero\.toml: systolic\.rows=0: must be >= 1"),
        (["mtcnn-pnet", "--arch", tmp / "none.toml"], r"none\.toml: no such arch file \(or a "
                                                       r"preset: .*systolic-32x32-ws"),
        (["mtcnn-pnet", "--arch", "tpu"], r"arch 'tpu': not a preset \(.*\) nor a \.toml file"),
        ([tmp / "negative.csv"],
         r"negative\.csv: line 2 \(conv1\): field 'IFMAP Height'='-5': must be an integer "
         r"from 1 to 2\*\*20"),
        ([tmp / "missing.csv"], r"missing\.csv: no such file"),
        ([tmp / "folder.onnx"], r"folder\.onnx: a folder; give a \.onnx file"),
        (["mtcnn-pnet", "--arch", tmp / "binary.toml"], r"binary\.toml: not a TOML text file"),
        ([tmp / "junk.onnx"], r"junk\.onnx: .*does not parse as an ONNX"),
        ([tmp / "missing.onnx"], r"missing\.onnx: no such file"),
        # once "not in the zoo", however plainly a file
        ([tmp / "model.pt"], r"model\.pt: a PyTorch file, which holds weights \(or a pickled "
                             r"module\) but not the code that runs them \(npusim reads "
                             r"TorchScript archives, .*\); name a Python factory"),
        ([tmp / "net.tflite"], r"net\.tflite: a TensorFlow Lite model; npusim reads a zoo name, "
                               r"a \.onnx, a \.csv, a TorchScript \.pt, a \.pt2 or "
                               r"file\.py:factory: convert it to ONNX"),
        ([tmp / "missing.pt2"], r"missing\.pt2: no such file"),
        ([tmp / "notes.jpg"], r"notes\.jpg: a file npusim does not read as a model; give a zoo "
                              r"name"),
        ([tmp], r": a folder npusim does not read as a model; give a zoo name"),
        (["mtcnn-rnet", "--input", tmp / "notes.jpg"], r"notes\.jpg: not an image"),
        (["mtcnn-rnet", "--input", tmp / "gone.png"], r"gone\.png: no such image file"),
        (["mtcnn-rnet", "--input", tmp], r"in: is a folder; --input takes one image file"),
        (["mtcnn-pnet", "--batch", "0"],
         r"argument --batch: '0': must be an integer from 1 to 1,048,576"),
        (["mtcnn-pnet", "--batch", "two"], r"argument --batch: 'two': must be an integer from 1"),
        # past int64: once a traceback from numpy
        (["mtcnn-pnet", "--batch", "99999999999999999999"],
         r"argument --batch: '99999999999999999999': must be an integer from 1 to 1,048,576"),
        (["resnet18", "--seed", "-1"], r"argument --seed: '-1': must be an integer >= 0"),
        # once read as '.', the folder npusim runs in, and refused as a folder
        (["mtcnn-pnet", "--json", ""], r"argument --json: '': an empty name; give a file name"),
        (["mtcnn-pnet", "--density", "1.5"],
         r"argument --density: '1\.5': must be a weight density in \(0, 1\] or "
         r"'deep-compression'"),
        (["mtcnn-pnet", "--density", "0"], r"argument --density: '0': must be"),
        (["resnet18", "--density", "deep-compression"],
         r"resnet18: the deep-compression preset has per-layer densities only for alexnet"),
        (["mtcnn-pnet", "--dtype", "int4"], r"argument --dtype: invalid choice: 'int4'"),
        (["mtcnn-pnet", "--mode", "fast"], r"argument --mode: invalid choice: 'fast'"),
        (["mtcnn-pnet", "--dataflow", "tpu"], r"dataflow 'tpu': must be one of .*systolic"),
        (["mtcnn-pnet", "--input-shape", "1,3,32"],
         r"argument --input-shape: '1,3,32': must be four integers from 1 to 1,048,576, "
         r"N,C,H,W"),
        (["resnet18", "--input-shape", "1,3,2000000,2000000"],
         r"argument --input-shape: '1,3,2000000,2000000': must be four integers from 1 to "),
        (["lenet-digits", "--input-shape", "1,1,16,16"], r"lenet-digits: size=16"),
        (["alexnet", "--input-shape", "1,3,32,32"],  # once the layer alone, not the model
         r"alexnet: input shape 1,3,32,32 does not fit it: pool5: pool window 3x3 does not "
         r"fit input 1x1"),
        (["resnet18", "--input-shape", "1,3,32,48"],
         r"resnet18: input shape 1,3,32,48 is 32x48; resnet18 takes square inputs only "
         r"\(N,C,S,S: H = W = S\)"),
        (["resnet18", "--input-shape", "2,3,32,32", "--batch", "3"],
         r"--batch 3 contradicts --input-shape N=2"),
        ([tmp / "good.csv", "--check"], r"good\.csv: a topology CSV is run shape-only .*--check"),
        ([tmp / "good.csv", "--input", "chelsea"], r"topology CSV .*--input need"),
        ([tmp / "good.csv", "--mode", "run"],  # ran, and was reported as mode estimate
         r"good\.csv: a topology CSV is run shape-only .*; --mode needs a model with weights"),
        (["mtcnn-pnet", "--json", tmp / "no" / "r.json"], r"--json .*r\.json: folder .* does "
                                                          r"not exist"),
        (["mtcnn-pnet", "--csv", tmp], r"--csv .*: is a folder, not a regular file"),
        (["mtcnn-pnet", "--bogus"], r"unrecognized arguments: --bogus"),
        (["mtcnn-pnet", "--bandwidth", "0"],
         r"argument --bandwidth: '0': must be DRAM bytes per cycle > 0, or 'unlimited'"),
        (["mtcnn-pnet", "--bandwidth", "fast"], r"argument --bandwidth: 'fast': must be"),
    ]


OLD_REPORT = '{"schema_version": 1, "npusim_version": "0.1.0"}\n'


def test_bad_inputs_give_one_line_exit_2_and_write_nothing(tmp_path, capsys):
    inputs = tmp_path / "in"
    inputs.mkdir()
    out_dir = tmp_path / "out"
    for argv, message in bad_cases(inputs):
        out_dir.mkdir()
        (out_dir / "old.json").write_text(OLD_REPORT)  # an earlier run's: npusim may replace it
        reports = ["--json", out_dir / "old.json", "--csv", out_dir / "new.csv"]
        if "--json" in argv or "--csv" in argv:
            reports = []
        code, out, err = main(capsys, "run", *argv, *reports)
        shown = " ".join(map(str, argv))
        assert code == 2, shown
        assert err.count("\n") == 1 and err.startswith("npusim: error: "), (shown, err)
        assert "Traceback" not in err
        assert re.search(message, err), (shown, err)
        assert sorted(os.listdir(out_dir)) == ["old.json"], shown
        assert (out_dir / "old.json").read_text() == OLD_REPORT, shown
        shutil.rmtree(out_dir)


@pytest.mark.parametrize("group, why", [
    (4, "weight has 2 input channels per group x groups=4, but the input has C=6"),
    (0, "groups=0: must be an integer >= 1 dividing the input's C=6 channels")])
def test_groups_that_do_not_divide_channels(tmp_path, capsys, group, why):
    """An ONNX conv with group=4, or 0, on 6 input channels: refused naming the file and
    node (and, for 0, the bound: it once read as a channel count that did not add up)."""
    path = one_op_onnx(tmp_path / "groups.onnx", "Conv", np.ones((4, 2, 3, 3), np.float32),
                       (1, 6, 8, 8), (1, 4, 6, 6), name="conv_g", group=group)
    report = tmp_path / "r.json"
    code, _, err = main(capsys, "run", path, "--json", report)
    assert code == 2
    assert err == f"npusim: error: {path}: conv_g: {why}\n"
    assert not report.exists()


def test_a_model_of_a_flat_input_runs_on_seeded_values_and_refuses_an_image(tmp_path, capsys):
    """A MatMul on a 1 x 16 input: no photo fits it, so it runs on seeded values (checked
    against onnxruntime); given an image, one line says why not (it once failed unpacking
    N, C, H, W). So for a conv of 4 input channels (once 'channels=4: must be 1 or 3',
    naming neither model nor image)."""
    pytest.importorskip("onnxruntime")
    path = one_op_onnx(tmp_path / "flat.onnx", "MatMul",
                       np.arange(64, dtype=np.float32).reshape(16, 4) / 64, (1, 16), (1, 4))
    report = tmp_path / "r.json"
    code, _, err = main(capsys, "run", path, "--check", "--quiet", "--json", report)
    assert (code, err) == (0, "")
    saved = json.loads(report.read_text())
    assert saved["input_shape"] == [1, 16] and saved["totals"]["macs"] == 64
    photo = Path(__file__).resolve().parents[1] / "examples" / "cat.jpg"
    code, _, err = main(capsys, "run", path, "--input", photo)
    assert code == 2
    assert err == (f"npusim: error: {path}: its input is 1x16, not N,C,H,W: an image cannot "
                   "feed it; leave out --input for seeded values\n")
    four = one_op_onnx(tmp_path / "four.onnx", "Conv", np.ones((2, 4, 1, 1), np.float32),
                       (1, 4, 5, 5), (1, 2, 5, 5))  # RGBA-like: 4 channels
    assert main(capsys, "run", four, "--quiet")[:3:2] == (0, "")
    code, _, err = main(capsys, "run", four, "--input", photo)
    assert (code, err) == (2, f"npusim: error: {four}: its input has 4 channels; an image gives "
                              "1 (grey) or 3 (RGB): leave out --input for seeded values\n")


def test_a_file_onnxruntime_will_not_load_is_checked_in_one_line(tmp_path, capsys,
                                                                monkeypatch):
    """A conv stamped with opset 99: npusim runs it; onnxruntime will not load it, so onnx's
    reference evaluator judges it; where that cannot run it either, ``--check`` says so in
    one line (once onnxruntime's traceback)."""
    pytest.importorskip("onnxruntime")
    from npusim.report import check

    path = one_op_onnx(tmp_path / "future.onnx", "Conv", np.ones((2, 1, 3, 3), np.float32),
                       (1, 1, 6, 6), (1, 2, 4, 4), opset=99)
    assert main(capsys, "run", path, "--quiet")[:3:2] == (0, "")
    code, out, err = main(capsys, "run", path, "--quiet", "--check")
    assert code == 0 and "judged by onnx's reference evaluator" in out, err
    monkeypatch.setattr(check, "onnx_reference_error", lambda *args: None)
    code, _, err = main(capsys, "run", path, "--quiet", "--check")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"npusim: error: {path}: neither onnxruntime (")
    assert err.endswith("nor onnx's reference evaluator can run it for --check; run without "
                        "--check\n")


def test_a_file_onnxruntime_refuses_is_judged_by_the_onnx_reference_evaluator(tmp_path,
                                                                            capsys):
    """A dilated conv with auto_pad SAME_UPPER (a torch export of padding='same',
    dilation=2), which onnxruntime refuses to run: --check aborted the run; the spec's
    evaluator now judges the outputs, and the line and JSON say so."""
    pytest.importorskip("onnxruntime")
    weight = np.random.default_rng(0).standard_normal((2, 1, 3, 3)).astype(np.float32)
    path = one_op_onnx(tmp_path / "dil.onnx", "Conv", weight, (1, 1, 9, 9), (1, 2, 9, 9),
                       dilations=[2, 2], auto_pad="SAME_UPPER")
    code, out, err = main(capsys, "run", path, "--quiet", "--check", "--json",
                          tmp_path / "r.json")
    assert code == 0, err
    assert "outputs against onnxruntime: not compared (onnxruntime cannot run it (" in out
    assert "judged by onnx's reference evaluator) (against onnx's reference evaluator, the " \
           "ONNX spec's arithmetic: " in out and out.rstrip().endswith(": ok")
    facts = json.loads((tmp_path / "r.json").read_text())["check"]
    assert facts["onnxruntime_relative_error"] is None and facts["passed"]
    assert facts["onnx_reference_relative_error"] < 1e-6


def test_a_model_file_s_extension_is_read_in_any_case(tmp_path, capsys):
    """SMALL.ONNX and NET.CSV are an ONNX model and a topology (once 'not in the zoo')."""
    pytest.importorskip("onnx")
    examples = Path(__file__).resolve().parents[1] / "examples"
    shutil.copy(examples / "small_cnn.onnx", tmp_path / "SMALL.ONNX")
    topology(tmp_path, "conv1, 32, 32, 3, 3, 3, 8, 1,\n", "NET.CSV")
    for name in ("SMALL.ONNX", "NET.CSV"):
        report = tmp_path / f"{name}.json"
        assert main(capsys, "run", tmp_path / name, "--quiet", "--json", report)[:3:2] == (0, "")
        assert json.loads(report.read_text())["totals"]["macs"] > 0


def test_real_subprocess_bad_and_good(tmp_path):
    assert NPUSIM, "the npusim console script is not installed"
    report = tmp_path / "r.json"
    bad = subprocess.run([NPUSIM, "run", "resnet-18", "--json", str(report)],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("npusim: error: model 'resnet-18': not in the zoo")
    assert bad.stderr.count("\n") == 1 and not report.exists()
    good = subprocess.run([NPUSIM, "run", "mtcnn-pnet", "--quiet", "--json", str(report)],
                          capture_output=True, text=True, timeout=120)
    assert (good.returncode, good.stdout, good.stderr) == (0, "", "")
    assert json.loads(report.read_text())["layers"]


def test_missing_onnx_extra_is_one_line(tmp_path, capsys, monkeypatch):
    """(onnx_import says so itself; the CLI's net for any optional extra catches the rest.)"""
    monkeypatch.setitem(sys.modules, "onnx", None)
    path = tmp_path / "net.onnx"
    path.write_bytes(b"\x08\x07")
    code, _, err = main(capsys, "run", path)
    assert code == 2
    assert re.fullmatch(r"npusim: error: .*onnx.* pip install 'npusim\[onnx\]'\n", err), err


def test_any_missing_optional_extra_is_one_line(capsys, monkeypatch):
    import npusim.frontends

    def needs_torch(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(npusim.frontends, "load_model_and_module", needs_torch)
    code, _, err = main(capsys, "run", "net.py:build")
    assert code == 2
    assert err == ("npusim: error: this needs torch, which is not installed: "
                   "pip install 'npusim[torch]'\n")


def test_out_of_memory_is_one_line(capsys, monkeypatch):
    def too_big(*args, **kwargs):
        raise MemoryError("Unable to allocate 56.1 GiB for an array")

    monkeypatch.setattr(zoo, "input_for", too_big)
    code, _, err = main(capsys, "run", "mtcnn-pnet", "--batch", "100000")
    assert code == 2
    assert err == ("npusim: error: out of memory: Unable to allocate 56.1 GiB for an array; try "
                   "a smaller --batch or input\n")
    from npusim import tune

    monkeypatch.setattr(tune, "tune_groups_report", too_big)  # it has --size, no --batch
    code, _, err = main(capsys, "tune-groups", "edgetpu_v2_like", "--size", "99999")
    assert (code, err) == (2, "npusim: error: out of memory: Unable to allocate 56.1 GiB for "
                              "an array; try a smaller --size\n")


# ---- progress bar -------------------------------------------------------------------------

def test_progress_bar_appears_only_after_the_delay(monkeypatch):
    monkeypatch.setattr(cli, "PROGRESS_AFTER_S", 1e9)
    bar = cli._ProgressBar(enabled=True)
    bar(0, 10, "conv1")
    assert bar.bar is None  # a fast run never shows one
    monkeypatch.setattr(cli, "PROGRESS_AFTER_S", 0.0)
    bar(1, 10, "conv2")
    assert bar.bar is not None and bar.bar.tasks[0].completed == 1
    assert bar.bar.tasks[0].description == "conv2"
    bar.close()
    off = cli._ProgressBar(enabled=False)
    off(5, 10, "conv3")
    assert off.bar is None


@pytest.mark.slow
def test_readme_first_command(capsys):
    """``npusim run resnet18 --check`` on built-in defaults: 224x224 photo, default arch."""
    code, out, _ = main(capsys, "run", "resnet18", "--check")
    assert code == 0
    assert out.splitlines()[0].startswith("resnet18 on systolic-32x32-ws")
    assert out.strip().splitlines()[-1].endswith("(tolerance 0.0001): ok")


def test_tune_groups_marks_a_group_size_that_fills_the_tile(capsys):
    code, out, err = main(capsys, "tune-groups", "edgetpu_v2_like", "--size", "64",
                          "--arch", "group-tile-32mac")
    assert code == 0, err
    marked = [line.split() for line in out.splitlines() if line.endswith("<- fills MACs")]
    assert marked, out
    for g, size, *_ in marked:  # outputs per group divide the 32 MACs, or are a multiple
        assert 32 % int(size) == 0 or int(size) % 32 == 0, (g, size)


def test_tune_groups_needs_a_group_tile_arch(capsys):
    code, _, err = main(capsys, "tune-groups", "resnet18", "--arch", "systolic-32x32-ws")
    assert code == 2
    assert err.strip() == ("npusim: error: arch 'systolic-32x32-ws': has no [group-tile] "
                           "section; use a group-tile preset (group-tile-32mac, "
                           "group-tile-64mac) or add the section")


def test_export_topology_round_trips_the_systolic_cycles(tmp_path, capsys):
    out = tmp_path / "r18.csv"
    code, text, err = main(capsys, "export-topology", *SMALL, out)
    assert code == 0, err
    assert text.strip() == f"wrote 21 conv layers of resnet18 to {out}"
    grouped = tmp_path / "mbv2.csv"
    code, text, err = main(capsys, "export-topology", "mobilenet_v2", grouped)
    rows = len(grouped.read_text().splitlines()) - 1
    assert code == 0 and rows > 53, err
    assert text.strip() == (f"wrote 53 conv layers of mobilenet_v2 to {grouped} ({rows:,} rows: "
                            "SCALE-Sim has no conv groups, so a grouped conv is a row per group)")
    graph = zoo.build("resnet18", size=32)
    direct = npusim.simulate(graph, zoo.input_for("resnet18", size=32)).conv_layers
    from_csv = npusim.simulate_shapes(npusim.frontends.topology.read_topology(out))
    # the stall-free cycles: a topology row holds the padded input, so its DRAM bytes
    # (the input pixels read) and with them the stalls may differ
    assert [s.compute_cycles for s in from_csv.layers] == [s.compute_cycles for s in direct]
    assert [s.dense_macs for s in from_csv.layers] == [s.dense_macs for s in direct]


@pytest.mark.parametrize("argv, message", [
    (["dilated-segnet", "seg.csv"], "ctx_r2: cannot be written as a SCALE-Sim topology row: "
                                    r"dilation=\(2, 2\)"),
    (["resnet18", "r18.txt"], r"r18.txt: the topology file must end in .csv"),
    (["resnet18", "missing/r18.csv"], r"missing/r18.csv: folder .*missing does not exist"),
])
def test_export_topology_refusals_write_nothing(tmp_path, capsys, argv, message):
    code, _, err = main(capsys, "export-topology", argv[0], tmp_path / argv[1])
    assert code == 2 and re.search(message, err), err
    assert list(tmp_path.iterdir()) == []


def test_a_much_smaller_input_image_is_one_warning_line(tmp_path, capsys):
    from PIL import Image

    path = tmp_path / "tiny.png"
    Image.fromarray(np.full((20, 30, 3), 128, np.uint8)).save(path)
    code, out, err = main(capsys, "run", "resnet18", "--input-shape", "1,3,64,64", "--input",
                          path, "--quiet", "--mode", "estimate")
    assert (code, out) == (0, "")
    assert err == (f"npusim: warning: {path}: 30x20 pixels (W x H), upscaled 3.2x to fill the "
                   "model's 64x64 input: most of its detail is interpolated\n")
