"""A driver killed with SIGKILL mid-sweep: the same command resumes to exactly the full set."""

import os
import signal
import sqlite3
import subprocess
import sys
import time

from dse_helpers import NPUSIM, env, npusim, write_spec

from npusim.dse import Store, load_spec
from npusim.dse.search import grid
from npusim.dse.spec import point_key
from npusim.parallel import cores

# 961 points of about 5 ms each: seconds of work left when a test stops the sweep after its
# first points are stored, even when the machine is loaded and the test polls late (a grid
# of 256 points was sometimes finished by then)
MANY = """
base = "systolic-32x32-ws"
models = ["Resnet18.csv"]
objectives = ["cycles", "energy"]
[parameters]
"systolic.rows" = {start = 4, stop = 64, step = 2}
"systolic.cols" = {start = 4, stop = 64, step = 2}
"""


def stored(path) -> int:
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.1)
        try:
            return db.execute("SELECT COUNT(*) FROM points").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def test_driver_killed_mid_sweep_resumes_to_the_full_set(tmp_path):
    spec_file = write_spec(tmp_path, MANY)
    db = tmp_path / "s.db"
    proc = subprocess.Popen([*NPUSIM, "sweep", str(spec_file), "--store", str(db),
                             "--workers", "2"], env=env(), start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while stored(db) < 20 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert proc.poll() is None, "the sweep ended before it could be killed"
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the driver and its worker processes
        proc.wait()
    before = len(Store.read(db).rows())
    spec = load_spec(spec_file)
    assert 20 <= before < spec.grid_size
    r = npusim("sweep", spec_file, "--store", db, "--workers", "2")
    assert r.returncode == 0, r.stderr
    ran = spec.grid_size - before
    assert f"{ran} points run (0 infeasible or failed), {before} already stored" in r.stdout
    rows = Store.read(db).rows()
    assert sorted(r["key"] for r in rows) == sorted(point_key(p) for p in grid(spec))
    assert [r["seq"] for r in rows] == list(range(1, spec.grid_size + 1))


def _ctrl_c_heard() -> None:
    """In the sweep's process, before it starts: SIGINT's default action, which Python turns
    into KeyboardInterrupt. A test run started in the background by a shell without job
    control inherits SIGINT ignored, and a Ctrl-C sent to the sweep would go unheard."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def sweep_until_stored(spec_file, db, points: int) -> subprocess.Popen:
    """``npusim sweep`` on two workers in a session of its own, returned once ``points``
    points are stored (or it ended, or 120 s passed)."""
    proc = subprocess.Popen([*NPUSIM, "sweep", str(spec_file), "--store", str(db),
                             "--workers", "2"], env=env(), start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_ctrl_c_heard)
    deadline = time.monotonic() + 120
    while stored(db) < points and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return proc


def stderr_at_exit(proc: subprocess.Popen, timeout: float) -> str:
    """``proc``'s standard error once it ends; killed with its group if it has not ended
    within ``timeout`` seconds (hung: no process left behind; the caller's exit-code check
    then fails)."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.communicate()[1]


def test_ctrl_c_stops_with_the_finished_points_stored(tmp_path):
    spec_file = write_spec(tmp_path, MANY)
    db = tmp_path / "s.db"
    proc = sweep_until_stored(spec_file, db, 20)
    assert proc.poll() is None, "the sweep ended before Ctrl-C"
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C sends: the driver and its workers
    err = stderr_at_exit(proc, 120)
    count = len(Store.read(db).rows())
    assert proc.returncode == 130, err
    assert err == f"npusim: interrupted; {count} points are stored in {db}; the same command " \
        "resumes\n"  # one line, not a second 'interrupted' from the command line's catch-all
    r = npusim("sweep", spec_file, "--store", db, "--workers", "1")
    assert f"{load_spec(spec_file).grid_size - count} points run" in r.stdout, r.stderr


# points of about a second each (MobileNetV2 in int8 on group-tile): a second Ctrl-C lands
# while the driver waits for the running ones to finish
SLOW = """
base = "group-tile-64mac"
models = ["mobilenet_v2"]
dtype = "int8"
objectives = ["cycles", "energy"]
[parameters]
"group-tile.macs" = [16, 32, 64, 128]
"memory.dram_bytes_per_cycle" = [4, 8, 16, 32]
"""


def test_a_second_ctrl_c_while_the_points_finish_stops_at_once(tmp_path):
    """Ctrl-C, then Ctrl-C again while the driver waits for the running points: the wait
    was cut before the workers (which ignore SIGINT) were told to stop, and the process's
    exit then waited on them forever; now the second ends them, exit 130."""
    spec_file = write_spec(tmp_path, SLOW)
    db = tmp_path / "s.db"
    proc = sweep_until_stored(spec_file, db, 2)
    assert proc.poll() is None, "the sweep ended before Ctrl-C"
    workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                             text=True).stdout.split()
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)  # pressed again, impatient
    err = stderr_at_exit(proc, 60)
    assert proc.returncode == 130, err
    assert err.startswith("npusim: interrupted; ") and "Traceback" not in err, err
    time.sleep(0.5)
    alive = [pid for pid in workers if os.path.exists(f"/proc/{pid}")]
    assert not alive, f"workers {alive} outlived the sweep"


