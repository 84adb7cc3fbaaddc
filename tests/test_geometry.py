"""geometry.py and the ops that normalise through it, against hand computations."""

import numpy as np
import pytest

from npusim import geometry, ops
from npusim.errors import LayerError, NpusimError


def test_pairs_and_four_sided_padding():
    assert geometry.pair(3, "stride", "c") == (3, 3)
    assert geometry.pair((2, 1), "stride", "c") == (2, 1)
    assert geometry.padding4(1, "c") == (1, 1, 1, 1)
    assert geometry.padding4((1, 2), "c") == (1, 1, 2, 2)
    assert geometry.padding4((0, 1, 2, 3), "c") == (0, 1, 2, 3)
    assert geometry.add_padding((1, 2), (0, 1, 0, 1)) == (1, 2, 2, 3)
    with pytest.raises(LayerError, match=r"c.stride='x': must be an int or a pair of ints"):
        geometry.pair("x", "stride", "c")
    with pytest.raises(LayerError, match=r"c.padding=\(1, 2, 3\): must be an int, \(h, w\)"):
        geometry.padding4((1, 2, 3), "c")


def test_same_paddings_and_used_pixels_by_hand():
    # stride 1, 5x3 kernel dilated 2: totals 8 and 4, split evenly
    assert geometry.same_padding((5, 3), (2, 2)) == (4, 4, 2, 2)
    # 4x4 kernel: total 3, the odd pixel at the end
    assert geometry.same_padding((4, 4), (1, 1)) == (1, 2, 1, 2)
    # ONNX SAME: H=8, k=3, s=2 -> 4 outputs spanning 3*2+3 = 9 pixels: 1 padded pixel,
    # at the end for SAME_UPPER and at the start for SAME_LOWER; W=7 spans 9 of 7: 1 + 1
    assert geometry.same_auto_padding((8, 7), (3, 3), (2, 2), (1, 1), True) == (0, 1, 1, 1)
    assert geometry.same_auto_padding((8, 7), (3, 3), (2, 2), (1, 1), False) == (1, 0, 1, 1)
    assert geometry.used_pixels(4, 3, 2) == 9
    assert geometry.used_pixels(5, 3, 1, dilation=3) == 11  # 4 + 2 * 3 + 1


def test_ops_normalise_their_geometry_once_when_built():
    conv = ops.Conv(np.zeros((4, 3, 3, 3), np.float32), None, 2, (1, 2), 1, 1)
    assert (conv.stride, conv.padding, conv.dilation) == ((2, 2), (1, 1, 2, 2), (1, 1))
    pool = ops.MaxPool(3, padding=1)
    assert pool.geometry() == ((3, 3), (3, 3), (1, 1, 1, 1))  # stride defaults to the kernel
    assert ops.AvgPool((2, 3), (1, 2)).geometry() == ((2, 3), (1, 2), (0, 0, 0, 0))
    with pytest.raises(LayerError, match=r"pool.kernel=None: must be an int or a pair"):
        ops.MaxPool(None)


@pytest.mark.parametrize("name, value", [
    ("stride", (1.5, 1)), ("dilation", (2.9, 1)), ("padding", (1.7, 1.7)),
    ("padding", (0.5, 0.5, 0.9, 0.9)), ("padding", True), ("stride", (True, 1)),
    ("stride", (2.0, 2))])
def test_a_fraction_or_a_bool_in_a_pair_is_refused_not_cut(name, value):
    """``stride=1.5`` was refused but ``stride=(1.5, 1)`` ran as (1, 1), ``padding=(1.7,
    1.7)`` as 1 and ``padding=True`` as 1; PyTorch refuses each (a TypeError)."""
    import torch

    import npusim

    x = np.ones((1, 4, 8, 8), np.float32)
    w = np.ones((6, 4, 3, 3), np.float32)
    with pytest.raises(TypeError):
        torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), **{name: value})
    with pytest.raises(LayerError, match=rf"conv2d\.{name}=.*: must be an int"):
        npusim.conv2d(x, w, **{name: value})


def test_numpy_integers_count_as_ints():
    assert geometry.pair((np.int64(2), np.int32(1)), "stride", "c") == (2, 1)
    assert geometry.padding4(np.int16(2), "c") == (2, 2, 2, 2)
    assert geometry.padding4([np.uint8(1), 0, 2, 3], "c") == (1, 0, 2, 3)


def test_same_padding_with_a_stride_is_refused_as_pytorch_refuses_it():
    """``padding='same'`` with stride 2 ran padded (1, 1), TensorFlow's SAME shape but not
    its values (SAME pads (0, 1) there); PyTorch refuses it, and so does npusim now."""
    import torch

    import npusim

    x, w = np.ones((1, 2, 8, 8), np.float32), np.ones((3, 2, 3, 3), np.float32)
    with pytest.raises(RuntimeError, match="same"):
        torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), stride=2,
                                   padding="same")
    with pytest.raises(NpusimError, match=r"conv2d\.padding=.same. with stride=2: 'same' is "
                       "for stride 1"):
        npusim.conv2d(x, w, stride=2, padding="same")
    out, _ = npusim.conv2d(x, w, stride=(1, 1), padding="same")
    assert out.shape == (1, 3, 8, 8)
