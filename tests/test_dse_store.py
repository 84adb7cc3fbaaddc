"""The results store: one row per point, resumes, refuses another spec, version or a bad file."""

import csv
import io
import json
import sqlite3
from pathlib import Path

import pytest
from dse_helpers import SMALL, npusim, write_spec

from npusim import __version__
from npusim.arch import load_arch
from npusim.dse import Store, SweepError, load_spec, sweep
from npusim.dse.pareto import pareto
from npusim.dse.store import inert_parameters, to_csv
from npusim.frontends import load_model
from npusim.simulate import simulate_shapes


def test_every_point_stored_once_with_status_and_stats(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    out = sweep(spec, tmp_path / "s.db", workers=1)
    assert (out.ran, out.skipped, out.failed) == (9, 0, 3)
    rows = Store.read(tmp_path / "s.db").rows()
    assert len(rows) == len({r["key"] for r in rows}) == 9
    bad = [r for r in rows if r["status"] != "ok"]
    assert {r["params"]["systolic.cols"] for r in bad} == {0}
    assert all(r["status"] == "infeasible" and "systolic.cols=0: must be >= 1" in r["reason"]
               for r in bad)
    # an ok row holds what one simulate_shapes of that arch gives, totals and per layer
    row = next(r for r in rows if r["params"] == {"systolic.rows": 16, "systolic.cols": 32})
    arch = spec.arch(row["params"])
    ref = simulate_shapes(load_model("test.csv"), arch)
    assert row["totals"]["cycles"] == ref.total.cycles
    assert row["objectives"] == {"cycles": ref.total.cycles,
                                 "utilisation": pytest.approx(ref.total.utilisation)}
    assert [layer["name"] for layer in row["layers"]] == [s.name for s in ref.layers]
    assert row["layers"][0]["dram_bytes"] == ref.layers[0].dram_bytes
    assert row["totals"]["edp"] == pytest.approx(ref.total.energy_pj * arch.seconds(
        ref.total.cycles))


def test_rerun_resumes_and_a_grown_search_runs_only_new_points(tmp_path):
    spec_file = write_spec(tmp_path, SMALL + '[search]\nstrategy = "random"\nbudget = 4\n')
    first = sweep(spec_file, tmp_path / "s.db", workers=1)
    assert first.ran == 4
    again = sweep(spec_file, tmp_path / "s.db", workers=1)
    assert (again.ran, again.skipped) == (0, 4)
    whole = write_spec(tmp_path, SMALL, "grid.toml")  # same space, the full grid
    rest = sweep(whole, tmp_path / "s.db", workers=1)
    assert (rest.ran, rest.skipped) == (5, 4)
    assert len(Store.read(tmp_path / "s.db").rows()) == 9


def test_the_driver_holds_no_points_stats_while_a_sweep_runs(tmp_path, monkeypatch):
    """A point's result (its totals and per-layer stats: about 40 KB for ResNet-18's convs)
    was held by the driver until the sweep ended, in the pool's finished futures and in what
    the search keeps, and a resume read every stored row whole: 100,000 points needed some
    9 GB. The driver's Python memory, traced while 128 points run on the pool of 2 workers,
    ends less than 2 KB a point above where it was early, and a resume reads no row's stats."""
    import tracemalloc

    from npusim.dse.runner import PoolRunner, check_workloads, run_sweep

    spec = load_spec(write_spec(tmp_path, SMALL.replace('"test.csv"', '"Resnet18.csv"')
                                .replace("[4, 16, 64]", "{start = 4, stop = 64, step = 4}")
                                .replace("[8, 32, 0]", "{start = 8, stop = 64, step = 8}")))
    check_workloads(spec)
    held = []
    store, runner = Store.open(tmp_path / "s.db", spec), PoolRunner(2)
    tracemalloc.start()
    try:
        out = run_sweep(spec, store, runner,
                        lambda done, failed, total: held.append(tracemalloc.get_traced_memory()[0]))
    finally:
        tracemalloc.stop()
        runner.close()
        store.close()
    assert out.ran == 128 and out.failed == 0
    # The least of the last 16 samples: a result that arrived while the driver was busy is
    # held until it is read, and on a loaded machine several are at once (a transient peak).
    assert (min(held[-16:]) - held[2]) / out.ran < 2000
    monkeypatch.setattr(Store, "rows", lambda self: pytest.fail("a resume read rows whole"))
    again = sweep(spec, tmp_path / "s.db", workers=2)
    assert (again.ran, again.skipped) == (0, 128)


def test_two_sweeps_on_one_store_share_its_points(tmp_path):
    """Two sweeps of one spec into one store (two terminals, a job array) both run the
    first point; the second to store it died on the key's UNIQUE constraint (a traceback,
    exit 1). Each point is kept once, as the first stored it, numbered in order."""
    spec = load_spec(write_spec(tmp_path))
    first, second = Store.open(tmp_path / "s.db", spec), Store.open(tmp_path / "s.db", spec)
    a = {"model": "test.csv", "density": None, "systolic.rows": 4, "systolic.cols": 8}
    b = {**a, "systolic.rows": 16}
    done = {"status": "ok", "totals": {"cycles": 1}, "objectives": {"cycles": 1},
            "layers": [], "seconds": 0.5}
    first.add(a, done)
    second.add(a, {**done, "seconds": 0.7})  # the same point, finished later elsewhere
    second.add(b, done)
    first.add(b, done)
    rows = Store.read(tmp_path / "s.db").rows()
    assert [(r["params"]["systolic.rows"], r["seq"], r["seconds"]) for r in rows] == \
        [(4, 1, 0.5), (16, 2, 0.5)]


@pytest.mark.parametrize("workload, message", [
    ('models = ["net.py:nosuch"]',
     r"model '.*net\.py:nosuch' at density 1\.0, batch 1: .*no function 'nosuch'"),
    ('models = ["mtcnn-pnet"]\ndensities = ["deep-compression"]',
     r"model 'mtcnn-pnet' at density 'deep-compression', batch 1: .*deep-compression"),
])
def test_a_workload_that_does_not_load_is_the_specs_error_before_any_point(tmp_path, workload,
                                                                         message):
    """Every point of such a model was stored as an infeasible design and the sweep ended
    with exit 0; it is now refused before a store is made, as npusim run refuses it."""
    (tmp_path / "net.py").write_text("def build():\n    raise SystemExit\n")
    spec_file = write_spec(tmp_path, SMALL.replace('models = ["test.csv"]', workload))
    with pytest.raises(SweepError, match=message):
        sweep(spec_file, tmp_path / "s.db", workers=1)
    assert not (tmp_path / "s.db").exists()


def test_a_resume_runs_again_the_points_whose_run_crashed(tmp_path, monkeypatch):
    """A point stored as an error (its run crashed: out of memory in a worker that
    --workers 1 would spare) stayed so for good; a resume now runs it again, keeping the
    ok and infeasible points as they are."""
    from npusim.dse import runner

    spec_file = write_spec(tmp_path)
    real = runner._simulate

    def crashing(task):
        if '"systolic.rows" = 16' in task.where or "systolic.rows=16" in task.where:
            raise MemoryError("Unable to allocate 10.1 TiB")
        return real(task)

    monkeypatch.setattr(runner, "_simulate", crashing)
    first = sweep(spec_file, tmp_path / "s.db", workers=1)
    rows = Store.read(tmp_path / "s.db").rows()
    crashed = {r["key"] for r in rows if r["status"] == "error"}
    assert len(crashed) == 3 and first.failed == 5  # and 2 infeasible (cols = 0)
    monkeypatch.setattr(runner, "_simulate", real)
    again = sweep(spec_file, tmp_path / "s.db", workers=1)
    assert (again.ran, again.skipped) == (3, 6)
    after = {r["key"]: r for r in Store.read(tmp_path / "s.db").rows()}
    assert len(after) == 9 and all(after[k]["status"] != "error" for k in crashed)
    assert sorted(r["seq"] for r in after.values()) == list(range(1, 10))  # numbered once


def test_store_of_another_spec_or_version_is_refused(tmp_path):
    sweep(write_spec(tmp_path), tmp_path / "s.db", workers=1)
    other = write_spec(tmp_path, SMALL.replace("[4, 16, 64]", "[4, 16]"), "other.toml")
    with pytest.raises(SweepError, match="another sweep spec"):
        sweep(other, tmp_path / "s.db", workers=1)
    db = sqlite3.connect(tmp_path / "s.db")
    with db:
        db.execute("UPDATE meta SET value = '0.0.1' WHERE key = 'version'")
    db.close()
    with pytest.raises(SweepError, match=r"written by npusim 0\.0\.1.*new --store"):
        sweep(write_spec(tmp_path), tmp_path / "s.db", workers=1)  # not resumed into
    rows = Store.read(tmp_path / "s.db").rows()  # read: exported, its rows name their version
    assert len(rows) == 9 and {r["version"] for r in rows} == {__version__}


@pytest.mark.parametrize("change, said", [
    (("[4, 16, 64]", "[4, 16]"), "parameter 'systolic.rows' [4, 16, 64] in the store, "
                                 "[4, 16] given"),
    (('"systolic.cols"', '"memory.ifmap_sram_kb"'),
     "parameter 'memory.ifmap_sram_kb' none in the store, [8, 32, 0] given; parameter "
     "'systolic.cols' [8, 32, 0] in the store, none given"),
    (('objectives = ["cycles", "utilisation"]', 'objectives = ["cycles", "energy"]\n'
      'dtype = "int8"'), 'dtype "float32" in the store, "int8" given; objectives '
     '["cycles", "utilisation"] in the store, ["cycles", "energy"] given'),
    (('base = "systolic-32x32-ws"', 'base = "systolic-32x32-os"'), "the base arch differs"),
    (('"test.csv"', '"Resnet18.csv"'), 'models ["test.csv"] in the store, ["Resnet18.csv"] '
                                       "given"),
])
def test_another_spec_is_refused_saying_what_changed(tmp_path, change, said):
    """The store keeps its spec's facts: the refusal names each change, as stored and as
    given, in one line, and the store is left as it was."""
    sweep(write_spec(tmp_path), tmp_path / "s.db", workers=1)
    kept = (tmp_path / "s.db").read_bytes()
    other = write_spec(tmp_path, SMALL.replace(*change), "other.toml")
    r = npusim("sweep", other, "--store", tmp_path / "s.db")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"holds the results of another sweep spec ({tmp_path / 'sweep.toml'}: {said}); " \
        in r.stderr
    assert (tmp_path / "s.db").read_bytes() == kept


def test_a_store_that_cannot_be_written_is_refused_before_any_point(tmp_path, monkeypatch):
    """A read-only store (here opened so by SQLite itself: file modes do not bind root) or a
    folder that takes no new file: one error, no point run, the store as it was."""
    import npusim.dse.runner

    spec = load_spec(write_spec(tmp_path))
    sweep(spec, tmp_path / "s.db", workers=1)
    kept = (tmp_path / "s.db").read_bytes()
    connect = sqlite3.connect
    monkeypatch.setattr(sqlite3, "connect",
                        lambda path: connect(f"file:{path}?mode=ro", uri=True))
    monkeypatch.setattr(npusim.dse.runner, "run_task", lambda task: pytest.fail("a point ran"))
    with pytest.raises(SweepError, match=r"s.db: cannot write to the results store \(attempt "
                                         r"to write a readonly database\): the file or its "
                                         r"folder is read-only"):
        sweep(spec, tmp_path / "s.db", workers=1)
    assert (tmp_path / "s.db").read_bytes() == kept
    with pytest.raises(SweepError, match=r"new.db: cannot create a results store there \("
                                         r"unable to open database file\); is its folder "
                                         r"writable\?"):
        sweep(spec, tmp_path / "new.db", workers=1)


def test_truncated_or_foreign_store_is_one_clear_error(tmp_path):
    spec = load_spec(write_spec(tmp_path, SMALL.replace("[4, 16, 64]", "[2, 4, 8, 16, 32, 64]")))
    sweep(spec, tmp_path / "s.db", workers=1)
    data = (tmp_path / "s.db").read_bytes()
    assert len(data) > 4096
    (tmp_path / "cut.db").write_bytes(data[: len(data) // 2])
    with pytest.raises(SweepError, match="cut.db: not a readable npusim results store.*trunc"):
        Store.read(tmp_path / "cut.db")
    with pytest.raises(SweepError, match="not a readable"):
        Store.open(tmp_path / "cut.db", spec)
    (tmp_path / "junk.db").write_text("hello, not sqlite\n" * 100)
    with pytest.raises(SweepError, match="junk.db: not a readable npusim results store"):
        Store.read(tmp_path / "junk.db")
    r = npusim("sweep", "export", tmp_path / "cut.db", "--csv", tmp_path / "x.csv")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "truncated" in r.stderr


@pytest.mark.parametrize("tables, found", [
    (["points (x INTEGER)"], "(its tables: points)"),
    # a store's two table names, their columns: once an SQL error from deep in the store
    (["points (a)", "meta (k, v)"], "(other columns: meta (k, v); points (a))")])
def test_someone_elses_sqlite_database_is_refused_and_left_as_it_is(tmp_path, tables, found):
    theirs = tmp_path / "theirs.db"
    with sqlite3.connect(theirs) as db:
        for table in tables:
            db.execute(f"CREATE TABLE {table}")
        db.execute("INSERT INTO points VALUES (1)")
    db.close()
    before = theirs.read_bytes()
    spec = write_spec(tmp_path, SMALL)
    for argv in (["sweep", spec, "--store", theirs], ["pareto", theirs, "--x", "cycles",
                                                         "--y", "utilisation"],
                 ["sweep", "export", theirs, "--csv", tmp_path / "t.csv"]):
        r = npusim(*argv)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
        assert f"theirs.db: a SQLite database that is not an npusim results store {found}" \
            in r.stderr
        assert theirs.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([spec.name, "theirs.db"])
    empty = tmp_path / "empty.db"  # a database with no table yet: a store to start
    sqlite3.connect(empty).execute("PRAGMA user_version = 1").connection.close()
    r = npusim("pareto", empty, "--x", "cycles", "--y", "utilisation")
    assert r.returncode == 2 and "not an npusim results store (no sweep in it)" in r.stderr
    sweep(load_spec(spec), empty, workers=1)
    assert len(Store.read(empty).rows()) > 0


@pytest.mark.parametrize("schema, found", [
    (["CREATE VIEW answers AS SELECT 42 AS answer"], "(its views: answers)"),
    (["CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
      "CREATE TABLE points (x)", "CREATE INDEX mine ON points (x)"],
     "(its indexes: mine; its tables: meta, points)")])
def test_a_database_of_views_or_indexes_of_its_own_is_not_a_store(tmp_path, schema, found):
    """A database holding only a view (no table) was taken for an empty one, and the sweep
    wrote its tables into it."""
    theirs = tmp_path / "theirs.db"
    with sqlite3.connect(theirs) as db:
        for statement in schema:
            db.execute(statement)
    db.close()
    before = theirs.read_bytes()
    r = npusim("sweep", write_spec(tmp_path, SMALL), "--store", theirs)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"theirs.db: a SQLite database that is not an npusim results store {found}" \
        in r.stderr
    assert theirs.read_bytes() == before


def test_cli_sweep_export_csv(tmp_path):
    spec_file = write_spec(tmp_path)
    r = npusim("sweep", spec_file, "--store", tmp_path / "s.db", "--workers", "2")
    assert r.returncode == 0, r.stderr
    assert "9 points run (3 infeasible or failed), 0 already stored" in r.stdout
    r = npusim("sweep", "export", tmp_path / "s.db", "--csv", tmp_path / "t.csv")
    assert r.returncode == 0, r.stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "t.csv").read_text())))
    assert len(rows) == 9
    assert {r["status"] for r in rows} == {"ok", "infeasible"}
    ok = [r for r in rows if r["status"] == "ok"]
    assert all(float(r["objective.cycles"]) == float(r["total.cycles"]) for r in ok)
    assert to_csv(Store.read(tmp_path / "s.db")) == (tmp_path / "t.csv").read_text()
    r = npusim("sweep", spec_file)
    assert r.returncode == 2 and "needs --store FILE" in r.stderr
    r = npusim("sweep", "export", tmp_path / "s.db", "--csv", tmp_path / "t.csv", "--parquet",
               tmp_path / "t.csv")
    assert r.returncode == 2 and "--csv and --parquet both name" in r.stderr


