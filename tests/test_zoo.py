"""The model zoo: every model equals PyTorch layer by layer in float32 and the exact integer
reference in int8; the MTCNN weights are right (faces found where scikit-image's own detector
finds them); the digits LeNet learns (held-out accuracy >= 0.95)."""

import sys
import time

import numpy as np
import pytest

import npusim
from npusim import quant, reference
from npusim.errors import InputError, ModelError
from npusim.frontends import catalogue, digits, images, mtcnn_nets, zoo

torch_ref = pytest.importorskip("npusim.torch_ref")
pytest.importorskip("torch")

ARCH = "systolic-32x32-ws"
HEAVY = {"resnet50", "vgg16"}
FAST = [n for n in zoo.built_names() if n not in HEAVY]  # the wheels' models: test_trained


@pytest.fixture(scope="session", autouse=True)
def digits_cache(tmp_path_factory):
    """Train lenet-digits once per test session, from scratch, in a private cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("NPUSIM_CACHE", str(tmp_path_factory.mktemp("npusim-cache")))
    yield
    mp.undo()


def rel_err(ours, ref) -> float:
    """max |ours - ref| relative to max |ref| of the tensor."""
    return float(np.abs(ours - ref).max() / max(float(np.abs(ref).max()), 1e-30))


def check_float32_against_torch(name: str):
    graph = zoo.build(name)
    x = zoo.input_for(name)
    ours = npusim.simulate(graph, x, ARCH, mode="run", keep_outputs=True).outputs
    theirs = torch_ref.torch_outputs(graph, x)
    out = ours[graph.output_name]
    assert np.isfinite(out).all() and np.abs(out).max() > 0
    for node in graph.nodes:
        assert np.isfinite(ours[node.name]).all(), node.name
        assert np.abs(ours[node.name]).max() > 0, f"{node.name} is all zeros"
        assert rel_err(ours[node.name], theirs[node.name]) < 1e-4, node.name


@pytest.mark.parametrize("name", FAST)
def test_float32_every_layer_equals_torch(name):
    check_float32_against_torch(name)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(HEAVY))
def test_float32_every_layer_equals_torch_heavy(name):
    check_float32_against_torch(name)


INT8_SIZE = {"alexnet": 96, "vgg16": 32, "resnet18": 64, "resnet50": 64, "mobilenet_v2": 64,
             "dilated-segnet": 64, "edgetpu_v2_like": 64}


@pytest.mark.parametrize("name", FAST + [pytest.param(n, marks=pytest.mark.slow)
                                         for n in sorted(HEAVY)])
def test_int8_every_conv_bit_identical_to_integer_reference(name):
    """Each conv's int32 accumulators (by the systolic dataflow, on the int8 tensors that
    simulate quantised) equal reference.conv2d's exact int64 sums, and simulate's output of
    the layer is exactly those sums requantised."""
    size = INT8_SIZE.get(name)
    graph = zoo.build(name, size=size)
    res = npusim.simulate(graph, zoo.input_for(name, size=size), ARCH, dtype="int8",
                          keep_outputs=True)
    for node in graph.conv_nodes:
        layer = graph.layers[node.name]
        x = res.outputs[node.inputs[0]].reshape(layer.input_shape)
        xq, sx = quant.quantize_activations(x)
        wq, sw = quant.quantize_weights(node.op.weight)
        bq = quant.quantize_bias(node.op.bias, sx, sw)
        exact = reference.conv2d(xq, wq, bq, layer)
        acc, _ = npusim.conv2d(xq, wq, bq, layer.stride, layer.padding, layer.dilation,
                               layer.groups, arch=ARCH)
        assert acc.dtype == np.int32
        np.testing.assert_array_equal(acc, exact, err_msg=node.name)
        y = quant.requantize(exact, sx, sw).dequantize().reshape(graph.shapes[node.name])
        np.testing.assert_array_equal(res.outputs[node.name], y, err_msg=node.name)


def test_resnet50_builds_fast():
    start = time.process_time()
    g = zoo.build("resnet50")
    seconds = time.process_time() - start
    weights = sum(n.op.weight.size for n in g.conv_nodes)
    assert 25.0e6 < weights < 25.6e6  # ResNet-50's 25.5M weights
    assert seconds < 2.0, f"building resnet50 took {seconds:.2f} s of CPU"


def test_imagenet_shapes_and_he_initialisation():
    g = zoo.build("vgg16", size=32)
    w = g.node("conv3_2").op.weight  # VGG has no batch-norm: the raw He draw
    assert w.shape == (256, 256, 3, 3)
    assert np.var(w) == pytest.approx(2 / (256 * 9), rel=0.02)
    r = zoo.build("resnet18")
    assert r.output_shape == (1, 1000) and len(r.layers) == 21
    assert r.shapes["layer4_1_relu"] == (1, 512, 7, 7)
    a = zoo.build("alexnet", batch=2)
    assert a.shapes["pool5"] == (2, 256, 6, 6) and a.layers["conv2"].groups == 2
    m = zoo.build("mobilenet_v2")
    assert sum(lay.is_depthwise for lay in m.layers.values()) == 17
    assert not any(type(n.op).__name__ == "BatchNorm" for n in m.nodes)  # all folded


def test_seeds_give_different_but_repeatable_weights():
    a, b, c = (zoo.build("resnet18", seed=s, size=32) for s in (0, 0, 1))
    np.testing.assert_array_equal(a.node("fc").op.weight, b.node("fc").op.weight)
    assert not np.array_equal(a.node("fc").op.weight, c.node("fc").op.weight)


# --- MTCNN: real trained weights ---------------------------------------------------------

# The faces in scikit-image's two portraits, (top, left, height, width) pixels, drawn on the
# photos and checked by eye (brows to chin, ear to ear). The crops use these boxes; the LBP
# cascade only has to agree with them, as detectors of different releases move a box by a few
# pixels (an older scikit-image found the astronaut at (66, 174, 96, 96), 0.25 and 0.26 find
# (70, 175, 93, 93): IoU 0.92).
FACES = {"astronaut": mtcnn_nets.ASTRONAUT_FACE, "grace_hopper": (125, 169, 196, 196)}
MIN_IOU = 0.7


def iou(a, b) -> float:
    """Intersection over union of two (top, left, height, width) boxes."""
    rows = min(a[0] + a[2], b[0] + b[2]) - max(a[0], b[0])
    cols = min(a[1] + a[3], b[1] + b[3]) - max(a[1], b[1])
    inter = max(rows, 0) * max(cols, 0)
    return inter / (a[2] * a[3] + b[2] * b[3] - inter)


def test_iou_by_hand():
    assert iou((0, 0, 10, 10), (0, 0, 10, 10)) == 1.0
    assert iou((0, 0, 10, 10), (5, 0, 10, 10)) == pytest.approx(50 / 150)
    assert iou((0, 0, 10, 10), (20, 20, 5, 5)) == 0.0
    assert iou((70, 175, 93, 93), (66, 174, 96, 96)) == pytest.approx(92 * 93 / 9309)


def face_box(photo: str) -> tuple[int, int, int, int]:
    """The documented face box of ``photo``, once scikit-image's LBP frontal-face cascade has
    found exactly one face there, overlapping it by IoU >= MIN_IOU."""
    import skimage.data
    from skimage.feature import Cascade

    found = Cascade(skimage.data.lbp_frontal_face_cascade_filename()).detect_multi_scale(
        img=images.read_rgb(photo), scale_factor=1.2, step_ratio=1, min_size=(60, 60),
        max_size=(400, 400))
    boxes = [(f["r"], f["c"], f["height"], f["width"]) for f in found]
    assert len(boxes) == 1, boxes
    assert iou(boxes[0], FACES[photo]) >= MIN_IOU, (boxes[0], FACES[photo])
    return FACES[photo]


def face_probability(net: str, photo: str, box) -> float:
    x = mtcnn_nets.face_crop(images.read_rgb(photo), box, mtcnn_nets.NATIVE_SIZE[net])
    return float(npusim.simulate(zoo.build(f"mtcnn-{net}"), x[None], ARCH).output[0, 1])


BACKGROUND = [(0, 400, 100, 100), (400, 400, 100, 100), (250, 0, 100, 100), (300, 300, 120, 120)]


@pytest.mark.parametrize("net", ["rnet", "onet"])
def test_mtcnn_finds_the_faces_and_rejects_background(net):
    for photo in ("astronaut", "grace_hopper"):
        assert face_probability(net, photo, face_box(photo)) > 0.99, photo
    for box in BACKGROUND:
        assert face_probability(net, "astronaut", box) < 0.1, box


@pytest.mark.parametrize("photo", ["astronaut", "grace_hopper"])
def test_onet_landmarks_have_a_face_geometry(photo):
    """O-Net's 5 landmarks (x1..x5, y1..y5 as fractions of the crop: eyes, nose, mouth corners)
    on the face crop: eyes apart and above the nose, the nose above the mouth."""
    x = mtcnn_nets.face_crop(images.read_rgb(photo), face_box(photo), 48)
    out = npusim.simulate(zoo.build("mtcnn-onet"), x[None], ARCH).output[0]
    (eye_l, eye_r, nose, mouth_l, mouth_r), ys = out[6:11], out[11:16]
    assert 0.1 < eye_l < nose < eye_r < 0.9 and 0.1 < mouth_l < nose < mouth_r < 0.9
    assert max(ys[0], ys[1]) + 0.1 < ys[2] < min(ys[3], ys[4]) - 0.05
    assert np.abs(out[2:6]).max() < 0.3  # the box needs only a small correction


def test_pnet_probability_map_peaks_on_the_face():
    top, left, h, w = face_box("astronaut")
    out = npusim.simulate(zoo.build("mtcnn-pnet"), zoo.input_for("mtcnn-pnet"), ARCH).output
    assert out.shape == (1, 6, 43, 43)
    np.testing.assert_allclose(out[0, 0] + out[0, 1], 1.0, rtol=1e-6)
    i, j = np.unravel_index(out[0, 1].argmax(), out.shape[2:])
    scale = 512 / 96  # map cell (i, j) sees input pixels 2i..2i+11
    cy, cx = (2 * i + 6) * scale, (2 * j + 6) * scale
    assert out[0, 1, i, j] > 0.95
    assert abs(cy - (top + h / 2)) < h / 2 and abs(cx - (left + w / 2)) < w / 2


def test_mtcnn_layout_conversions():
    assert mtcnn_nets.tf_same_pool_padding(22, 3, 2) == (0, 1)
    assert mtcnn_nets.tf_same_pool_padding(10, 2, 2) == (0, 0)
    assert mtcnn_nets.tf_same_pool_padding(5, 4, 1) == (1, 2)
    # Keras: Permute((2,1,3)) then Flatten of H x W x C; index (w*H + h)*C + c
    h, w, c = 2, 3, 4
    keras_in = np.arange(h * w * c).reshape(w, h, c)        # value = Keras flat index
    dense = np.eye(h * w * c)[:, :5]                         # (in, out): picks inputs 0..4
    ours = mtcnn_nets.dense_rows_to_nchw(dense, h, w, c)      # (out, in) in NCHW order
    nchw = keras_in.transpose(2, 1, 0).reshape(-1)            # Keras index at each NCHW slot
    np.testing.assert_array_equal(ours @ nchw, np.arange(5))


def test_mtcnn_weights_read_without_tensorflow():
    assert "tensorflow" not in sys.modules and "mtcnn" not in sys.modules
    assert [a.shape for a in mtcnn_nets.load_weights("rnet")][:3] == [(3, 3, 3, 28), (28,),
                                                                       (1, 1, 28)]


def test_mtcnn_bad_sizes():
    with pytest.raises(ModelError, match=r"mtcnn-rnet: size=30: must be 24 pixels"):
        zoo.build("mtcnn-rnet", size=30)
    with pytest.raises(ModelError, match=r"mtcnn-pnet: size=8: must be >= 12 pixels"):
        zoo.build("mtcnn-pnet", size=8)


# --- lenet-digits: trained at first use ----------------------------------------------------

@pytest.mark.slow
def test_digits_lenet_accuracy_and_cache():
    acc = digits.accuracy()
    assert acc >= 0.95
    assert digits.cache_path().is_file()
    _, _, xte, yte = digits.split()
    graph = zoo.build("lenet-digits")
    logits = torch_ref.torch_outputs(graph, xte)[graph.output_name]  # judged by torch
    assert (logits.argmax(axis=1) == yte).mean() == pytest.approx(acc)
    assert f"held-out accuracy {acc:.3f}" in zoo.describe("lenet-digits")
    assert catalogue.cached_accuracy() == acc  # the listing's, read without numpy
    np.testing.assert_array_equal(zoo.input_for("lenet-digits", batch=3), xte[:3])


def test_digits_without_torch_or_cache_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUSIM_CACHE", str(tmp_path))
    monkeypatch.setitem(sys.modules, "torch", None)
    assert "accuracy reported once trained" in zoo.describe("lenet-digits")  # listing: no training
    assert not digits.cache_path().exists()
    with pytest.raises(ModelError, match=r"lenet-digits: training it at first use needs "
                                         r"PyTorch; pip install 'npusim\[torch\]'"):
        zoo.build("lenet-digits")


def test_the_catalogue_reads_the_accuracy_numpy_stores(tmp_path, monkeypatch):
    """``npusim models`` reads lenet-digits' accuracy from the cache file as bytes: the value
    ``np.load`` reads; an unreadable file is ``digits``' error, as when it was read by numpy."""
    monkeypatch.setenv("NPUSIM_CACHE", str(tmp_path))
    np.savez(catalogue.digits_cache(), accuracy=np.float64(0.1 + 0.2), w=np.ones(3))
    assert catalogue.cached_accuracy() == 0.1 + 0.2
    assert "held-out accuracy 0.300 on 450 digits" in catalogue.describe("lenet-digits")
    catalogue.digits_cache().write_bytes(b"not a zip")
    with pytest.raises(ModelError, match="unreadable lenet-digits cache"):
        catalogue.describe("lenet-digits")


