"""The results store: one SQLite file, one row per finished point, written by the driver only.

Each point is written in its own transaction as it finishes, so a driver killed at any moment
leaves every finished point stored and none half-written; the same command then resumes,
skipping them. The ``meta`` table holds the spec (its facts and digest) and the npusim version
that wrote the store: a store from another spec (saying what changed) or version is refused, as
is a file that is not a whole SQLite database or holds anything of someone else's.
"""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

from .. import __version__
from .spec import SweepError, point_key

SCHEMA = 1
STATUSES = ("ok", "infeasible", "error")
COLUMNS = ("key", "seq", "params", "model", "density", "version", "status", "reason",
           "totals", "objectives", "layers", "seconds")
JSON_COLUMNS = frozenset({"params", "density", "totals", "objectives", "layers"})
_CREATE = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS points (
    key TEXT PRIMARY KEY,      -- canonical JSON of the point (its identity)
    seq INTEGER NOT NULL,      -- order stored
    params TEXT NOT NULL,      -- JSON: the arch parameters of the point
    model TEXT NOT NULL,
    density TEXT NOT NULL,     -- JSON: a number or "deep-compression"
    version TEXT NOT NULL,     -- npusim version that ran it
    status TEXT NOT NULL CHECK (status IN ('ok', 'infeasible', 'error')),
    reason TEXT,               -- why infeasible or failed
    totals TEXT,               -- JSON: LayerStats.as_dict() of the network total
    objectives TEXT,           -- JSON: {quantity: value}
    layers TEXT,               -- JSON: one LayerStats.as_dict() per layer
    seconds REAL               -- wall time of the point on its worker, s
);
CREATE INDEX IF NOT EXISTS points_seq ON points (seq);
"""


class Store:
    """An open results store. Use ``Store.open(path, spec)`` to run into it, ``Store.read(path)``
    to read one."""

    def __init__(self, path: Path, db: sqlite3.Connection):
        self.path, self.db = path, db

    @classmethod
    def open(cls, path: str | Path, spec) -> Store:
        """Open (or create) the store for ``spec``; refuse one written for another spec or by
        another npusim version."""
        store = cls(Path(path), _connect(Path(path), create=True))
        meta = store.meta()
        if not meta:
            with store.db:
                store.db.executemany("INSERT INTO meta VALUES (?, ?)", [
                    ("schema", str(SCHEMA)), ("version", __version__),
                    ("spec_digest", spec.digest()), ("spec_where", spec.where),
                    ("spec_facts", json.dumps(spec.facts(), sort_keys=True)),
                    ("objectives", json.dumps(spec.objectives))])
            return store
        store._check_version(meta)
        if meta.get("spec_digest") != spec.digest():
            changed = spec_changes(json.loads(meta["spec_facts"]), spec.facts()) \
                if "spec_facts" in meta else "the spec's text is not kept in this store"
            raise SweepError(f"{path}: this store holds the results of another sweep spec "
                             f"({meta.get('spec_where', '?')}: {changed}); a store holds one "
                             "spec's points: give another --store file, or rerun that spec")
        return store

    @classmethod
    def read(cls, path: str | Path) -> Store:
        """Open an existing store read-only (export, Pareto), whichever npusim version wrote
        it (each row names its own)."""
        path = stored(path)
        store = cls(path, _connect(path, create=False))
        if not _tables(store.db) or not store.meta():
            raise SweepError(f"{path}: not an npusim results store (no sweep in it)")
        store._check_version(store.meta(), writing=False)
        return store

    def _check_version(self, meta: dict, writing: bool = True) -> None:
        """Refuse a store of another schema; to run into, one of another npusim version too
        (its points' costs may differ from this one's). Read, its rows carry their version."""
        if meta.get("schema") != str(SCHEMA) or writing and meta.get("version") != __version__:
            raise SweepError(f"{self.path}: written by npusim {meta.get('version', '?')} "
                             f"(store schema {meta.get('schema', '?')}); this is npusim "
                             f"{__version__} (schema {SCHEMA}), whose costs may differ: "
                             "use a new --store file")

    def meta(self) -> dict[str, str]:
        return dict(self.db.execute("SELECT key, value FROM meta"))

    def done(self) -> dict[str, dict]:
        """Each stored point's outcome by key: its ``status`` and ``objectives``, all that a
        search reads (not its totals and layers, tens of KB a point: a driver resuming a
        large sweep would hold them all)."""
        return {row["key"]: point_outcome(row["status"], row["objectives"])
                for row in self._decoded(("key", "seq", "status", "objectives"))}

    def add(self, point: dict, result: dict) -> None:
        """Store one finished point in its own transaction, numbered next (one statement:
        two sweeps on one store number their points apart). ``result`` has status, reason,
        totals, objectives, layers, seconds. A point another sweep on the same store has
        stored meanwhile is kept as it is (the same point gives the same result); one
        stored as an ``error`` (its run crashed: out of memory, say) takes the new result."""
        params = {k: v for k, v in point.items() if k not in ("model", "density")}
        row = (point_key(point), json.dumps(params), point["model"],
               json.dumps(point["density"]), __version__, result["status"], result.get("reason"),
               _json(result.get("totals")), _json(result.get("objectives")),
               _json(result.get("layers")), result.get("seconds"))
        values = ", ".join(["?", "COALESCE(MAX(seq), 0) + 1", *["?"] * (len(COLUMNS) - 2)])
        again = ", ".join(f"{c} = excluded.{c}" for c in COLUMNS if c not in ("key", "seq"))
        with self.db:
            self.db.execute(f"INSERT INTO points ({', '.join(COLUMNS)}) "
                            f"SELECT {values} FROM points WHERE true "
                            f"ON CONFLICT (key) DO UPDATE SET {again} "
                            "WHERE points.status = 'error'", row)

    def rows(self) -> list[dict]:
        """Every stored point in the order stored, JSON columns decoded (``_decoded``)."""
        return list(self._decoded(COLUMNS))

    def _decoded(self, columns) -> Iterator[dict]:
        """The stored points in the order stored, ``columns`` of each (``seq`` and ``status``
        among them), the JSON ones decoded; a row whose JSON does not decode, or an ok row
        without its totals or objectives (those read), is refused naming the store and the
        row (its file was damaged)."""
        for values in self.db.execute(f"SELECT {', '.join(columns)} FROM points ORDER BY seq"):
            row = dict(zip(columns, values, strict=True))
            for k in JSON_COLUMNS & row.keys():
                try:
                    row[k] = json.loads(row[k]) if row[k] is not None else None
                except (json.JSONDecodeError, TypeError) as e:
                    raise self._damaged(row["seq"], f"{k}: {e}") from None
            lacking = [k for k in ("totals", "objectives") if k in row
                       and not isinstance(row[k], dict)]
            if row["status"] == "ok" and lacking:
                raise self._damaged(row["seq"], f"an ok point without its {lacking[0]}")
            yield row

    def _damaged(self, seq: int, why: str) -> SweepError:
        return SweepError(f"{self.path}: row {seq} is damaged ({why}); move the store away and "
                          "rerun to start a new one")

    def close(self) -> None:
        self.db.close()


FACT_NAMES = {"base_text": "the base arch", "model_digests": "the model files' contents"}
SHOWN = 60  # characters of a value shown in a change


def spec_changes(stored: dict, given: dict) -> str:
    """What differs between the facts (``SweepSpec.facts``) of the spec a store was written
    for and of ``given``: each changed parameter and each other changed fact, as the store
    has it and as given (one line)."""
    changes = []
    theirs, ours = stored.get("parameters", {}), given.get("parameters", {})
    for key in sorted({*theirs, *ours}):
        if theirs.get(key) != ours.get(key):
            changes.append(f"parameter {key!r} {_shown(theirs.get(key))} in the store, "
                           f"{_shown(ours.get(key))} given")
    for key in sorted({*stored, *given} - {"parameters"}):
        if key == "model_digests" and stored.get("models") != given.get("models"):
            continue  # other models: their files' digests differ with them
        if stored.get(key) != given.get(key):
            name = FACT_NAMES.get(key, key)
            changes.append(f"{name} differ" if key == "model_digests" else
                           f"{name} differs" if key == "base_text" else
                           f"{name} {_shown(stored.get(key))} in the store, "
                           f"{_shown(given.get(key))} given")
    return "; ".join(changes) or "the same facts, another digest"


def _shown(value) -> str:
    """A fact's value in a message: 'none' when absent, else its JSON, cut at ``SHOWN``."""
    if value is None:
        return "none"
    text = json.dumps(value)
    return text if len(text) <= SHOWN else f"{text[:SHOWN - 3]}..."


