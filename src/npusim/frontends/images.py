"""Real photographs as network inputs: the ones installed packages ship, or the user's own file.

Named photos (no download, all bundled with an installed package):

- ``astronaut``, ``coffee``, ``chelsea``: scikit-image's ``skimage.data``;
- ``china``, ``flower``: scikit-learn's ``load_sample_image`` (china.jpg, flower.jpg);
- ``grace_hopper``: matplotlib's sample data (``matplotlib.cbook.get_sample_data``).

Anything else is read as an image file with Pillow. Pixels are brought to the
0..255 scale of an 8-bit photo by scaling, never clipping: 16-bit images
(Pillow modes ``I;16``, ``I;16B``, and ``I`` holding 0..65535) by 255/65535,
float images (mode ``F``, e.g. a float TIFF, values in [0, 1]) by 255; 16-bit
RGB(A) PNGs Pillow itself reads as 8 bits per channel (their high byte).
Images above Pillow's decompression-bomb limit are refused. ``load_image``
resizes (the shorter side to fit, then a centre crop, as ImageNet evaluation
does; an image enlarged more than ``UPSCALE_WARNING`` times warns) and
normalises as a model expects, giving float32 C x H x W.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..errors import InputError, NpusimWarning

if TYPE_CHECKING:  # Pillow is imported where an image is read or resized, not with npusim
    from PIL import Image

IMAGENET_MEAN = np.array([0.485, 0.456, 0.406], np.float32)
IMAGENET_STD = np.array([0.229, 0.224, 0.225], np.float32)
LUMA = np.array([0.299, 0.587, 0.114])  # ITU-R 601-2, the weights of Pillow's "L"
SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N")  # Pillow's 16-bit grey modes
UPSCALE_WARNING = 2.0  # an image enlarged more than this (per side) to cover the input warns


def _skimage(name: str) -> Callable[[], np.ndarray]:
    """scikit-image's photo ``name``: its PNG file read with Pillow (importing ``skimage.data``
    takes scipy and most of scikit-image: 0.8 s, paid again by every sweep worker), or
    ``skimage.data``'s own loader where the file is not installed with the package."""
    def load():
        spec = importlib.util.find_spec("skimage")
        for root in (spec.submodule_search_locations or []) if spec else []:
            path = Path(root) / "data" / f"{name}.png"
            if path.is_file():
                return _read_file(path)
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
    "signed": lambda x: x / 127.5 - 1.0,             # [-1, 1] (PP-OCR's recogniser)
    "none": lambda x: x,                             # raw 0..255
}


def photo_names() -> list[str]:
    """Names of the photos that installed packages ship."""
    return sorted(PHOTOS)


def _read_file(path: Path) -> np.ndarray:
    from PIL import UnidentifiedImageError

    if path.is_dir():
        raise InputError(f"{path}: is a folder; --input takes one image file or a photo name "
                         f"({', '.join(photo_names())})")
    if not path.is_file():
        raise InputError(f"{path}: no such image file (nor a photo name: "
                         f"{', '.join(photo_names())})")
    try:
        with _open(path) as im:
            return _pixels(im, path)
    except (UnidentifiedImageError, OSError) as e:
        raise InputError(f"{path}: not an image Pillow can read ({e.__class__.__name__}); "
                         "give a PNG, JPEG or other Pillow format") from None


