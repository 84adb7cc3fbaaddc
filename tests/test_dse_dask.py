"""A real Dask scheduler and two workers on 127.0.0.1, as subprocesses: the same results as the
local run, and a worker killed with SIGKILL mid-sweep costs no point."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dse_helpers import SMALL, env, npusim, write_spec
from test_dse_faults import MANY, stored

from npusim.dse import Store, load_spec
from npusim.dse.search import grid
from npusim.dse.spec import point_key

pytest.importorskip("distributed")
DASK = Path(sys.executable).with_name("dask")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cluster():
    """(address, worker processes) of a scheduler and two single-thread workers."""
    from distributed import Client

    address = f"tcp://127.0.0.1:{free_port()}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env()}
    procs = [subprocess.Popen([str(DASK), "scheduler", "--host", "127.0.0.1", "--port",
                               address.rsplit(":", 1)[1], "--no-dashboard"], **quiet)]
    try:
        time.sleep(1.0)
        workers = [subprocess.Popen([str(DASK), "worker", address, "--nthreads", "1",
                                     "--no-nanny", "--no-dashboard"], **quiet)
                   for _ in range(2)]
        procs += workers
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(2, timeout=120)
        yield address, workers
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
            p.wait()


def results(db) -> dict:
    return {r["key"]: (r["status"], r["reason"], r["totals"], r["layers"])
            for r in Store.read(db).rows()}


def test_dask_cluster_gives_the_local_results(tmp_path, cluster):
    address, _ = cluster
    spec_file = write_spec(tmp_path, SMALL)
    local = npusim("sweep", spec_file, "--store", tmp_path / "local.db", "--workers", "1")
    assert local.returncode == 0, local.stderr
    r = npusim("sweep", spec_file, "--store", tmp_path / "dask.db", "--scheduler", address)
    assert r.returncode == 0, r.stderr
    assert "9 points run (3 infeasible or failed)" in r.stdout
    assert results(tmp_path / "dask.db") == results(tmp_path / "local.db")


def test_worker_killed_mid_sweep_costs_no_point(tmp_path, cluster):
    address, workers = cluster
    spec_file = write_spec(tmp_path, MANY)
    db = tmp_path / "s.db"
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from npusim.cli import main; "
                             "sys.exit(main())", "sweep", str(spec_file), "--store", str(db),
                             "--scheduler", address], env=env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while stored(db) < 10 and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the sweep ended before a worker could be killed"
    os.kill(workers[0].pid, signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    spec = load_spec(spec_file)
    rows = Store.read(db).rows()
    assert sorted(r["key"] for r in rows) == sorted(point_key(p) for p in grid(spec))
    assert all(r["status"] == "ok" for r in rows)


@pytest.mark.parametrize("address, words", [
    ("notaurl", "not a Dask scheduler address (missing port number"),
    ("foo://127.0.0.1:1", "not a Dask scheduler address (unknown address scheme 'foo'"),
    ("tcp://127.0.0.1:{free}", "cannot reach a Dask scheduler there"),
])
def test_a_scheduler_not_reached_is_one_line_and_makes_no_store(tmp_path, address, words):
    spec_file = write_spec(tmp_path, SMALL)
    (tmp_path / "test.csv").write_text("Layer name, IFMAP Height, IFMAP Width, Filter Height, "
                                       "Filter Width, Channels, Num Filter, Strides,\n"
                                       "c1, 8, 8, 3, 3, 2, 4, 1,\n")
    r = npusim("sweep", spec_file, "--store", tmp_path / "s.db", "--scheduler",
               address.format(free=free_port()))
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert words in r.stderr
    assert not (tmp_path / "s.db").exists()
