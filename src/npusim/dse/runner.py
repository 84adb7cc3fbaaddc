"""Where points run: a local process pool (default), the driver itself, or a Dask cluster.

A worker gets a ``Task`` (the point's arch as TOML text and the model to run) and returns the
point's result: its status (``ok``, ``infeasible`` with the arch loader's or the dataflow's
reason, ``error`` for anything else), the network totals and the per-layer stats, each as
``LayerStats.as_dict()`` so every field the stats carry is kept. What depends on the model,
density, batch and seed but not on the arch (the loaded, pruned network and its input) is built
once per process and reused across arch points; so are, in mode estimate, the activations' and
weights' masks (``reuse``). A local pool's workers are forked from the driver after it built
them (``PoolRunner``), so a sweep builds them once; a Dask worker builds them on its first point.

The driver (``run_sweep``) alone writes the store, one point at a time as each finishes.
"""

from __future__ import annotations

import functools
import multiprocessing
import signal
import time
import traceback
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from ..errors import NpusimError
from ..parallel import cores
from . import reuse
from .search import run_search
from .spec import SweepError, SweepSpec, point_key, total_key
from .store import point_outcome

PR_SET_PDEATHSIG = 1  # linux/prctl.h
_blas_limits = None  # a pool worker's BLAS thread limit (``_worker_init``)
Progress = Callable[[int, int, int], None]  # (points done, of which failed, points to run)


@dataclass(frozen=True)
class Task:
    """One point to run: its arch (TOML text; ``where`` names it in errors) and its model
    (``model_digest``: the SHA-256 of its file, '' for a zoo model, so that a process
    that ran the file before builds an edited one again)."""

    arch_text: str
    where: str
    model: str
    density: float | str
    dtype: str
    batch: int
    mode: str
    seed: int
    model_digest: str = ""


def run_task(task: Task) -> dict:
    """Run one point; never raises for a bad point (its status and reason say what failed)."""
    start = time.perf_counter()
    try:
        result = _simulate(task)
    except NpusimError as e:
        return {"status": "infeasible", "reason": _line(str(e)),
                "seconds": time.perf_counter() - start}
    except Exception as e:  # noqa: BLE001  (a crash of one point is that point's result)
        where = traceback.extract_tb(e.__traceback__)[-1]
        return {"status": "error", "reason": f"{type(e).__name__}: {_line(str(e))} "
                f"({where.filename}:{where.lineno})", "seconds": time.perf_counter() - start}
    totals = result.total.as_dict()
    latency = result.arch.seconds(totals["cycles"])
    totals.update(latency_s=latency, edp=totals["energy_pj"] * latency, **result.area.as_dict())
    return {"status": "ok", "reason": None, "totals": totals,
            "layers": [s.as_dict() for s in result.layers],
            "seconds": time.perf_counter() - start}


def _line(message: str) -> str:
    lines = [s.strip() for s in message.strip().splitlines() if s.strip()]
    return lines[0] if lines else "unknown error"


def _simulate(task: Task):
    from ..arch.spec import arch_from_toml_text
    from ..simulate import simulate, simulate_shapes

    arch = arch_from_toml_text(task.arch_text, task.where)
    kind, model, x = prepared(task.model, task.density, task.batch, task.seed, task.model_digest)
    if kind == "shapes":
        return simulate_shapes(model, arch, dtype=task.dtype)
    if task.mode == "estimate":  # the first point's masks priced on this arch
        key = (task.model, task.model_digest, task.density, task.batch, task.seed)
        return reuse.estimate(key, model, x, arch, task.dtype)
    return simulate(model, x, arch, mode=task.mode, dtype=task.dtype)


@functools.lru_cache(maxsize=8)
def prepared(model: str, density, batch: int, seed: int, digest: str = ""):
    """('shapes', ConvLayers, None) for a topology CSV, else ('graph', pruned Graph, input):
    built once per process for each model (and ``digest``, its file's: an edited file is
    built again), density, batch and seed."""
    from ..frontends import input_tensor, load_model
    from ..frontends.prune import prune
    from ..ir import Graph

    loaded = load_model(model, batch=batch, seed=seed)
    if not isinstance(loaded, Graph):
        return "shapes", loaded, None
    if density != 1.0:
        loaded = prune(loaded, density)
    x, _ = input_tensor(model, loaded, seed=seed)
    return "graph", loaded, x