def _open(path: Path) -> Image.Image:
    """Pillow's open, its decompression-bomb warning and error made one ``InputError``."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("error", Image.DecompressionBombWarning)
        try:
            return Image.open(path)
        except (Image.DecompressionBombWarning, Image.DecompressionBombError):
            raise InputError(f"{path}: more than {Image.MAX_IMAGE_PIXELS:,} pixels, the most "
                             "npusim reads (Pillow's decompression-bomb limit, "
                             "PIL.Image.MAX_IMAGE_PIXELS); downscale it first") from None


def _pixels(im: Image.Image, path: Path) -> np.ndarray:
    """H x W x 3 on the 0..255 scale: uint8 for 8-bit images, float32 for deeper ones
    (scaled from their own range, see the module docstring)."""
    if im.mode not in SIXTEEN_BIT + ("I", "F"):
        return np.asarray(im.convert("RGB"))
    values = np.asarray(im).astype(np.float32)  # exact for 16-bit values
    lo, hi = (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)
    full = 1.0 if im.mode == "F" else 65535.0
    if lo < 0 or hi > full or not np.isfinite(values).all():
        kind = "float images" if im.mode == "F" else f"mode-{im.mode} images"
        raise InputError(f"{path}: pixel values in [{lo:g}, {hi:g}]; npusim reads {kind} as "
                         f"[0, {full:g}] and scales that to 0..255; rescale it into that range")
    grey = values * np.float32(255.0 / full)
    return np.repeat(grey[:, :, None], 3, axis=2)


def read_rgb(name_or_path: str | Path) -> np.ndarray:
    """The photo as H x W x 3 RGB on the 0..255 scale, by photo name or file path: uint8
    for 8-bit images, float32 for 16-bit and float ones."""
    load = PHOTOS.get(str(name_or_path))
    return load() if load else _read_file(Path(name_or_path))


def _cover(height: int, width: int, size) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """The (W, H) an image of ``height`` x ``width`` is scaled to so it covers ``size`` (H, W)
    keeping its aspect, and the centre crop box (left, top, right, bottom) in it."""
    h, w = int(size[0]), int(size[1])
    k = max(h / height, w / width)
    sw, sh = max(w, round(width * k)), max(h, round(height * k))
    left, top = (sw - w) // 2, (sh - h) // 2
    return (sw, sh), (left, top, left + w, top + h)


def resize_crop(rgb: np.ndarray, size: tuple[int, int]) -> Image.Image:
    """Scale so the (uint8) image covers ``size`` (H, W) keeping its aspect, then crop the
    centre."""
    from PIL import Image

    im = Image.fromarray(np.ascontiguousarray(rgb, dtype=np.uint8))
    return _scaled(im, *_cover(im.height, im.width, size))


def _scaled(im: Image.Image, scaled: tuple[int, int], box) -> Image.Image:
    """``im`` resized to ``scaled`` (W, H) and cropped to ``box``. Pillow's check against
    decompression bombs, meant for files read, applies to the sizes npusim resizes to: its
    warning is not shown (the size is the model's input), and past its error's size (twice
    ``PIL.Image.MAX_IMAGE_PIXELS``) one ``InputError`` says so."""
    from PIL import Image

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)
        try:
            return im.resize(scaled, Image.Resampling.BILINEAR, reducing_gap=None).crop(box)
        except Image.DecompressionBombError:
            raise InputError(f"a photo scaled to {scaled[0]}x{scaled[1]} pixels (W x H) to fill "
                             f"a {box[2] - box[0]}x{box[3] - box[1]} input: more than "
                             f"{2 * Image.MAX_IMAGE_PIXELS:,} pixels, the most Pillow resizes "
                             "to (twice PIL.Image.MAX_IMAGE_PIXELS); give a smaller input "
                             "shape") from None


def _resize_crop_float(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``resize_crop`` of a float H x W x 3 image, channel by channel in float32 (Pillow's
    mode F): H x W x 3 float32, nothing rounded to 8 bits."""
    from PIL import Image

    scaled, box = _cover(rgb.shape[0], rgb.shape[1], size)
    planes = [_scaled(Image.fromarray(np.ascontiguousarray(rgb[:, :, i], np.float32)),  # mode F
                      scaled, box) for i in range(rgb.shape[2])]
    return np.stack([np.asarray(p, np.float32) for p in planes], axis=2)


def to_array(rgb: np.ndarray, size: tuple[int, int], channels: int = 3,
             norm: str = "imagenet") -> np.ndarray:
    """An H x W x 3 image on the 0..255 scale (uint8, or float from ``read_rgb`` of a deep
    image) resized, converted to ``channels`` and normalised: float32 C x H x W."""
    if channels not in (1, 3):
        raise InputError(f"channels={channels}: must be 1 (grey) or 3 (RGB)")
    if norm not in NORMS:
        raise InputError(f"norm={norm!r}: must be one of {', '.join(NORMS)}")
    if len(size) != 2 or min(size) < 1:
        raise InputError(f"size={size}: must be (H, W) with both >= 1 pixels")
    if rgb.dtype == np.uint8:
        im = resize_crop(rgb, size)
        x = np.asarray(im.convert("L") if channels == 1 else im, np.float32)
    else:
        x = _resize_crop_float(rgb, size)
        x = (x @ LUMA).astype(np.float32) if channels == 1 else x
    x = x.reshape(size[0], size[1], channels).transpose(2, 0, 1)
    return np.ascontiguousarray(NORMS[norm](x), dtype=np.float32)


def load_image(name_or_path: str | Path, size: tuple[int, int] = (224, 224), channels: int = 3,
               norm: str = "imagenet") -> np.ndarray:
    """A real photo (a name in ``photo_names()`` or an image file) as float32 C x H x W.

    ``size`` is (H, W) in pixels; ``norm`` is 'imagenet' ((x/255 - mean)/std),
    'mtcnn' ((x - 127.5)/128), 'unit' (x/255) or 'none' (0..255). An image enlarged more
    than ``UPSCALE_WARNING`` times to cover ``size`` warns (``NpusimWarning``), naming its size.
    """
    rgb = read_rgb(name_or_path)
    _warn_if_upscaled(name_or_path, rgb.shape[:2], size)
    return to_array(rgb, size, channels, norm)


def _warn_if_upscaled(name, hw: tuple[int, int], size) -> None:
    k = max(size[0] / hw[0], size[1] / hw[1]) if min(hw) else 0.0
    if k > UPSCALE_WARNING:
        warnings.warn(f"{name}: {hw[1]}x{hw[0]} pixels (W x H), upscaled {k:.3g}x to fill the "
                      f"model's {size[1]}x{size[0]} input: most of its detail is interpolated",
                      NpusimWarning, stacklevel=3)
