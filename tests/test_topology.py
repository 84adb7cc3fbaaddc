"""SCALE-Sim topology CSVs: every variant in its repository parses, writing round-trips,
SCALE-Sim's output-size rule holds, and bad rows name the file, line and field."""

import math
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import conv_layers

from npusim.errors import ModelError
from npusim.frontends import load_model
from npusim.frontends.topology import read_topology, scalesim_extent, write_topology
from npusim.ir import ConvLayer, GraphBuilder

DATA = Path(__file__).parent / "data" / "scalesim"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "scalesim" / "topologies"


def scalesim_out(size, k, stride):
    """SCALE-Sim's own output size: ceil((H - R + S) / S)."""
    return math.ceil((size - k + stride) / stride)


def test_resnet18_rows_read_as_scalesim_sizes_them():
    layers = read_topology(DATA / "Resnet18.csv")
    assert len(layers) == 21
    conv1, fc = layers[0], layers[-1]
    assert (conv1.name, conv1.C, conv1.H, conv1.W, conv1.K, conv1.R, conv1.stride) == (
        "Conv1", 3, 224, 224, 64, 7, (2, 2))
    assert (conv1.P, conv1.Q) == (110, 110) == (scalesim_out(224, 7, 2),) * 2
    assert conv1.padding == (0, 1, 0, 1)          # the overhanging last window
    assert (fc.C, fc.K, fc.P, fc.Q, fc.macs) == (512, 1000, 1, 1, 512_000)
    assert all(layer.N == 1 and layer.groups == 1 and layer.dilation == (1, 1)
               for layer in layers)


@pytest.mark.parametrize("name, count, first", [
    ("Resnet50.csv", 54, "Conv1"),            # extra columns Eh, Ew, e2; an all-empty row
    ("UNet_2d.csv", 19, "Conv1a"),            # UTF-8 byte-order mark
    ("UNet_maestro.csv", 23, "Conv1_1"),      # tab separated
    ("Googlenet.csv", 58, "Conv1"),           # blank line after the header
    ("mobilnet_paper.csv", 28, "Conv1"),      # '#dw' comments after the last comma
    ("alexnet_part.csv", 1, "Conv1"),         # no newline at the end, padded fields
])
def test_variants_parse(name, count, first):
    layers = read_topology(DATA / name)
    assert len(layers) == count and layers[0].name == first
    for layer in layers:
        assert layer.P == scalesim_out(layer.H, layer.R, layer.stride[0])
        assert layer.Q == scalesim_out(layer.W, layer.S, layer.stride[1])


@pytest.mark.skipif(not SHARED.is_dir(), reason="shared SCALE-Sim data not beside the checkout")
def test_every_shared_topology_parses():
    files = sorted(SHARED.glob("*.csv"))
    assert len(files) >= 20
    for f in files:
        layers = read_topology(f)
        assert layers and all(layer.macs > 0 for layer in layers), f.name


def test_dense_sparsity_ratio_is_accepted(tmp_path):
    f = tmp_path / "s.csv"
    f.write_text("Layer name, H, W, R, S, C, K, S, Sparsity,\nConv1, 9, 9, 3, 3, 4, 8, 1, 4:4,\n")
    assert read_topology(f)[0].K == 8


def test_depthwise_mark_dp_reads_as_groups_and_writes_back(tmp_path):
    src = tmp_path / "dw.csv"
    src.write_text("Layer name, H, W, R, S, C, K, S,\nConv_DP1, 9, 9, 3, 3, 8, 2, 1,\n")
    (layer,) = read_topology(src)
    assert (layer.groups, layer.C, layer.K, layer.Cg, layer.Kg) == (8, 8, 16, 1, 2)
    write_topology([layer], tmp_path / "back.csv")
    assert read_topology(tmp_path / "back.csv") == [layer]


def test_files_round_trip_exactly(tmp_path):
    for name in ("Resnet18.csv", "Resnet50.csv", "UNet_maestro.csv", "mobilnet_paper.csv"):
        layers = read_topology(DATA / name)
        write_topology(layers, tmp_path / name)
        assert read_topology(tmp_path / name) == layers