def test_the_catalogue_names_every_zoo_model():
    """The numpy-free catalogue (``npusim models``, ``zoo.describe``) has exactly the zoo's
    names, in its order: a model added to one and not the other fails here."""
    assert catalogue.names() == zoo.names()


# --- names, inputs, errors --------------------------------------------------------------------

def test_names_inputs_and_descriptions():
    assert zoo.names() == ["alexnet", "vgg16", "resnet18", "resnet50", "mobilenet_v2",
                           "mtcnn-pnet", "mtcnn-rnet", "mtcnn-onet", "lenet-digits",
                           "dilated-segnet", "edgetpu_v2_like", "ppocr-v4-det", "ppocr-v4-rec",
                           "ppocr-cls", "nudenet-320n"]
    for name in zoo.names():
        assert "\n" not in zoo.describe(name) and "weights" in zoo.describe(name)
    x = zoo.input_for("resnet18", batch=2)
    assert x.shape == (2, 3, 224, 224) and x.dtype == np.float32
    np.testing.assert_array_equal(x[0], images.load_image("chelsea", (224, 224)))
    g = zoo.input_for("mobilenet_v2", image="grace_hopper", size=64)
    assert g.shape == (1, 3, 64, 64)
    assert zoo.input_for("mtcnn-onet").min() >= -1.0  # (x - 127.5) / 128


def test_unknown_model_and_bad_arguments(tmp_path):
    with pytest.raises(ModelError, match=r"model 'lenet5': not in the zoo; choose one of "
                                         r"alexnet, vgg16"):
        zoo.build("lenet5")
    with pytest.raises(ModelError, match=r"resnet18: batch=0: must be an integer >= 1"):
        zoo.build("resnet18", batch=0)
    with pytest.raises(ModelError, match=r"resnet18: size=16: must be at least 32 pixels"):
        zoo.build("resnet18", size=16)
    with pytest.raises(ModelError, match=r"vgg16: size=0: must be an integer >= 1 \(pixels\)"):
        zoo.build("vgg16", size=0)
    with pytest.raises(ModelError, match=r"lenet-digits: size=28: the digits are 8 x 8"):
        zoo.input_for("lenet-digits", size=28)
    bad = tmp_path / "photo.jpg"
    bad.write_bytes(b"\x00\x01 not a jpeg")
    with pytest.raises(InputError, match=r"photo\.jpg: not an image"):
        zoo.input_for("resnet18", image=str(bad))
