"""Sweep specs: validation errors name the key; ranges, grid and random points by hand."""

import pytest
from dse_helpers import SMALL, write_spec

from npusim.dse import SweepError, load_spec, spec_from_toml_text
from npusim.dse.search import grid, point_at, random_points
from npusim.dse.spec import parameter_values

BASE = 'base = "systolic-32x32-ws"\nmodels = ["test.csv"]\n'


def spec(extra: str, params: str = '"systolic.rows" = [8]'):
    return spec_from_toml_text(BASE + extra + "\n[parameters]\n" + params, "s.toml")


@pytest.mark.parametrize(("extra", "params", "words"), [
    ("colour = 1", None, ["unknown key(s) colour", "valid keys"]),
    ("", '"systolic.row" = [8]', ["[systolic] has no key 'row'", "rows"]),
    ("", '"cache.size" = [8]', ["no arch section [cache]", "memory"]),
    ("", '"systolic.rows" = []', ["parameters.\"systolic.rows\"", "non-empty list"]),
    ("", '"systolic.rows" = {start = 8, stop = 4, step = 1}', ["stop=4 is below start=8"]),
    ("", '"systolic.rows" = {start = 8, stop = 64}', ["one of step (linear) or factor"]),
    # a wrong type made every point infeasible (a value out of range makes its own point so)
    ("", '"systolic.rows" = [8, "16"]', ["systolic.rows is an integer; '16' is not"]),
    ("", '"memory.double_buffered" = [true, 0]', ["double_buffered is true or false; 0 is not"]),
    ("", '"systolic.stationary" = ["ws", 1.5]', ["stationary is a string; 1.5 is not"]),
    ("", '"energy.dram_byte_pj" = [100.0, "high"]', ["dram_byte_pj is a number; 'high' is not"]),
    ("", '"systolic.rows" = {start = 8, stop = 64, factor = 1}', ["factor > 1"]),
    ("", '"systolic.rows" = {start = 8, stop = 64, step = 8, by = 2}', ["unknown key(s) by"]),
    ('objectives = ["speed"]', None, ["'speed': not a quantity", "cycles"]),
    ("densities = [0.5]", None, ["test.csv is a topology CSV", "densities = [1.0]"]),
    ('dtype = "int4"', None, ["dtype='int4'", "float32"]),
    ("batch = 0", None, ["batch=0", "integer >= 1"]),
    ("batch = 100000000", None, ["batch=100,000,000", "from 1 to 1,048,576"]),  # --batch's
    ('mode = "emulate"', None, ["mode='emulate'", "estimate"]),
    ('[search]\nstrategy = "random"', None, ["search.budget", "needs a budget"]),
    ('[search]\nstrategy = "anneal"', None, ["search.strategy='anneal'", "nsga2"]),
    ('[constraints]\ncycles = {most = 3}', None, ["constraints.cycles", "unknown key(s) most"]),
    ("", '"systolic.rows" = {start = 1, stop = 1000000, step = 1}\n'
         '"systolic.cols" = {start = 1, stop = 1000000, step = 1}',
     ["the grid has 1,000,000,000,000 points (1000000 x 1000000 x 1 x 1", "at most 1,000,000",
      'strategy = "random"']),
    ("", "systolic.rows = [8, 16]", ["systolic.rows reads as TOML's table [systolic]",
                                     'quote the dotted key, "systolic.rows" = [...]']),
    ("", '"systolic.rows" = [32, 32.0]', ["names a value twice"]),
    ("", '"systolic.rows" = {start = 10, stop = 30, factor = 1.5}',
     ["systolic.rows is an integer; 22.5 is not"]),
    ("[constraints]\ncycles = {max = 1, min = 10}", None,
     ["constraints.cycles: min=10 is above max=1"]),
    ('[search]\nstrategy = "random"\nbudget = 2000000', '"systolic.rows" = {start = 1, '
     'stop = 1000000, step = 1}\n"systolic.cols" = [1, 2, 3]', ["search.budget=2,000,000",
                                                              "at most 1,000,000 points"]),
])
def test_bad_spec_is_one_error_naming_the_key(extra, params, words):
    with pytest.raises(SweepError) as e:
        spec(extra, params or '"systolic.rows" = [8]')
    assert all(w in str(e.value) for w in words), str(e.value)
    assert "\n" not in str(e.value)