def point_outcome(status: str, objectives: dict | None) -> dict:
    """What a search keeps of a point: its status and objective values."""
    return {"status": status, "objectives": objectives}


def _json(value) -> str | None:
    return None if value is None else json.dumps(value)


def stored(path: str | Path) -> Path:
    """``path``, refused unless it is a file (a store to read): before any other work."""
    path = Path(path)
    if path.is_dir():
        raise SweepError(f"{path}: a folder, not a results store (a SQLite file a sweep wrote)")
    if not path.is_file():
        raise SweepError(f"{path}: no such results store")
    return path


def _connect(path: Path, create: bool) -> sqlite3.Connection:
    """A connection to a whole SQLite store; a file that is not one (or truncated) refused."""
    if path.exists() and not path.is_file():
        raise SweepError(f"{path}: is not a file; --store names a SQLite results file")
    if not path.parent.is_dir():
        raise SweepError(f"{path}: folder {path.parent} does not exist; --store names a "
                         "results file in an existing folder")
    fresh = not path.exists() or path.stat().st_size == 0
    if not create and fresh:
        raise SweepError(f"{path}: empty file, not an npusim results store")
    try:
        db = sqlite3.connect(path)
        if not fresh:
            _check_whole(db, path)
            _check_ours(db, path)
    except sqlite3.DatabaseError as e:
        if fresh:  # nothing there to be corrupt: the folder would not take a new file
            raise SweepError(f"{path}: cannot create a results store there ({e}); is its "
                             "folder writable?") from None
        raise SweepError(f"{path}: not a readable npusim results store (corrupt or not SQLite: "
                         f"{e}); move it away and rerun to start a new store") from None
    if create:
        _check_writable(db, path)
    return db


