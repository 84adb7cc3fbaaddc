"""Real photos by name or file: resized, cropped and normalised as models expect; bad files
raise InputError naming the file."""

import numpy as np
import pytest
from PIL import Image

from npusim.errors import InputError
from npusim.frontends import images


@pytest.mark.parametrize("name", images.photo_names())
def test_every_shipped_photo_loads_as_real_rgb(name):
    rgb = images.read_rgb(name)
    assert rgb.dtype == np.uint8 and rgb.ndim == 3 and rgb.shape[2] == 3
    assert min(rgb.shape[:2]) >= 256 and rgb.std() > 20  # a real photo, not a flat array
    x = images.load_image(name, (224, 224))
    assert x.shape == (3, 224, 224) and x.dtype == np.float32


def test_photo_names_are_the_packages_own_files():
    import skimage.data
    from matplotlib.cbook import get_sample_data
    from sklearn.datasets import load_sample_image

    for name in ("astronaut", "chelsea", "coffee"):  # read from the files, not skimage.data
        np.testing.assert_array_equal(images.read_rgb(name), getattr(skimage.data, name)())
    np.testing.assert_array_equal(images.read_rgb("china"), load_sample_image("china.jpg"))
    with Image.open(get_sample_data("grace_hopper.jpg", asfileobj=False)) as im:
        np.testing.assert_array_equal(images.read_rgb("grace_hopper"), np.asarray(im))


def test_imagenet_normalisation_per_channel():
    """A flat-colour image normalises to exactly (v/255 - mean) / std per channel."""
    rgb = np.zeros((40, 60, 3), np.uint8) + np.array([200, 100, 30], np.uint8)
    x = images.to_array(rgb, (16, 16))
    expect = (np.array([200, 100, 30]) / 255 - [0.485, 0.456, 0.406]) / [0.229, 0.224, 0.225]
    np.testing.assert_allclose(x[:, 5, 7], expect, rtol=1e-6)


def test_mtcnn_and_unit_normalisations_and_grey():
    rgb = np.full((30, 30, 3), 255, np.uint8)
    np.testing.assert_allclose(images.to_array(rgb, (12, 12), norm="mtcnn"), 127.5 / 128)
    np.testing.assert_allclose(images.to_array(rgb, (12, 12), norm="unit"), 1.0)
    grey = images.to_array(images.read_rgb("coffee"), (20, 30), channels=1, norm="none")
    assert grey.shape == (1, 20, 30)
    colour = images.to_array(images.read_rgb("coffee"), (20, 30), norm="none")
    lum = 0.299 * colour[0] + 0.587 * colour[1] + 0.114 * colour[2]  # ITU-R 601, Pillow's "L"
    assert np.abs(grey[0] - lum).max() <= 1.0


def test_resize_keeps_aspect_and_crops_the_centre():
    """A wide image with a marked centre column: the crop keeps the mark in the middle."""
    rgb = np.zeros((100, 300, 3), np.uint8)
    rgb[:, 145:155] = 255
    x = images.to_array(rgb, (50, 50), norm="unit")
    cols = x[0].mean(axis=0)  # the mark spans x in [22.5, 27.5) after halving and cropping
    centre = (cols * np.arange(50)).sum() / cols.sum()
    assert abs(centre - 24.5) < 0.25 and cols[:15].max() == 0 and cols[-15:].max() == 0


def test_user_image_file(tmp_path):
    path = tmp_path / "mine.png"
    Image.fromarray(images.read_rgb("chelsea")).save(path)
    np.testing.assert_array_equal(images.load_image(str(path), (64, 64)),
                                  images.load_image("chelsea", (64, 64)))


def test_not_an_image_names_the_file(tmp_path):
    path = tmp_path / "notes.png"
    path.write_text("this is text, not pixels")
    with pytest.raises(InputError, match=r"notes\.png: not an image Pillow can read"):
        images.load_image(path)


def test_missing_file_names_it_and_the_photos():
    with pytest.raises(InputError, match=r"nowhere\.jpg: no such image file \(nor a photo name: "
                                         r"astronaut, chelsea"):
        images.load_image("nowhere.jpg")


@pytest.mark.parametrize("kwargs,match", [
    ({"channels": 2}, r"channels=2: must be 1 \(grey\) or 3 \(RGB\)"),
    ({"norm": "zscore"}, r"norm='zscore': must be one of imagenet, mtcnn, unit, signed, none"),
    ({"size": (0, 5)}, r"size=\(0, 5\): must be \(H, W\) with both >= 1"),
])
def test_bad_options(kwargs, match):
    with pytest.raises(InputError, match=match):
        images.load_image("astronaut", **{"size": (8, 8), **kwargs})


# ---- deep images are scaled, never clipped -------------------------------------------------