def test_bad_model_and_base_are_named():
    with pytest.raises(SweepError, match="models: 'nosuch.onnx'"):
        spec_from_toml_text('base = "systolic-32x32-ws"\nmodels = ["nosuch.onnx"]\n'
                            '[parameters]\n"systolic.rows" = [8]', "s.toml")
    with pytest.raises(SweepError, match=r"models: 'mtcnn-rnte': not a zoo model \(alexnet, "
                                         r".*mtcnn-rnet.*\) nor a model file"):
        spec_from_toml_text('base = "systolic-32x32-ws"\nmodels = ["mtcnn-rnet", "mtcnn-rnte"]'
                            '\n[parameters]\n"systolic.rows" = [8]', "s.toml")
    with pytest.raises(SweepError, match="base='tpu'"):
        spec_from_toml_text('base = "tpu"\nmodels = ["test.csv"]\n[parameters]\n'
                            '"systolic.rows" = [8]', "s.toml")


def test_a_spec_and_its_base_saved_with_a_byte_order_mark_read_as_without(tmp_path):
    (tmp_path / "base.toml").write_bytes(b"\xef\xbb\xbf[systolic]\nrows = 8\n")
    text = SMALL.replace('"systolic-32x32-ws"', '"base.toml"')
    plain = load_spec(write_spec(tmp_path, text))
    marked = tmp_path / "marked.toml"
    marked.write_bytes(b"\xef\xbb\xbf" + text.encode())
    spec = load_spec(marked)
    assert spec.digest() == plain.digest() and spec.base_text == plain.base_text
    assert "\ufeff" not in spec.base_text


def test_nsga2_searches_one_workload():
    two = SMALL.replace('models = ["test.csv"]', 'models = ["test.csv", "resnet18"]')
    nsga2 = '[search]\nstrategy = "nsga2"\nbudget = 4\n'
    with pytest.raises(SweepError, match=r"x.toml: search.strategy='nsga2' searches the arch "
                                         r"parameters for one workload; these models x "
                                         r"densities are 2"):
        spec_from_toml_text(two + nsga2, "x.toml")
    spec_from_toml_text(two + '[search]\nstrategy = "random"\nbudget = 4\n', "x.toml")
    densities = SMALL.replace('models = ["test.csv"]', 'models = ["resnet18"]').replace(
        "[parameters]", "densities = [0.5, 1.0]\n[parameters]")
    with pytest.raises(SweepError, match="models x densities are 2"):
        spec_from_toml_text(densities + nsga2, "x.toml")


def test_ranges_include_stop():
    assert parameter_values({"start": 8, "stop": 64, "step": 8}, "k") == (8, 16, 24, 32, 40, 48,
                                                                         56, 64)
    assert parameter_values({"start": 256, "stop": 4096, "factor": 2}, "k") == (
        256, 512, 1024, 2048, 4096)
    assert parameter_values({"start": 0.5, "stop": 1.0, "step": 0.25}, "k") == (0.5, 0.75, 1.0)
    assert parameter_values({"start": 8.0, "stop": 64, "factor": 2}, "k") == (8.0, 16.0, 32.0,
                                                                             64.0)


def test_grid_and_random_counts(tmp_path):
    s = load_spec(write_spec(tmp_path))
    points = list(grid(s))
    assert s.grid_size == len(points) == 9
    assert len({tuple(p.values()) for p in points}) == 9
    assert points[0] == {"systolic.rows": 4, "systolic.cols": 8, "model": "test.csv",
                         "density": 1.0}
    assert point_at(s, 8) == {"systolic.rows": 64, "systolic.cols": 0, "model": "test.csv",
                              "density": 1.0}
    text = SMALL + '[search]\nstrategy = "random"\nbudget = 4\nseed = 3\n'
    r = load_spec(write_spec(tmp_path, text, "r.toml"))
    picked = random_points(r)
    assert len(picked) == 4 and len({tuple(p.values()) for p in picked}) == 4
    assert picked == random_points(r)  # seeded
    assert all(p in points for p in picked)
    big = load_spec(write_spec(tmp_path, text.replace("budget = 4", "budget = 50"), "b.toml"))
    assert len(random_points(big)) == 9  # a budget above the grid: the whole grid