@given(conv_layers(max_n=1), st.booleans())
def test_any_writable_layer_round_trips_shape_and_work(layer, square_stride):
    import dataclasses
    import tempfile

    layer = dataclasses.replace(layer, dilation=(1, 1),
                                stride=(layer.stride[0],) * 2 if square_stride else layer.stride)
    if layer.P < 1 or layer.Q < 1 or layer.stride[0] != layer.stride[1]:
        return
    with tempfile.TemporaryDirectory() as d:
        write_topology([layer], Path(d) / "t.csv")
        back = read_topology(Path(d) / "t.csv")
    assert len(back) == layer.groups
    for row in back:
        assert (row.P, row.Q, row.R, row.S, row.stride) == (layer.P, layer.Q, layer.R, layer.S,
                                                            layer.stride)
        assert (row.C, row.K) == (layer.Cg, layer.Kg)
    assert sum(row.macs for row in back) == layer.macs


@given(st.integers(1, 40), st.integers(1, 7), st.integers(1, 4))
def test_scalesim_extent_is_the_smallest_input_for_an_output_size(out, k, stride):
    size = scalesim_extent(out, k, stride)
    assert scalesim_out(size, k, stride) == out
    assert size == k or scalesim_out(size - 1, k, stride) < out


def test_graph_convs_written_in_order_with_groups_split(tmp_path):
    import numpy as np

    g = GraphBuilder("g", (1, 4, 8, 8))
    a = g.conv(g.input, np.ones((6, 4, 3, 3)), padding=1, name="c1")
    g.conv(a, np.ones((6, 3, 1, 1)), groups=2, name="c2")
    write_topology(g.build(), tmp_path / "g.csv")
    rows = (tmp_path / "g.csv").read_text().splitlines()
    assert rows[0].startswith("Layer name, IFMAP Height")
    assert rows[1:] == ["c1,10,10,3,3,4,6,1,", "c2_g0,8,8,1,1,3,3,1,", "c2_g1,8,8,1,1,3,3,1,"]


def test_load_model_csv_gives_shapes_with_batch(tmp_path):
    layers = load_model(str(DATA / "Resnet18.csv"), batch=2)
    assert len(layers) == 21 and all(layer.N == 2 for layer in layers)


@pytest.mark.parametrize("row, match", [
    ("Conv1, 224, 224, 7, 7, 3, 64, 0,", r"line 2 \(Conv1\): field 'Strides'='0': must be an "
                                         r"integer from 1 to 2\*\*20 = 1048576"),
    ("Conv1, 99999999999999999999, 224, 7, 7, 3, 64, 1,",
     r"line 2 \(Conv1\): field 'IFMAP Height'='99999999999999999999': must be an integer from 1 "
     r"to 2\*\*20"),
    ("Conv1, 1048577, 9, 3, 3, 4, 8, 1,", r"line 2 \(Conv1\): field 'IFMAP Height'='1048577': "
                                         r"must be an integer from 1 to 2\*\*20"),
    ("Big, 1048576, 1048576, 3, 3, 1024, 1024, 1,",
     r"line 2 \(Big\): 1\.04e\+19 MACs; a layer may have at most 2\*\*53"),  # 1048574**2*9*1024**2
    ("Conv1, 224, x, 7, 7, 3, 64, 2,", r"line 2 \(Conv1\): field 'IFMAP Width'='x'"),
    ("Conv1, 224, 224, 7, 7, 3,", r"line 2 \(Conv1\): needs 8 fields"),
    (", 224, 224, 7, 7, 3, 64, 2,", r"line 2 \(unnamed\): field 'Layer name' is empty"),
    ("Conv1, 5, 5, 7, 7, 3, 64, 1,", r"line 2 \(Conv1\): filter 7x7 is larger than the IFMAP"),
    ("Conv1, 9, 9, 3, 3, 4, 8, 1, 2:4,", r"line 2 \(Conv1\): field 'Sparsity'='2:4'"),
    ("Conv_DP, 9, 9, 3, 3, 0, 1, 1,", r"line 2 \(Conv_DP\): field 'Channels'='0'"),
])
def test_bad_rows_name_file_line_and_field(tmp_path, row, match):
    f = tmp_path / "bad.csv"
    f.write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, Filter Width, Channels, "
                 "Num Filter, Strides,\n" + row + "\n")
    with pytest.raises(ModelError, match=r"bad\.csv: " + match):
        read_topology(f)


