"""The zoo's catalogue: each model's name and one-line description, read without numpy.

``npusim models`` lists it, and ``zoo.describe`` reads it: the one place a model's line is
written. Building a model (``zoo``) imports numpy and the model's own module, which the
listing does not need (tests/test_zoo.py checks the catalogue names the zoo's models, in its
order).
``lenet-digits`` adds its held-out accuracy once trained, read from its weights' cache file
(``cached_accuracy``) without loading the weights.
"""

from __future__ import annotations

import os
import struct
import zipfile
from pathlib import Path

SEEDED = "seeded He-initialised weights; input: photo '{}', ImageNet mean/std"
PPOCR_LICENCE = "licence Apache-2.0 (PaddleOCR's models; rapidocr-onnxruntime 1.4.4)"
DIGITS = "lenet-digits"
DIGITS_CACHE = "lenet-digits-v1.npz"  # digits.py's recipe: bump the version when it changes
DIGITS_TEST_SIZE = 450  # held-out digits (a quarter of scikit-learn's 1797)

LINES = {
    "alexnet": "AlexNet (Caffe layout, grouped convs), 224x224; " + SEEDED.format("chelsea"),
    "vgg16": "VGG-16, 224x224; " + SEEDED.format("chelsea"),
    "resnet18": "ResNet-18, 224x224, BN folded; " + SEEDED.format("chelsea"),
    "resnet50": "ResNet-50 v1.5, 224x224, BN folded; " + SEEDED.format("chelsea"),
    "mobilenet_v2": "MobileNetV2 1.0, 224x224, BN folded; " + SEEDED.format("chelsea"),
    "mtcnn-pnet": "MTCNN P-Net (proposal, fully convolutional; 96x96 default map); real "
                  "trained weights",
    "mtcnn-rnet": "MTCNN R-Net (refinement, 24x24 crops); real trained weights",
    "mtcnn-onet": "MTCNN O-Net (output: box, 5 landmarks, 48x48 crops); real trained weights",
    DIGITS: "LeNet-style CNN on scikit-learn's 8x8 digits; real weights trained at first use",
    "dilated-segnet": "dilated segmentation net (seed 002 Fig. 2 context stack at R = 1, 2, 4 "
                      "and an atrous pyramid at R = 6, 12, 18), 224x224; "
                      + SEEDED.format("astronaut"),
    "edgetpu_v2_like": "MobileNet-EdgeTPU-V2-S-like classifier (seed 003 IBN blocks), 224x224; "
                       + SEEDED.format("chelsea"),
    "ppocr-v4-det": "PP-OCRv4 text detector (DB head, PPLCNetV3 backbone), trained weights; "
                    "input: a rendered text page, ImageNet mean/std; " + PPOCR_LICENCE,
    "ppocr-v4-rec": "PP-OCRv4 text recogniser (SVTR-LCNet, CTC), trained weights; input: a "
                    "rendered text line, scaled to [-1, 1]; its attention's products of two "
                    "activations as the vector unit's MatMul; " + PPOCR_LICENCE,
    "ppocr-cls": "PP-OCR mobile v2.0 text-direction classifier (MobileNetV3), trained weights; "
                 "input: a rendered text line, scaled to [-1, 1]; " + PPOCR_LICENCE,
    "nudenet-320n": "NudeNet 3.4 detector (YOLOv8n), trained weights; input: photo 'astronaut' "
                    "(a person), scaled to [0, 1]; licence MIT as the nudenet 3.4.2 wheel "
                    "declares it (a YOLOv8 model)",
}
"""Model name -> its line (``lenet-digits``: the line's head, ``describe`` adds the rest)."""

NPY_FLOAT64_SCALAR = b"{'descr': '<f8', 'fortran_order': False, 'shape': (), }"
"""The header numpy writes before a float64 scalar (format versions 1 to 3, padded)."""


def names() -> list[str]:
    """The zoo's model names, in the zoo's order."""
    return list(LINES)


def describe(name: str) -> str:
    """One line on the model (``name`` from ``names``): what it is, where its weights come
    from, its default input; for ``lenet-digits`` its accuracy once trained (listing models
    never trains one)."""
    if name != DIGITS:
        return LINES[name]
    if not digits_cache().is_file():
        return f"{LINES[name]} (about 15 s, needs torch); held-out accuracy reported once trained"
    return (f"{LINES[name]}, cached; held-out accuracy {cached_accuracy():.3f} on "
            f"{DIGITS_TEST_SIZE} digits")


def digits_cache() -> Path:
    """Where lenet-digits' trained weights live: $NPUSIM_CACHE or ~/.cache/npusim."""
    root = os.environ.get("NPUSIM_CACHE") or Path.home() / ".cache" / "npusim"
    return Path(root) / DIGITS_CACHE


def cached_accuracy() -> float:
    """lenet-digits' held-out accuracy as its cache file records it (the float64 scalar
    ``accuracy`` of the .npz), read as bytes; a file numpy wrote otherwise is read by
    ``digits.accuracy`` (numpy), which also says what is wrong with an unreadable one."""
    try:
        with zipfile.ZipFile(digits_cache()) as z:
            member = z.read("accuracy.npy")
    except (OSError, KeyError, zipfile.BadZipFile):
        member = b""
    head, _, data = member.partition(b"\n")
    if member.startswith(b"\x93NUMPY") and NPY_FLOAT64_SCALAR in head and len(data) == 8:
        return struct.unpack("<d", data)[0]
    from . import digits

    return digits.accuracy()