def test_point_arch_goes_through_the_arch_loader(tmp_path):
    s = load_spec(write_spec(tmp_path))
    arch = s.arch({"systolic.rows": 16, "systolic.cols": 8})
    assert arch.params("systolic").rows == 16 and arch.params("systolic").cols == 8
    assert arch.memory.ifmap_sram_kb == 64  # the rest of the base preset kept
    with pytest.raises(SweepError.__mro__[1], match=r"systolic.cols=0: must be >= 1"):
        s.arch({"systolic.rows": 16, "systolic.cols": 0})


def test_digest_ignores_search_but_not_the_space(tmp_path):
    a = load_spec(write_spec(tmp_path))
    b = load_spec(write_spec(tmp_path, SMALL + '[search]\nstrategy = "random"\nbudget = 2\n',
                             "b.toml"))
    c = load_spec(write_spec(tmp_path, SMALL.replace("[4, 16, 64]", "[4, 16]"), "c.toml"))
    assert a.digest() == b.digest() != c.digest()


def test_a_hybrid_base_sweeps_its_members_and_its_own_keys(tmp_path):
    """The hybrid's [hybrid] machines (a list) go back into each point's arch, and its own
    keys are parameters: every point equals a simulate of its arch."""
    import json

    from npusim.dse import sweep
    from npusim.dse.runner import prepared
    from npusim.dse.store import Store
    from npusim.simulate import simulate

    spec = spec_from_toml_text('base = "hybrid-3x1024"\nmodels = ["mtcnn-pnet"]\n[parameters]\n'
                               '"hybrid.objective" = ["cycles", "energy"]\n'
                               '"memory.dram_bytes_per_cycle" = [4, 16]', "s.toml")
    assert sweep(spec, tmp_path / "h.db", workers=1).failed == 0
    _, graph, x = prepared("mtcnn-pnet", 1.0, 1, 0)
    rows = Store.read(tmp_path / "h.db").rows()
    assert len(rows) == 4
    for row in rows:
        want = simulate(graph, x.copy(), spec.arch(row["params"]), mode="estimate")
        assert row["layers"] == json.loads(json.dumps([s.as_dict() for s in want.layers]))
    assert len({row["totals"]["cycles"] for row in rows}) >= 2


def test_any_character_of_the_base_arch_reaches_the_points(tmp_path):
    from npusim.arch.spec import PRESET_DIR

    base = (PRESET_DIR / "systolic-32x32-ws.toml").read_text()
    (tmp_path / "mine.toml").write_text(base.replace(
        'description = "', 'description = "my NPU \U0001f680, ', 1), encoding="utf-8")
    spec = load_spec(write_spec(tmp_path, 'base = "mine.toml"\nmodels = ["mtcnn-pnet"]\n'
                                '[parameters]\n"systolic.rows" = [8, 16]'))
    assert spec.arch({"systolic.rows": 8}).description.startswith("my NPU \U0001f680, ")


def test_a_geometric_range_of_an_integer_key_gives_integers():
    """8 x 1.5^i is 8, 12.0, 18.0, 27.0: whole, so the integer key takes 8, 12, 18, 27 (the
    arch refuses 12.0); a float key keeps its floats."""
    space = spec("", '"systolic.rows" = {start = 8, stop = 30, factor = 1.5}\n'
                     '"memory.dram_bytes_per_cycle" = {start = 4, stop = 10, factor = 1.5}')
    rows = space.parameters["systolic.rows"]
    assert rows == (8, 12, 18, 27) and all(type(v) is int for v in rows)
    assert space.parameters["memory.dram_bytes_per_cycle"] == (4.0, 6.0, 9.0)
    assert space.arch({"systolic.rows": 12, "memory.dram_bytes_per_cycle": 6.0}).params(
        "systolic").rows == 12