def test_a_dead_local_worker_is_one_clear_error_and_the_rerun_resumes(tmp_path):
    spec_file = write_spec(tmp_path, MANY)
    db = tmp_path / "s.db"
    proc = sweep_until_stored(spec_file, db, 10)
    workers = [int(pid) for pid in subprocess.run(["pgrep", "-P", str(proc.pid)],
                                                  capture_output=True, text=True).stdout.split()]
    for pid in workers:  # frozen: none finishes a point while one is killed
        os.kill(pid, signal.SIGSTOP)
    assert proc.poll() is None and workers, "the sweep ended before a worker could be killed"
    os.kill(workers[0], signal.SIGKILL)
    for pid in workers[1:]:
        os.kill(pid, signal.SIGCONT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 2 and err.count("\n") == 1, err
    assert "a worker process died while running a point" in err
    r = npusim("sweep", spec_file, "--store", db, "--workers", "1")
    assert r.returncode == 0, r.stderr
    assert len(Store.read(db).rows()) == load_spec(spec_file).grid_size


# A pool runner whose worker is killed after ten points, three times in one process, with the
# interpreter switching threads every microsecond: the driver then wakes on the first failed
# point while the pool's own thread is still failing the others (one cancelled under it there
# killed that thread, left the other worker running, and hung the process's exit)
DEAD_WORKER_RACE = """
import multiprocessing, os, signal, sys, threading
from npusim.dse import load_spec
from npusim.dse.runner import PoolRunner, _task
from npusim.dse.search import grid
from npusim.dse.spec import SweepError

thread_errors = []
threading.excepthook = lambda hook: thread_errors.append(hook.exc_type.__name__)
sys.setswitchinterval(1e-6)
spec = load_spec(sys.argv[1])
tasks = [_task(spec, p) for p in grid(spec)]
for _ in range(3):
    runner = PoolRunner(2)
    try:
        for n, _ in enumerate(runner.map(tasks), 1):
            if n == 10:
                os.kill(multiprocessing.active_children()[0].pid, signal.SIGKILL)
    except SweepError as e:
        print(str(e).split(";")[0])
    finally:
        runner.close()
    print("workers left:", len(multiprocessing.active_children()), "thread errors:", thread_errors)
sys.stdout.flush()
os._exit(0)  # a worker left would hang a normal exit: the lines above say so instead
"""


def test_a_dead_worker_ends_the_pool_whatever_the_driver_does_meanwhile(tmp_path):
    spec_file = write_spec(tmp_path, MANY)
    r = subprocess.run([sys.executable, "-c", DEAD_WORKER_RACE, str(spec_file)], env=env(),
                       capture_output=True, text=True, timeout=120)
    died = "a worker process died while running a point (killed, or out of memory: " \
        f"{cores()} cores' workers share this machine's memory)"
    assert r.stdout.splitlines() == [died, "workers left: 0 thread errors: []"] * 3, r.stderr
    assert r.returncode == 0, r.stderr