def check_workloads(spec: SweepSpec) -> None:
    """Load each of the spec's models at each density once, as its points will (``prepared``,
    kept for them in this process), before any point runs or a store is made: a model that
    does not load at the spec's batch, or a density it cannot take, is the spec's error, not
    every point's (each would be stored as an infeasible design, and the sweep end well)."""
    for model in spec.models:
        for density in spec.densities:
            try:
                prepared(model, density, spec.batch, spec.seed, _digest(spec, model))
            except NpusimError as e:
                raise SweepError(f"{spec.where}: model {model!r} at density {density!r}, "
                                 f"batch {spec.batch}: {_line(str(e))}") from None


# ---- runners --------------------------------------------------------------------------------

class InlineRunner:
    """Runs every point in the driver's own process, one after another."""

    def map(self, tasks: list[Task]) -> Iterator[tuple[int, dict]]:
        for i, task in enumerate(tasks):
            yield i, run_task(task)

    def close(self) -> None:
        pass


class PoolRunner:
    """A local pool of ``workers`` processes, forked from the driver once it holds what the
    points share.

    Before the pool starts, the driver runs the first point of each model (``_shared``: the
    model, density, batch, seed, dtype, mode and machine) itself: that loads, prunes and feeds
    the network, loads numba's compiled kernels and, in mode estimate, keeps every conv's
    masks (``reuse``). The workers are forks of the driver, so each starts with all of that in
    memory instead of a fresh interpreter's 3-4 s (numba's import and kernels, the model again
    in every worker). A later batch of points (a search asks in rounds) with a model the pool
    has not seen is warmed in the driver the same way and served by a pool forked anew. At
    most ``reuse.KEEP`` models are warmed at a time, what the driver's caches keep: a worker
    builds any further one on its first point of it, as a spawned worker did.

    Forking is safe here: a sweep's points run npusim's own arithmetic only (numpy, numba
    kernels, npusim's row threads, which a child starts afresh: ``parallel``), never a
    framework's (no fallback nodes), and the driver forks between points, with no simulate
    running; OpenBLAS shuts its threads down around a fork."""

    def __init__(self, workers: int):
        self.workers = workers
        self.pool: ProcessPoolExecutor | None = None
        self.warm: set[tuple] = set()  # what the driver holds, so the pool's workers too

    def map(self, tasks: list[Task]) -> Iterator[tuple[int, dict]]:
        firsts: dict[tuple, int] = {}
        for i, task in enumerate(tasks):
            shared = _shared(task)
            if shared is not None and shared not in self.warm and len(firsts) < reuse.KEEP:
                firsts.setdefault(shared, i)
        for shared, i in firsts.items():
            yield i, run_task(tasks[i])
            self.warm.add(shared)
        if firsts:
            self._stop_pool()  # forked before these were warm
        rest = sorted(set(range(len(tasks))) - set(firsts.values()))
        yield from self._run_on_pool(tasks, rest)

    def _run_on_pool(self, tasks: list[Task], indices: list[int]):
        """The points at ``indices`` on the pool, each (index, result) as it finishes. A point
        still queued when the caller stops is cancelled by ``close`` (in the pool's own
        thread: one cancelled here could race the pool failing its points when a worker
        dies, and the pool's thread would stop before it ended the other workers)."""
        futures = {self.submit(run_task, tasks[i]): i for i in indices}
        for f in as_completed(futures):
            try:
                result = f.result()
            except BrokenProcessPool:
                self._stop_pool()  # the pool fails every point and ends its workers first
                raise SweepError(f"a worker process died while running a point (killed, "
                                 f"or out of memory: {cores()} cores' workers share this "
                                 "machine's memory); the points finished are stored: rerun "
                                 "to resume, with --workers 1 if memory is short") from None
            yield futures.pop(f), result  # a finished future holds its result: let it go

    def submit(self, fn, *args):
        """``fn(*args)`` on a worker (the pool is forked from the driver as it is now, if
        none is running): its future."""
        if self.pool is None:
            self.pool = ProcessPoolExecutor(
                self.workers, mp_context=multiprocessing.get_context("fork"),
                initializer=_worker_init, initargs=(max(1, cores() // self.workers),))
        return self.pool.submit(fn, *args)

    def _stop_pool(self) -> None:
        """Stop the pool once the points running finish. A Ctrl-C while it waits ends the
        workers at once: they ignore SIGINT (``_worker_init``), and an interrupted wait
        leaves them unsent their stop, for the interpreter's exit to wait on forever."""
        pool, self.pool = self.pool, None
        if pool is None:
            return
        try:
            pool.shutdown(wait=True, cancel_futures=True)
        except KeyboardInterrupt:
            for process in list((pool._processes or {}).values()):
                process.kill()
            pool.shutdown(wait=False, cancel_futures=True)
            raise

    def close(self) -> None:
        self._stop_pool()


def _shared(task: Task) -> tuple | None:
    """What a point shares with the other points of its model (the key of what ``prepared``
    and ``reuse`` keep), or None for a point whose arch does not load (it fails at once,
    wherever it runs)."""
    from ..arch.spec import arch_from_toml_text

    try:
        machine = arch_from_toml_text(task.arch_text, task.where).dataflow
    except NpusimError:
        return None
    return (task.model, task.model_digest, task.density, task.batch, task.seed, task.dtype,
            task.mode, machine)


def _worker_init(threads: int) -> None:
    """In a pool worker: leave Ctrl-C to the driver (which stops the pool once the points
    running finish: a worker interrupted mid-queue breaks the pool and can hang its shutdown),
    ask Linux to kill this process when the driver dies (a driver killed with SIGKILL would
    otherwise leave its workers running), and give BLAS ``threads`` threads, its share of the
    cores (OpenBLAS threads busy-wait: one worker's would take the others' cores)."""
    global _blas_limits
    from threadpoolctl import threadpool_limits

    _blas_limits = threadpool_limits(threads, user_api="blas")
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class DaskRunner:
    """The workers of a running Dask distributed scheduler at ``address`` (tcp://HOST:PORT).
    A worker lost mid-point has its points rerun by Dask on another worker."""

    def __init__(self, address: str):
        try:
            from distributed import Client
        except ImportError:
            raise SweepError("--scheduler needs dask.distributed: pip install "
                             "'dask[distributed]'") from None
        try:
            self.client = Client(address, timeout="10s")
        except ValueError as e:  # no port, an unknown protocol
            raise SweepError(f"--scheduler {address}: not a Dask scheduler address "
                             f"({_line(str(e))}); give tcp://HOST:PORT, as 'dask scheduler' "
                             "prints it") from None
        except (OSError, TimeoutError) as e:
            raise SweepError(f"--scheduler {address}: cannot reach a Dask scheduler there "
                             f"({_line(str(e))}); start one with 'dask scheduler' and workers "
                             "with 'dask worker ADDRESS' (docs/sweep.md)") from None

    def map(self, tasks: list[Task]) -> Iterator[tuple[int, dict]]:
        from distributed import as_completed as dask_completed

        live = {}  # key -> (index, future) of the points not yet read: a future the client
        for i, task in enumerate(tasks):  # holds keeps its result in the cluster's memory
            f = self.client.submit(run_task, task, pure=False)
            live[f.key] = (i, f)
        try:
            for f in dask_completed([f for _, f in live.values()]):
                try:
                    result = f.result()
                except Exception as e:  # noqa: BLE001  (run_task itself never raises)
                    raise SweepError(f"the Dask cluster lost a point ({type(e).__name__}: "
                                     f"{_line(str(e))}); the points finished are stored: rerun "
                                     "to resume") from None
                i, _ = live.pop(f.key)
                f.release()
                yield i, result
        finally:
            self.client.cancel([f for _, f in live.values()])

    def close(self) -> None:
        self.client.close()


def make_runner(workers: int | None = None, scheduler: str | None = None):
    """A Dask runner for ``scheduler``, else a pool of ``workers`` processes (None: one per
    core; 1: the driver itself)."""
    if scheduler:
        return DaskRunner(scheduler)
    workers = cores() if workers is None else workers
    return InlineRunner() if workers <= 1 else PoolRunner(workers)


# ---- the driver -----------------------------------------------------------------------------

def objective_values(spec: SweepSpec, totals: dict) -> dict[str, float]:
    """The spec's objectives and constrained quantities from a point's totals."""
    names = [*spec.objectives, *(c.quantity for c in spec.constraints)]
    return {q: float(totals[total_key(q)]) for q in dict.fromkeys(names)}


def finish(spec: SweepSpec, result: dict) -> dict:
    """A worker's result with its objective values, infeasible if a constraint is not met."""
    if result["status"] != "ok":
        return result
    values = objective_values(spec, result["totals"])
    why = [v for c in spec.constraints if (v := c.violation(values[c.quantity]))]
    return {**result, "objectives": values,
            **({"status": "infeasible", "reason": "; ".join(why)} if why else {})}


@dataclass
class SweepOutcome:
    """What one ``run_sweep`` call did: points run now, found already stored, failed now."""

    ran: int = 0
    skipped: int = 0
    failed: int = 0


def run_sweep(spec: SweepSpec, store, runner, progress: Progress | None = None) -> SweepOutcome:
    """Run ``spec``'s search into ``store`` (``store.Store``) on ``runner``; points already in
    the store are not run again, but for those whose run crashed (status ``error``: out of
    memory, a worker's fault), which a resume runs again. Each point is stored as it
    finishes, so an interrupted sweep keeps everything finished; the driver keeps of each
    only its outcome (``store.point_outcome``: status and objectives), not its stats."""
    outcome = SweepOutcome()
    done = {key: row for key, row in store.done().items()  # a crashed point runs again
            if row["status"] != "error"}
    stored = set(done)  # found in the store before this run
    asked: set[str] = set()
    planned = spec.points_planned

    def evaluate(points: list[dict]) -> list[tuple | None]:
        todo = {point_key(p): p for p in points if point_key(p) not in done}
        asked.update(point_key(p) for p in points)
        outcome.skipped = len(asked & stored)
        tasks = [_task(spec, p) for p in todo.values()]
        keys = list(todo)
        if progress:
            progress(outcome.ran, outcome.failed, planned - outcome.skipped)
        for i, result in runner.map(tasks):
            result = finish(spec, result)
            store.add(todo[keys[i]], result)
            done[keys[i]] = point_outcome(result["status"], result.get("objectives"))
            outcome.ran += 1
            outcome.failed += result["status"] != "ok"
            if progress:
                progress(outcome.ran, outcome.failed, planned - outcome.skipped)
        return [_values(spec, done[point_key(p)]) for p in points]

    run_search(spec, evaluate)
    return outcome


def _task(spec: SweepSpec, point: dict) -> Task:
    params = {k: v for k, v in point.items() if k not in ("model", "density")}
    shown = ", ".join(f"{k}={v!r}" for k, v in params.items())
    return Task(spec.arch_text(params), f"point ({shown})", point["model"], point["density"],
                spec.dtype, spec.batch, spec.mode, spec.seed, _digest(spec, point["model"]))


def _digest(spec: SweepSpec, model: str) -> str:
    """The digest of ``model``'s file as the spec read it ('' where the spec keeps none):
    what names the file's contents in the workloads a process keeps (``prepared``)."""
    return spec.model_digests[spec.models.index(model)] if spec.model_digests else ""


def _values(spec: SweepSpec, row: dict) -> tuple | None:
    if row["status"] != "ok":
        return None
    return tuple(row["objectives"][q] for q in spec.objectives)


def sweep(spec: SweepSpec | str, store_path, *, workers: int | None = None,
          scheduler: str | None = None, progress: Progress | None = None) -> SweepOutcome:
    """Run a sweep spec (a ``SweepSpec`` or a spec file) into the store at ``store_path``:
    the library form of ``npusim sweep``."""
    from .spec import load_spec
    from .store import Store

    spec = load_spec(spec) if not isinstance(spec, SweepSpec) else spec
    check_workloads(spec)
    store = Store.open(store_path, spec)
    runner = make_runner(workers, scheduler)
    try:
        return run_sweep(spec, store, runner, progress)
    finally:
        runner.close()
        store.close()