def _check_writable(db: sqlite3.Connection, path: Path) -> None:
    """Create the tables if new, and write a row that is rolled back: a sweep stores each
    point as it ends, so a store it cannot write (a read-only file, or a folder where SQLite
    cannot make its journal) is refused before any point runs."""
    try:
        db.executescript(_CREATE)
        db.execute("BEGIN")
        db.execute("INSERT OR REPLACE INTO meta VALUES ('write test', '')")
        db.rollback()
    except sqlite3.DatabaseError as e:
        db.close()
        raise SweepError(f"{path}: cannot write to the results store ({e}): the file or its "
                         "folder is read-only; make them writable or give another --store") \
            from None


OURS = {("table", "meta"), ("table", "points"), ("index", "points_seq")}
PLURAL = {"table": "tables", "index": "indexes", "view": "views", "trigger": "triggers"}


def _check_ours(db: sqlite3.Connection, path: Path) -> None:
    """Refuse a SQLite database that holds anything other than a store's tables and index
    (tables, views, triggers, indexes of its own), or tables of a store's names with other
    columns (someone else's database: npusim adds nothing to it); an empty database is a
    store to start."""
    objects = {(kind, name) for kind, name in db.execute(
        "SELECT type, name FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'")}
    if not objects:
        return
    tables = {name for kind, name in objects if kind == "table"}
    if not objects <= OURS or tables != {"meta", "points"}:
        found = "; ".join(f"its {PLURAL.get(kind, kind)}: "
                          f"{', '.join(sorted(n for k, n in objects if k == kind))}"
                          for kind in sorted({k for k, _ in objects}))
    else:
        columns = {name: tuple(row[1] for row in db.execute(f"PRAGMA table_info({name})"))
                   for name in ("meta", "points")}
        if columns == {"meta": ("key", "value"), "points": COLUMNS}:
            return
        found = "; ".join(f"{name} ({', '.join(cols)})" for name, cols in columns.items())
        found = f"other columns: {found}"
    raise SweepError(f"{path}: a SQLite database that is not an npusim results store "
                     f"({found}); npusim left it as it is: name a store a sweep wrote, or a "
                     "new --store file")


