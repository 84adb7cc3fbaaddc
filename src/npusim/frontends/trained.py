"""Real trained networks from installed wheels: PP-OCR (rapidocr-onnxruntime) and NudeNet.

Their ONNX files are read from the installed packages (the ``models`` extra:
``pip install -e '.[models]'``), never downloaded; the packages themselves are not imported
(their ``__init__`` loads OpenCV), only located. Each model gets the real input it is meant
for: the OCR networks a text image rendered with Pillow (black text on white, as a scanned
line or page), NudeNet's detector a photo of a person (scikit-image's ``astronaut``).
docs/zoo.md says what each network is, where it comes from and its licence.
"""

from __future__ import annotations

import importlib.util
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


def default_input(name: str, batch: int) -> np.ndarray:
    """The model's own input, float32 N x C x H x W, preprocessed as the model expects: a
    rendered text page (the detector) or line (recogniser, classifier), or the photo."""
    from . import images

    model = MODELS[name]
    c, h, w = model.shape
    if model.photo:
        x = images.load_image(model.photo, (h, w), c, model.norm)
    else:
        rgb = text_image(h, w, OCR_TEXT if h > 64 else OCR_TEXT[:1])
        x = images.NORMS[model.norm](np.moveaxis(rgb, -1, 0)).astype(np.float32)
    return np.repeat(x[None], batch, axis=0)