def png16(path, a: np.ndarray) -> None:
    """A 16-bit PNG of ``a`` (H x W x C uint16, C = 1, 3 or 4), written by hand: Pillow
    writes 16-bit grey but not 16-bit colour."""
    import struct
    import zlib

    h, w, c = a.shape
    rows = b"".join(b"\x00" + a[y].astype(">u2").tobytes() for y in range(h))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(
            ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    header = struct.pack(">IIBBBBB", w, h, 16, {1: 0, 3: 2, 4: 6}[c], 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
                     + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def gradient16(h=48, w=64) -> np.ndarray:
    """A grey ramp over the whole 16-bit range with a bright spot: what clipping destroys."""
    a = np.linspace(0, 65535, h * w).reshape(h, w)
    a[10:14, 20:24] = 65535
    return np.round(a).astype(np.uint16)


@pytest.mark.parametrize("fmt", ["png", "tiff", "tiff-big-endian", "tiff-int32"])
def test_16_bit_images_are_scaled_not_clipped(tmp_path, fmt):
    a = gradient16()
    path = tmp_path / f"deep.{fmt.split('-')[0]}"
    stored = {"tiff-big-endian": a.astype(">u2"), "tiff-int32": a.astype(np.int32)}.get(fmt, a)
    Image.fromarray(stored).save(path)
    x = images.load_image(str(path), a.shape, norm="unit")  # same size: no resampling
    want = a.astype(np.float64) / 65535
    assert x.shape == (3,) + a.shape
    np.testing.assert_allclose(x, np.broadcast_to(want, x.shape), rtol=0, atol=1e-6)
    assert abs(x.mean() - 0.5) < 0.01  # not 99.7 % white


def test_16_bit_image_resized_as_its_8_bit_version_is(tmp_path):
    """Resampled in float, a 16-bit ramp lands where its 8-bit rounding does (within one
    8-bit step): the same geometry, without the clipping."""
    a = gradient16(90, 120)
    png16(tmp_path / "deep.png", a[:, :, None])
    Image.fromarray(np.round(a / 257).astype(np.uint8)).save(tmp_path / "eight.png")
    deep = images.load_image(str(tmp_path / "deep.png"), (30, 30), channels=1, norm="unit")
    eight = images.load_image(str(tmp_path / "eight.png"), (30, 30), channels=1, norm="unit")
    assert np.abs(deep - eight).max() <= 1.5 / 255


@pytest.mark.parametrize("channels", [3, 4])
def test_16_bit_colour_png_keeps_its_range(tmp_path, channels):
    rng = np.random.default_rng(0)
    a = rng.integers(0, 65536, (12, 16, channels), dtype=np.uint16)
    png16(tmp_path / "colour.png", a)
    x = images.load_image(str(tmp_path / "colour.png"), (12, 16), norm="unit")
    want = a[:, :, :3].transpose(2, 0, 1).astype(np.float64) / 65535
    assert np.abs(x - want).max() <= 1.0 / 255  # Pillow gives 8 bits of each channel


def test_float_tiff_in_unit_range_is_scaled_and_outside_it_refused(tmp_path):
    f = (gradient16().astype(np.float64) / 65535).astype(np.float32)
    Image.fromarray(f).save(tmp_path / "float.tiff")
    x = images.load_image(str(tmp_path / "float.tiff"), f.shape, channels=1, norm="none")
    np.testing.assert_allclose(x[0], f.astype(np.float64) * 255, rtol=0, atol=1e-4)
    Image.fromarray(f * 4 - 1).save(tmp_path / "wide.tiff")
    with pytest.raises(InputError, match=r"wide.tiff: pixel values in \[-1, 3\]; npusim reads "
                                         r"float images as \[0, 1\] and scales that to 0..255"):
        images.load_image(str(tmp_path / "wide.tiff"))


@pytest.mark.parametrize("side", [40, 50])  # above Pillow's warning limit, and its error limit
def test_decompression_bomb_is_one_message_with_the_limit(tmp_path, monkeypatch, side):
    path = tmp_path / "big.png"
    Image.fromarray(np.zeros((side, side, 3), np.uint8)).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with pytest.raises(InputError, match=r"big.png: more than 1,000 pixels, the most npusim "
                                         r"reads \(Pillow's decompression-bomb limit"):
        images.load_image(str(path))


@pytest.mark.parametrize("depth", [np.uint8, np.float32])
def test_an_input_past_the_decompression_bomb_limit_is_one_message_with_it(monkeypatch, depth):
    """Pillow's checks, meant for files read, apply to the sizes a photo is resized to as
    well: a model input past its warning's limit is resized without Pillow's warning, one
    past its error's (twice that) is one ``InputError`` naming the sizes (it once was a
    traceback from inside Pillow, for ``--input-shape 1,3,20000,20000``)."""
    import warnings

    photo = np.full((3, 4, 3), 0.5 if depth is np.float32 else 128, depth)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert images.to_array(photo, (30, 30), norm="none").shape == (3, 30, 30)  # 1,200
    with pytest.raises(InputError, match=r"^a photo scaled to 60x45 pixels \(W x H\) to fill "
                                         r"a 45x45 input: more than 2,000 pixels, the most "
                                         r"Pillow resizes to"):
        images.to_array(photo, (45, 45))


def test_a_much_smaller_image_warns_once_naming_its_size(tmp_path):
    import warnings

    from npusim.errors import NpusimWarning

    path = tmp_path / "tiny.png"
    Image.fromarray(np.zeros((20, 30, 3), np.uint8)).save(path)
    with pytest.warns(NpusimWarning, match=r"tiny.png: 30x20 pixels \(W x H\), upscaled 3.2x "
                                           r"to fill the model's 64x64 input") as caught:
        images.load_image(str(path), (64, 64))
    assert len(caught) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error", NpusimWarning)
        images.load_image(str(path), (40, 40))  # 2x: not much smaller