def test_bad_files(tmp_path):
    with pytest.raises(ModelError, match=r"missing\.csv: cannot read"):
        read_topology(tmp_path / "missing.csv")
    (tmp_path / "bin.csv").write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ModelError, match=r"bin\.csv: (not a text CSV|line 1 must be the header)"):
        read_topology(tmp_path / "bin.csv")
    (tmp_path / "empty.csv").write_text("Layer name, IFMAP Height,\n\n")
    with pytest.raises(ModelError, match=r"empty\.csv: no layer rows after the header"):
        read_topology(tmp_path / "empty.csv")


@pytest.mark.parametrize("layer, match", [
    (ConvLayer(1, 4, 9, 9, 4, 3, 3, dilation=2, name="d"), r"d: .*dilation=\(2, 2\)"),
    (ConvLayer(1, 4, 9, 9, 4, 3, 3, stride=(1, 2), name="s"), r"s: .*stride=\(1, 2\)"),
    (ConvLayer(2, 4, 9, 9, 4, 3, 3, name="b"), r"b: .*N=2: SCALE-Sim topologies are batch 1"),
    (ConvLayer(1, 4, 9, 9, 4, 3, 3, name="a,b"), r"name 'a,b': must be non-empty"),
    (ConvLayer(1, 4, 9, 9, 4, 3, 3, groups=2, name="xDP"), r"'DP' but groups=2 != C=4"),
])
def test_unwritable_layers_are_refused_and_nothing_is_written(tmp_path, layer, match):
    out = tmp_path / "t.csv"
    with pytest.raises(ModelError, match=match):
        write_topology([ConvLayer(1, 3, 8, 8, 4, 3, 3, name="ok"), layer], out)
    assert os.listdir(tmp_path) == []


# --- SCALE-Sim's topologies shipped with npusim -------------------------------------------

def test_shipped_topologies_are_scalesims_files():
    """The package's copies are byte for byte the files of SCALE-Sim's repository (those kept
    in tests/data/scalesim, and every one of ../shared/scalesim when it is beside the checkout)."""
    from npusim.frontends import TOPOLOGIES, shipped_topologies

    names = shipped_topologies()
    assert len(names) >= 20 and "Resnet18.csv" in names and "mobilenet.csv" in names
    for kept in DATA.glob("*.csv"):
        if kept.name != "layout_resnet18.csv":
            assert (TOPOLOGIES / kept.name).read_bytes() == kept.read_bytes(), kept.name
    if SHARED.is_dir():
        assert names == sorted(p.name for p in SHARED.glob("*.csv"))
        for name in names:
            assert (TOPOLOGIES / name).read_bytes() == (SHARED / name).read_bytes(), name


def test_bare_topology_name_is_the_shipped_one_unless_the_file_exists(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shipped = load_model("Resnet18.csv")
    assert shipped == read_topology(DATA / "Resnet18.csv") and len(shipped) == 21
    (tmp_path / "Resnet18.csv").write_text(
        "Layer name, H, W, R, S, C, K, Stride,\nConv1, 9, 9, 3, 3, 4, 8, 1,\n")
    assert [layer.name for layer in load_model("Resnet18.csv")] == ["Conv1"]  # the user's file


def test_missing_topology_names_the_shipped_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelError, match=r"^Resnet19\.csv: no such file \(nor a SCALE-Sim "
                                         r"topology shipped with npusim: FasterRCNN\.csv, .*"
                                         r"Resnet18\.csv, .*yolo_tiny_layer1\.csv\)$"):
        load_model("Resnet19.csv")
    with pytest.raises(ModelError, match=r"^sub/Resnet18\.csv: no such file$"):
        load_model("sub/Resnet18.csv")  # a path is taken as given


def test_a_network_of_no_conv_is_refused_not_written_as_a_header(tmp_path):
    """A header alone, which reading topologies refuses ('no layer rows'): once written."""
    from npusim.errors import ModelError
    from npusim.ir import GraphBuilder

    g = GraphBuilder("no_conv", (1, 3, 8, 8))
    graph = g.build(g.relu(g.input))
    with pytest.raises(ModelError, match=r"^no_conv: no conv layer, so no row to write"):
        write_topology(graph, tmp_path / "t.csv")
    assert list(tmp_path.iterdir()) == []