def test_cli_sweep_export_parquet(tmp_path):
    """The Parquet table, read back by pyarrow, holds every stored point (its parameters,
    status and totals as the store has them) with the CSV's columns, and npusim's mark; a
    second export replaces the file npusim wrote."""
    pq = pytest.importorskip("pyarrow.parquet")  # a dev dependency: CI has it

    spec_file = write_spec(tmp_path)
    assert npusim("sweep", spec_file, "--store", tmp_path / "s.db").returncode == 0
    for _ in range(2):
        r = npusim("sweep", "export", tmp_path / "s.db", "--parquet", tmp_path / "t.parquet",
                   "--csv", tmp_path / "t.csv")
        assert r.returncode == 0, r.stderr
    table = pq.read_table(tmp_path / "t.parquet")
    assert table.schema.metadata[b"generator"] == f"npusim {__version__}".encode()
    header = next(csv.reader(io.StringIO((tmp_path / "t.csv").read_text())))
    assert table.column_names == header
    got = table.to_pylist()
    stored = Store.read(tmp_path / "s.db").rows()
    assert len(got) == len(stored) == 9
    for row, point in zip(sorted(got, key=lambda r: json.dumps(
            {k: r[k] for k in point_keys(r)}, sort_keys=True)),
            sorted(stored, key=lambda p: json.dumps(p["params"], sort_keys=True)),
            strict=True):
        assert {k: row[k] for k in point_keys(row)} == point["params"]
        assert row["status"] == point["status"]
        if point["status"] == "ok":
            assert row["total.cycles"] == point["totals"]["cycles"]
            assert row["total.energy_pj"] == pytest.approx(point["totals"]["energy_pj"])


