"""Real trained networks from installed wheels: PP-OCR (rapidocr-onnxruntime) and NudeNet.

Their ONNX files are read from the installed packages (the ``models`` extra:
``pip install -e '.[models]'``), never downloaded; the packages themselves are not imported
(their ``__init__`` loads OpenCV), only located. Each model gets the real input it is meant
for: the OCR networks a text image rendered with Pillow (black text on white: a page for
the detector, a line cropped and resized as RapidOCR feeds a detected box for the recogniser
and the direction classifier), NudeNet's detector a photo of a person (scikit-image's
``astronaut``).
docs/zoo.md says what each network is, where it comes from and its licence.
"""

from __future__ import annotations

import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ModelError

EXTRA = "pip install -e '.[models]'"
OCR_TEXT = ("npusim models a neural", "processing unit for", "convolutional networks 2026")


@dataclass(frozen=True)
class Trained:
    """One trained network: its package, file inside it, input (C, H, W), preprocessing
    (what it is and its licence: ``catalogue``)."""

    package: str
    member: str
    shape: tuple[int, int, int]
    norm: str            # images.NORMS key
    photo: str = ""      # a bundled photo (images.photo_names()), or "" for rendered text

    def path(self) -> Path:
        """The ONNX file in the installed package, or a ``ModelError`` saying how to get it."""
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise ModelError(f"this model is read from the installed package {self.package!r}, "
                             f"which is not installed: {EXTRA}")
        path = Path(next(iter(spec.submodule_search_locations))) / self.member
        if not path.is_file():
            raise ModelError(f"{path}: not in the installed {self.package!r}; "
                             f"reinstall it: {EXTRA}")
        return path


PPOCR = "rapidocr_onnxruntime"
MODELS = {
    "ppocr-v4-det": Trained(PPOCR, "models/ch_PP-OCRv4_det_infer.onnx", (3, 320, 320),
                            "imagenet"),
    "ppocr-v4-rec": Trained(PPOCR, "models/ch_PP-OCRv4_rec_infer.onnx", (3, 48, 320),
                            "signed"),
    "ppocr-cls": Trained(PPOCR, "models/ch_ppocr_mobile_v2.0_cls_infer.onnx", (3, 48, 192),
                         "signed"),
    "nudenet-320n": Trained("nudenet", "320n.onnx", (3, 320, 320), "unit", "astronaut"),
}


def build(name: str, batch: int) -> object:
    """The Graph of trained model ``name`` for ``batch`` inputs."""
    from .onnx_import import from_onnx

    model = MODELS[name]
    return from_onnx(model.path(), input_shape=(batch, *model.shape))


def text_image(height: int, width: int, lines: tuple[str, ...]) -> np.ndarray:
    """``lines`` of black text on white, rendered with Pillow's built-in scalable font, as
    float 0..255 RGB (H x W x 3): each line fills a band of ``height / len(lines)`` pixels."""
    from PIL import Image, ImageDraw, ImageFont

    im = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(im)
    band = height // len(lines)
    for i, line in enumerate(lines):
        size = max(8, int(band * 0.6))
        font = ImageFont.load_default(size)
        while size > 8 and draw.textlength(line, font=font) > width * 0.94:
            size -= 1
            font = ImageFont.load_default(size)
        draw.text((width * 0.03, i * band + band * 0.18), line, fill="black", font=font)
    return np.asarray(im, np.float32)


LINE_RENDER_HEIGHT = 96  # pixels a text line is drawn at before it is cropped (``text_line``)
LINE_MARGIN = 4  # white pixels kept around the ink of a cropped line


def text_line(height: int, width: int, line: str) -> np.ndarray:
    """One rendered text line as PP-OCR's recogniser and classifier receive a detected text
    box (RapidOCR's ``resize_norm_img``): cropped to its ink (``LINE_MARGIN`` pixels of
    white around it), resized to ``height`` rows keeping its aspect ratio but at most
    ``width`` columns, scaled to [-1, 1], the columns right of it zero (float32 3 x H x W)."""
    from PIL import Image

    from . import images

    rgb = text_image(LINE_RENDER_HEIGHT, LINE_RENDER_HEIGHT * 16, (line,)).astype(np.uint8)
    rows, cols = np.nonzero(rgb.min(axis=2) < 128)
    top, left = max(0, rows.min() - LINE_MARGIN), max(0, cols.min() - LINE_MARGIN)
    crop = Image.fromarray(rgb[top:rows.max() + 1 + LINE_MARGIN,
                               left:cols.max() + 1 + LINE_MARGIN])
    wide = min(width, math.ceil(height * crop.width / crop.height))
    box = np.asarray(crop.resize((wide, height), Image.BILINEAR), np.float32)
    x = np.zeros((3, height, width), np.float32)
    x[:, :, :wide] = images.NORMS["signed"](np.moveaxis(box, -1, 0))
    return x


def default_input(name: str, batch: int) -> np.ndarray:
    """The model's own input, float32 N x C x H x W, preprocessed as the model expects: a
    rendered text page (the detector), one text line as a detected box is fed
    (recogniser, classifier: ``text_line``), or the photo."""
    from . import images

    model = MODELS[name]
    c, h, w = model.shape
    if model.photo:
        x = images.load_image(model.photo, (h, w), c, model.norm)
    elif h <= 64:
        x = text_line(h, w, OCR_TEXT[0])
    else:
        rgb = text_image(h, w, OCR_TEXT)
        x = images.NORMS[model.norm](np.moveaxis(rgb, -1, 0)).astype(np.float32)
    return np.repeat(x[None], batch, axis=0)
