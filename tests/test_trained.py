"""Real trained networks read from installed wheels (the ``models`` extra): each runs on
every machine preset, its outputs checked against onnxruntime running the same file."""

import json

import numpy as np
import pytest

import npusim
from npusim.errors import ModelError
from npusim.frontends import trained, zoo
from npusim.report.check import onnxruntime_error

TRAINED = list(trained.MODELS)


@pytest.fixture(scope="module", params=TRAINED)
def model(request):
    name = request.param
    return name, zoo.build(name), zoo.input_for(name)


@pytest.mark.parametrize("preset", npusim.presets())
def test_trained_model_on_every_preset_equals_onnxruntime(model, preset):
    name, graph, x = model
    result = npusim.simulate(graph, x, preset, mode="run", keep_outputs=True)
    assert onnxruntime_error(trained.MODELS[name].path(), graph, x, result) <= 1e-4
    assert result.total.cycles > 0


@pytest.mark.parametrize("name", TRAINED)
def test_cli_check_runs_onnxruntime_too(name, capsys):
    from npusim.cli import main

    assert main(["run", name, "--check"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("check against")]
    assert "outputs against onnxruntime" in line and line.endswith("ok"), line


def test_cli_check_of_pruned_weights_says_onnxruntime_was_not_run(tmp_path, capsys):
    """The ONNX file holds the unpruned weights: comparing npusim's pruned network with it
    would fail for no fault of npusim's. PyTorch runs the pruned network; onnxruntime is
    not run, and the line and the JSON say why."""
    from npusim.cli import main

    report = tmp_path / "r.json"
    assert main(["run", "ppocr-cls", "--arch", "sparse-pairs-32x32", "--density", "0.3",
                 "--check", "--json", str(report)]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if x.startswith("check against")]
    assert "outputs against onnxruntime: not compared (--density 0.3 pruned the weights, " \
           "ch_ppocr_mobile_v2.0_cls_infer.onnx holds them unpruned)" in line, line
    assert line.endswith("ok"), line
    outcome = json.loads(report.read_text())["check"]
    assert outcome["onnxruntime_relative_error"] is None and outcome["passed"]
    assert outcome["onnxruntime_not_compared"].startswith("--density 0.3 pruned the weights")
    assert outcome["worst_relative_error"] <= 1e-4


def test_weights_are_the_trained_ones_not_seeded():
    """The seed does not change a trained model's weights."""
    a, b = zoo.build("ppocr-cls", seed=0), zoo.build("ppocr-cls", seed=7)
    assert all(np.array_equal(p.op.weight, q.op.weight)
               for p, q in zip(a.conv_nodes, b.conv_nodes, strict=True))


def test_text_input_is_a_rendered_text_line():
    x = zoo.input_for("ppocr-v4-rec")
    assert x.shape == (1, 3, 48, 320) and x.min() >= -1.0 and x.max() <= 1.0
    ink = (x[0, 0] < 0).mean()  # dark pixels: the glyphs
    assert 0.02 < ink < 0.5


def _onnxruntime(name: str, x: np.ndarray) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(str(trained.MODELS[name].path()),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0], session


def test_line_models_read_their_default_input_as_made_for():
    """The recogniser and the direction classifier get one text line as RapidOCR feeds them a
    detected box: cropped to the ink, 48 rows high, zero to the right. Judged by the models
    themselves in onnxruntime: the classifier says upright (it said upside down, p 0.71, on
    a small line in a white 48 x 192 box) and the recogniser reads the line's text."""
    (scores,), _ = _onnxruntime("ppocr-cls", zoo.input_for("ppocr-cls"))
    assert scores.argmax() == 0 and scores[0] > 0.9  # class 0: 0 degrees
    (probs,), session = _onnxruntime("ppocr-v4-rec", zoo.input_for("ppocr-v4-rec"))
    chars = ["", *session.get_modelmeta().custom_metadata_map["character"].splitlines(), " "]
    best = probs.argmax(axis=1)  # CTC, greedy: repeats merged, blanks (0) dropped
    text = "".join(chars[c] for i, c in enumerate(best) if c and (i == 0 or c != best[i - 1]))
    assert text == trained.OCR_TEXT[0]


def test_fixed_input_size_is_refused_clearly():
    with pytest.raises(ModelError, match="fixed at 48x320"):
        zoo.build("ppocr-v4-rec", size=64)


def test_missing_wheel_names_the_extra(monkeypatch):
    monkeypatch.setattr(trained.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelError, match=r"\.\[models\]"):
        zoo.build("nudenet-320n")


def test_the_recogniser_s_attention_runs_as_ir_ops_not_fallback_nodes():
    """PP-OCRv4's recogniser: its linear layers over the 40 tokens are 1x1 convs and the
    products of two activations in its attention the IR's MatMul, costed by its products
    and sums; nothing runs in onnxruntime (the outputs: ``test_trained_model_on_every_...``)."""
    graph = zoo.build("ppocr-v4-rec")
    kinds = [type(n.op).__name__ for n in graph.nodes]
    assert kinds.count("MatMul") == 4 and "Fallback" not in kinds
    assert len(graph.conv_nodes) == 47
    result = npusim.simulate(graph, zoo.input_for("ppocr-v4-rec"), mode="estimate")
    matmuls = [s for s in result.layers if s.shape == "MatMul"]
    assert len(matmuls) == 4 and all(s.vector_ops > 0 and s.cycles > 0 for s in matmuls)