def point_keys(row: dict) -> list[str]:
    """The parameter columns of an exported row: those named section.key or a top-level key
    the spec sweeps, not the point's own columns."""
    own = {"model", "density", "status", "reason", "version", "seconds"}
    return [k for k in row if k not in own and not k.startswith(("objective.", "total."))]


def test_parquet_without_pyarrow_is_refused_and_writes_nothing(tmp_path, monkeypatch, capsys):
    """Without pyarrow, --parquet is refused with one line naming what to install, before
    any file is written (the CSV asked beside it neither)."""
    import sys

    from npusim.cli import main

    spec_file = write_spec(tmp_path)
    assert npusim("sweep", spec_file, "--store", tmp_path / "s.db").returncode == 0
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # what an import without it raises
    before = sorted(tmp_path.iterdir())
    code = main(["sweep", "export", str(tmp_path / "s.db"), "--csv", str(tmp_path / "t.csv"),
                 "--parquet", str(tmp_path / "t.parquet")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "--parquet needs pyarrow, which is not installed (pip install pyarrow)" in err
    assert sorted(tmp_path.iterdir()) == before


def test_arch_key_of_any_section_and_top_level(tmp_path):
    text = """
base = "input-reuse-1024"
models = ["test.csv"]
[parameters]
"dataflow" = ["input-reuse", "systolic"]
"clock_mhz" = [500.0, 1000.0]
"""
    spec = load_spec(write_spec(tmp_path, text))
    sweep(spec, tmp_path / "s.db", workers=1)
    rows = Store.read(tmp_path / "s.db").rows()
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows), rows
    for r in rows:
        arch = load_arch("input-reuse-1024")
        ref = simulate_shapes(load_model("test.csv"), arch, dataflow=r["params"]["dataflow"])
        assert r["totals"]["cycles"] == ref.total.cycles
        assert r["totals"]["latency_s"] == pytest.approx(
            ref.total.cycles / (r["params"]["clock_mhz"] * 1e6))
        assert json.loads(json.dumps(r["params"])) == r["params"]


@pytest.mark.parametrize(("argv", "words"), [
    (["sweep", "export", "s.db"], "needs --csv OUT and/or --parquet OUT"),
    (["sweep", "SPEC", "--store", "s.db", "--csv", "x.csv"], "go with 'npusim sweep export"),
    (["sweep", "SPEC", "--store", "s.db", "--workers", "0"], "--workers must be >= 1"),
    (["sweep", "nosuch.toml", "--store", "s.db"], "nosuch.toml: cannot read the sweep spec"),
    (["sweep", "export", "nosuch.db", "--csv", "x.csv"], "nosuch.db: no such results store"),
    (["pareto", "nosuch.db", "--x", "cycles", "--y", "energy"], "no such results store"),
    # the store, not its figure's default folder beside it, named
    (["pareto", "nodir/s.db", "--x", "cycles", "--y", "energy"],
     "nodir/s.db: no such results store"),
    (["pareto", "DIR", "--x", "cycles", "--y", "energy"], "a folder, not a results store"),
    (["sweep", "export", "DIR", "--csv", "x.csv"], "a folder, not a results store"),
    # the quantities checked before they name the figure (a '/' in one was a traceback)
    (["pareto", "FILE", "--x", "cycles/x", "--y", "energy"], "'cycles/x': not a quantity"),
    (["pareto", "FILE", "--x", "cycles", "--y", "cycles"], "--x and --y are both 'cycles'"),
    (["sweep", "export", "FILE", "--csv", "x.csv", "--store", "o.db", "--workers", "2"],
     "--store, --workers go with 'npusim sweep SPEC', not with export"),
    (["sweep", "SPEC", "--store", "nodir/s.db"],
     "nodir/s.db: folder nodir does not exist; --store names a results file in an existing "
     "folder"),
])
def test_cli_misuse_is_one_line_exit_2(argv, words, tmp_path, monkeypatch, capsys):
    from npusim.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "folder.db").mkdir()
    (tmp_path / "file.db").touch()
    argv = [str(write_spec(tmp_path)) if a == "SPEC" else "folder.db" if a == "DIR" else
            "file.db" if a == "FILE" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1, err


def test_onnx_and_factory_models_relative_to_the_spec(tmp_path):
    import shutil

    from npusim.dse.runner import prepared
    from npusim.simulate import simulate

    root = Path(__file__).resolve().parent.parent / "examples"
    for name in ("small_cnn.onnx", "my_net.py"):
        shutil.copy(root / name, tmp_path / name)
    text = """
base = "sparse-pairs-32x32"
models = ["small_cnn.onnx", "my_net.py:build"]
densities = [0.5, 1.0]
[parameters]
"sparse-pairs.processor_groups" = [8, 32]
"""
    spec = load_spec(write_spec(tmp_path, text))
    assert spec.models == (str(tmp_path / "small_cnn.onnx"), f"{tmp_path / 'my_net.py'}:build")
    out = sweep(spec, tmp_path / "s.db", workers=1)
    assert (out.ran, out.failed) == (8, 0)
    for row in Store.read(tmp_path / "s.db").rows():
        _, graph, x = prepared(row["model"], row["density"], 1, 0)
        arch = spec.arch(row["params"])
        want = simulate(graph, x, arch, mode="estimate")
        assert row["totals"]["cycles"] == want.total.cycles
        assert row["totals"]["macs"] == want.total.macs


def test_a_parameter_the_machine_does_not_read_is_named_after_the_sweep(tmp_path):
    # group-tile-64mac sets its tiles' buffers (narrow_kb = wide_kb = 64): the arch's ifmap
    # SRAM is not read; with narrow_kb = 0 the tiles share it, and its size counts
    spec = ('base = "group-tile-64mac"\nmodels = ["mtcnn-rnet"]\n'
            'objectives = ["cycles", "area"]\n[parameters]\n'
            '"memory.ifmap_sram_kb" = [1, 64]\n"group-tile.macs" = [16, 64]\n{extra}')
    outcomes = {}
    for name, extra in (("fixed", ""), ("shared", '"group-tile.narrow_kb" = [0]\n')):
        path = write_spec(tmp_path, spec.format(extra=extra), f"{name}.toml")
        r = npusim("sweep", path, "--store", tmp_path / f"{name}.db", "-q")
        assert r.returncode == 0, r.stderr
        outcomes[name] = (Store.read(tmp_path / f"{name}.db"), r.stderr)
    store, err = outcomes["fixed"]
    cycles = {(r["params"]["memory.ifmap_sram_kb"], r["params"]["group-tile.macs"]):
              r["totals"]["cycles"] for r in store.rows()}
    assert cycles[1, 16] == cycles[64, 16] and cycles[1, 64] == cycles[64, 64]
    assert cycles[1, 16] != cycles[1, 64]
    assert inert_parameters(store) == ["memory.ifmap_sram_kb"]
    assert err == ("npusim: warning: memory.ifmap_sram_kb changed no result: points that "
                   "differ in it alone have equal totals: the machine does not read it with "
                   "base 'group-tile-64mac', or not at the values swept (docs/sweep.md, "
                   "'Parameters that change nothing')\n")
    store, err = outcomes["shared"]
    assert inert_parameters(store) == []  # narrow_kb has one value: never varied, not judged
    assert err == ""


def test_pareto_printed_to_a_pipe_cuts_no_name_nor_value(tmp_path):
    """Many parameters make the front wider than a terminal: into a file or pipe it is
    printed whole (it was cut at 160 columns: 'memory.…', '5.32892e…')."""
    keys = ["memory.ifmap_sram_kb", "memory.filter_sram_kb", "memory.ofmap_sram_kb",
            "memory.dram_latency_cycles", "energy.mac_int8_pj", "energy.mac_fp32_pj",
            "energy.sram_byte_pj", "energy.dram_byte_pj", "energy.vector_op_pj", "vector.lanes"]
    params = "\n".join(f'"{k}" = [{"64" if "kb" in k else "8"}]' for k in keys)
    spec = write_spec(tmp_path, 'base = "systolic-32x32-ws"\nmodels = ["test.csv"]\n'
                      f'[parameters]\n"systolic.rows" = [8, 16, 32]\n{params}\n'
                      '"systolic.stationary" = ["ws", "os"]\n')
    assert npusim("sweep", spec, "--store", tmp_path / "s.db").returncode == 0
    r = npusim("pareto", tmp_path / "s.db", "--x", "cycles", "--y", "energy")
    assert r.returncode == 0, r.stderr
    header = next(line for line in r.stdout.splitlines() if "systolic.rows" in line)
    assert all(k in header for k in keys) and "\u2026" not in r.stdout
    assert len(header) > 160
    # cycles whole (5.52221e+07 read two points 5 cycles apart alike)
    front = pareto(tmp_path / "s.db", "cycles", "energy").rows()
    assert all(any(f" {int(row['cycles']):,} " in line for line in r.stdout.splitlines())
               for row in front)


@pytest.mark.parametrize("damage", ["UPDATE points SET totals = '{\"cycles\": 1' WHERE seq = 2",
                                    "UPDATE points SET totals = NULL WHERE status = 'ok'"])
def test_a_damaged_row_is_one_clear_error(tmp_path, damage):
    """A row whose JSON was cut (the file damaged where SQLite's own check still passes)
    gave a JSONDecodeError traceback from sweep, export and pareto, exit 1."""
    spec_file = write_spec(tmp_path)
    sweep(spec_file, tmp_path / "s.db", workers=1)
    db = sqlite3.connect(tmp_path / "s.db")
    with db:
        db.execute(damage)
    db.close()
    for argv in (["sweep", spec_file, "--store", tmp_path / "s.db"],
                 ["sweep", "export", tmp_path / "s.db", "--csv", tmp_path / "out.csv"],
                 ["pareto", tmp_path / "s.db", "--x", "cycles", "--y", "utilisation"]):
        r = npusim(*argv)
        assert r.returncode == 2 and r.stderr.count("\n") == 1, (argv, r.stderr)
        assert "is damaged" in r.stderr and "Traceback" not in r.stderr
