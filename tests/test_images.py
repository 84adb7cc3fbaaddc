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

    np.testing.assert_array_equal(images.read_rgb("astronaut"), skimage.data.astronaut())
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
    ({"norm": "zscore"}, r"norm='zscore': must be one of imagenet, mtcnn, unit, none"),
    ({"size": (0, 5)}, r"size=\(0, 5\): must be \(H, W\) with both >= 1"),
])
def test_bad_options(kwargs, match):
    with pytest.raises(InputError, match=match):
        images.load_image("astronaut", **{"size": (8, 8), **kwargs})
