"""Real photographs as network inputs: the ones installed packages ship, or the user's own file.

Named photos (no download, all bundled with an installed package):

- ``astronaut``, ``coffee``, ``chelsea``: scikit-image's ``skimage.data``;
- ``china``, ``flower``: scikit-learn's ``load_sample_image`` (china.jpg, flower.jpg);
- ``grace_hopper``: matplotlib's sample data (``matplotlib.cbook.get_sample_data``).

Anything else is read as an image file with Pillow. ``load_image`` resizes (the
shorter side to fit, then a centre crop, as ImageNet evaluation does) and
normalises as a model expects, giving float32 C x H x W.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
from PIL import Image, UnidentifiedImageError

from ..errors import InputError

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)


def _skimage(name: str) -> Callable[[], np.ndarray]:
    def load():
        import skimage.data

        return getattr(skimage.data, name)()
    return load


def _sklearn(filename: str) -> Callable[[], np.ndarray]:
    def load():
        from sklearn.datasets import load_sample_image

        return load_sample_image(filename)
    return load


def _matplotlib(filename: str) -> Callable[[], np.ndarray]:
    def load():
        from matplotlib.cbook import get_sample_data

        return _read_file(Path(get_sample_data(filename, asfileobj=False)))
    return load


PHOTOS: dict[str, Callable[[], np.ndarray]] = {
    "astronaut": _skimage("astronaut"),
    "coffee": _skimage("coffee"),
    "chelsea": _skimage("chelsea"),
    "china": _sklearn("china.jpg"),
    "flower": _sklearn("flower.jpg"),
    "grace_hopper": _matplotlib("grace_hopper.jpg"),
}


def _normalise_imagenet(x: np.ndarray) -> np.ndarray:
    if x.shape[0] == 1:  # grey: the mean and spread of the three channels' statistics
        return (x / 255.0 - IMAGENET_MEAN.mean()) / IMAGENET_STD.mean()
    return (x / 255.0 - IMAGENET_MEAN[:, None, None]) / IMAGENET_STD[:, None, None]


NORMS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "imagenet": _normalise_imagenet,                # (x/255 - mean) / std per channel
    "mtcnn": lambda x: (x - 127.5) / 128.0,          # MTCNN's [-1, 1) scaling
    "unit": lambda x: x / 255.0,                     # [0, 1]
    "none": lambda x: x,                             # raw 0..255
}


def photo_names() -> list[str]:
    """Names of the photos that installed packages ship."""
    return sorted(PHOTOS)


def _read_file(path: Path) -> np.ndarray:
    if not path.is_file():
        raise InputError(f"{path}: no such image file (nor a photo name: "
                         f"{', '.join(photo_names())})")
    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))
    except (UnidentifiedImageError, OSError) as e:
        raise InputError(f"{path}: not an image Pillow can read ({e.__class__.__name__}); "
                         "give a PNG, JPEG or other Pillow format") from None


def read_rgb(name_or_path: str | Path) -> np.ndarray:
    """The photo as uint8 H x W x 3 RGB, by photo name or file path."""
    load = PHOTOS.get(str(name_or_path))
    return load() if load else _read_file(Path(name_or_path))


def resize_crop(rgb: np.ndarray, size: tuple[int, int]) -> Image.Image:
    """Scale so the image covers ``size`` (H, W) keeping its aspect, then crop the centre."""
    h, w = int(size[0]), int(size[1])
    im = Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8))
    k = max(h / im.height, w / im.width)
    sw, sh = max(w, round(im.width * k)), max(h, round(im.height * k))
    im = im.resize((sw, sh), Image.Resampling.BILINEAR, reducing_gap=None)
    left, top = (sw - w) // 2, (sh - h) // 2
    return im.crop((left, top, left + w, top + h))


def to_array(rgb: np.ndarray, size: tuple[int, int], channels: int = 3,
             norm: str = "imagenet") -> np.ndarray:
    """An H x W x 3 uint8 image resized, converted to ``channels`` and normalised: C x H x W."""
    if channels not in (1, 3):
        raise InputError(f"channels={channels}: must be 1 (grey) or 3 (RGB)")
    if norm not in NORMS:
        raise InputError(f"norm={norm!r}: must be one of {', '.join(NORMS)}")
    if len(size) != 2 or min(size) < 1:
        raise InputError(f"size={size}: must be (H, W) with both >= 1 pixels")
    im = resize_crop(rgb, size)
    if channels == 1:
        im = im.convert("L")
    x = np.asarray(im, np.float32).reshape(size[0], size[1], channels).transpose(2, 0, 1)
    return np.ascontiguousarray(NORMS[norm](x), dtype=np.float32)


def load_image(name_or_path: str | Path, size: tuple[int, int] = (224, 224), channels: int = 3,
               norm: str = "imagenet") -> np.ndarray:
    """A real photo (a name in ``photo_names()`` or an image file) as float32 C x H x W.

    ``size`` is (H, W) in pixels; ``norm`` is 'imagenet' ((x/255 - mean)/std),
    'mtcnn' ((x - 127.5)/128), 'unit' (x/255) or 'none' (0..255).
    """
    return to_array(read_rgb(name_or_path), size, channels, norm)