def _tables(db: sqlite3.Connection) -> set[str]:
    return {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _check_whole(db: sqlite3.Connection, path: Path) -> None:
    """Refuse a file that is not SQLite, is shorter than its header says (truncated), or fails
    SQLite's quick check."""
    with path.open("rb") as f:
        header = f.read(100)
    if not header.startswith(b"SQLite format 3\0"):
        raise sqlite3.DatabaseError("the file does not start with the SQLite header")
    page = int.from_bytes(header[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(header[28:32], "big")
    journal = Path(f"{path}-journal")
    hot = journal.exists() and journal.stat().st_size > 0  # SQLite rolls it back on open
    if len(header) == 100 and header[24:28] == header[92:96] and pages and not hot:
        if path.stat().st_size < pages * page:
            raise sqlite3.DatabaseError(f"the file is {path.stat().st_size} bytes, its header "
                                        f"says {pages * page}: truncated")
    check = db.execute("PRAGMA quick_check").fetchone()[0]
    if check != "ok":
        raise sqlite3.DatabaseError(check)


def inert_parameters(store: Store) -> list[str]:
    """The swept parameters whose value changed no stored total: wherever stored points differ
    in that parameter alone (the same other parameters, model and density), all their totals
    are equal. The machine does not read such a key with this base (a group tile whose
    ``narrow_kb`` sets its buffers ignores ``memory.ifmap_sram_kb``). A parameter no two
    stored points vary alone is not judged."""
    rows = [r for r in store.rows() if r["totals"] is not None]
    inert = []
    for name in sorted({k for r in rows for k in r["params"]}):
        alike: dict[tuple, list[dict]] = {}
        for r in rows:
            rest = {k: v for k, v in r["params"].items() if k != name}
            key = (json.dumps(rest, sort_keys=True), r["model"], json.dumps(r["density"]))
            alike.setdefault(key, []).append(r)
        varied = [g for g in alike.values()
                  if len({json.dumps(r["params"].get(name)) for r in g}) > 1]
        if varied and all(r["totals"] == g[0]["totals"] for g in varied for r in g):
            inert.append(name)
    return inert


def table(store: Store) -> tuple[list[str], list[list]]:
    """The store as one flat table: the point's dimensions, status, objectives, totals."""
    rows = store.rows()
    params = sorted({k for r in rows for k in r["params"]})
    objectives = json.loads(store.meta().get("objectives", "[]"))
    totals = sorted({k for r in rows for k in (r["totals"] or {})})
    header = [*params, "model", "density", "status", "reason", "version", "seconds",
              *(f"objective.{o}" for o in objectives), *(f"total.{t}" for t in totals)]
    body = [[*(r["params"].get(p) for p in params), r["model"], r["density"], r["status"],
             r["reason"], r["version"], r["seconds"],
             *((r["objectives"] or {}).get(o) for o in objectives),
             *((r["totals"] or {}).get(t) for t in totals)] for r in rows]
    return header, body


def to_csv(store: Store) -> str:
    """The store's table as CSV text (one row per point)."""
    header, body = table(store)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(body)
    return out.getvalue()


def parquet_bytes(store: Store) -> bytes:
    """The store's table as a Parquet file's bytes (needs pyarrow), carrying npusim's mark."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise SweepError("--parquet needs pyarrow, which is not installed (pip install "
                         "pyarrow); --csv writes the same table") from None
    header, body = table(store)
    columns = {h: [row[i] for row in body] for i, h in enumerate(header)}
    sink = pa.BufferOutputStream()
    signed = pa.table(columns).replace_schema_metadata({"generator": f"npusim {__version__}"})
    pq.write_table(signed, sink)
    return sink.getvalue().to_pybytes()
