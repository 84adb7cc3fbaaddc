"""geometry.py and the ops that normalise through it, against hand computations."""

import numpy as np
import pytest

from npusim import geometry, ops
from npusim.errors import LayerError


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
