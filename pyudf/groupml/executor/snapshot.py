"""Training snapshots: the source materialised once as packed blocks (Kingpin's ETL step).

One scan packs every group into one ``bytea`` of big-endian float8 (``float8send`` per
value and ``string_agg`` per group, both in C). The coordinator then, per group and in
numpy: drops rows with a NULL/NaN value (counted as skipped), marks validation rows with
:func:`groupml.learners.holdout_mask` (the same content hash the one-backend path uses,
so the split does not depend on the number of workers), shuffles once by the seeded
:func:`groupml.learners.row_hash`, and cuts the group into blocks of about
``block_rows`` rows. Every block holds its validation rows first (``n_val``), then its
training rows; a worker reads only the training bytes with ``substring`` (the column is
uncompressed TOAST), the coordinator only the validation bytes.

``groupml.snapshot_blocks`` is UNLOGGED: a snapshot is a cache that can be rebuilt from its
source, and writing its blocks without WAL saves about a fifth of building it (1M rows x 21
values: 1.0-1.2 s of inserts instead of 1.6-1.8 s). A crash restart empties the table while
``groupml.snapshots`` keeps saying 'ready': :func:`snapshot_intact` tells, a resumed run
rebuilds such a snapshot, and reusing one through ``options.snapshot`` is a clear ERROR.

**Parallel build.** With a worker pool (``workers => p``, p >= 2) the packing is shared by
the workers: a count query (one cheap scan) lists the groups in key order -- their
``group_no``, as in the serial build -- and the rows of each of ``BUCKETS`` hash buckets of
the group key (``hash_record``, consistent with the key's equality: 1.0 = 1.00, -0 = 0);
the buckets go to the workers largest first onto the least loaded (:func:`assign_buckets`);
each worker packs, splits and stores its groups (``snapshot_part`` tasks) and commits its
part. The snapshot row is committed first (status 'building'); it becomes 'ready' when
every part is in. A failed part deletes the snapshot; a cancelled or crashed build leaves
it 'building', and the resumed run deletes and rebuilds it. Group-by columns of other
types (arrays, ...) or a single group use the serial build (a domain counts as its base type).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any, Callable, Dict, List, Mapping, Optional

import numpy as np

from .. import catalog
from ..catalog import KEY_SETTINGS
from ..errors import GroupmlError, InvalidParameterError, PrerequisiteStateError, UndefinedObjectError
from ..fitting import unpack_rows
from ..learners import mask_of_hash, row_hash_and_order
from ..db import quote_ident
from ..sourcesql import (check_columns, check_distinct_group_keys, check_group_keys, columns, group_clause_sql,
                         group_key_sql, packed_scan_sql, reading_source, source_cursor)

DEFAULT_BLOCK_ROWS = 8192

#: hash buckets of the group key the parallel build spreads over its workers
BUCKETS = 64
#: group-by column types whose hash_record agrees with GROUP BY's equality
HASHABLE_TYPES = frozenset({"text", "character varying", "character", "name", "smallint", "integer", "bigint",
                            "numeric", "real", "double precision", "boolean", "date",
                            "timestamp without time zone", "timestamp with time zone", "uuid"})



def split_group(raw: bytes, n_rows: int, d: int, fraction: float, seed: int, block_rows: int,
                classification: bool = True) -> Dict[str, Any]:
    """Pure numpy: the blocks and counts of one group from its packed bytes."""
    arr = unpack_rows(raw, d + 1)
    skipped = int(n_rows) - arr.shape[0]
    ok = np.isfinite(arr).all(axis=1)
    if not ok.all():
        skipped += int((~ok).sum())
        arr = arr[ok]
    n = arr.shape[0]
    if n == 0:
        return {"n_train": 0, "n_val": 0, "n_pos": 0, "n_skipped": skipped, "blocks": [], "train_rows": []}
    X, y = arr[:, :d], arr[:, d]
    h, order = row_hash_and_order(X, y, seed)
    val = mask_of_hash(h, fraction)
    va, tr = arr[order[val[order]]], arr[order[~val[order]]]
    nb = max(1, math.ceil(n / block_rows))
    blocks, train_rows = [], []
    for vchunk, tchunk in zip(np.array_split(va, nb), np.array_split(tr, nb)):
        data = np.concatenate([vchunk, tchunk]).astype(">f8").tobytes()
        blocks.append((vchunk.shape[0] + tchunk.shape[0], vchunk.shape[0], data))
        train_rows.append(int(tchunk.shape[0]))
    n_pos = int(np.count_nonzero(tr[:, d] > 0.5)) if classification else 0
    return {"n_train": int(tr.shape[0]), "n_val": int(va.shape[0]), "n_pos": n_pos, "n_skipped": skipped,
            "blocks": blocks, "train_rows": train_rows}


def _store_group(session, sid: int, group_no: int, gkey: str, part: Dict[str, Any]) -> int:
    """Insert one split group and its blocks; its row count."""
    catalog.insert_snapshot_group(session, sid, group_no, gkey, part)
    for b, (n, nv, data) in enumerate(part["blocks"]):
        catalog.insert_snapshot_block(session, sid, group_no, b, n, nv, data)
    return part["n_train"] + part["n_val"]


def bucket_sql(group_by) -> str:
    """The hash bucket (0 .. BUCKETS - 1) of a row's (or a group's) group key."""
    cols = ", ".join(quote_ident(g) for g in group_by)
    return (f"((pg_catalog.hash_record(ROW({cols})) OPERATOR(pg_catalog.&) 2147483647) "
            f"OPERATOR(pg_catalog.%) {BUCKETS})")


def assign_buckets(bucket_rows: Mapping[int, int], parts: int) -> List[List[int]]:
    """Buckets -> at most ``parts`` non-empty lists: largest first onto the least loaded
    part (ties: lower bucket, lower part), so the parts' row counts are balanced."""
    loads = [0] * max(1, int(parts))
    out: List[List[int]] = [[] for _ in loads]
    for b, n in sorted(bucket_rows.items(), key=lambda kv: (-kv[1], kv[0])):
        k = min(range(len(loads)), key=lambda i: (loads[i], i))
        out[k].append(int(b))
        loads[k] += int(n)
    return [sorted(p) for p in out if p]


def can_build_in_parallel(group_by, cols: Mapping[str, str]) -> bool:
    return bool(group_by) and all(cols.get(g) in HASHABLE_TYPES for g in group_by)


def build_snapshot(session, source: str, group_by, features, label, cols, *, seed: int, fraction: float,
                   block_rows: int = DEFAULT_BLOCK_ROWS, keep: bool = False, progress=None, parallel=None,
                   on_created: Optional[Callable[[int], None]] = None) -> int:
    """Materialise ``source`` into a new snapshot; returns its id (the caller commits).

    ``parallel``: an object with ``parts`` (workers) that, called with ``(snapshot_id,
    requests)``, runs the ``snapshot_part`` requests on the workers and returns their results
    (see the module doc); then the snapshot row is committed first, after
    ``on_created(snapshot_id)`` (the caller records it with its run)."""
    sid = catalog.insert_snapshot(session, source=source, group_by=group_by, features=features, label=label,
                                  seed=seed, fraction=fraction, block_rows=block_rows, keep=keep)
    d = len(features)
    if parallel is not None:
        bucket_rows: Dict[int, int] = {}
        try:
            with reading_source(session, source, "train_groups"):
                groups = session.query(f"SELECT {group_key_sql(group_by)}::text AS gkey, pg_catalog.count(*) AS n, "
                                       f"{bucket_sql(group_by)} AS b FROM {source}{group_clause_sql(group_by, source)}")
            check_group_keys(session, [r["gkey"] for r in groups], len(group_by), "train_groups")
            check_distinct_group_keys(session, [r["gkey"] for r in groups], "train_groups")
        except GroupmlError:
            delete_snapshot(session, sid)           # not committed yet: the caller commits the failed run
            raise
        for r in groups:
            bucket_rows[int(r["b"])] = bucket_rows.get(int(r["b"]), 0) + int(r["n"])
        # the settings a group key's JSON text depends on (a timestamptz key in the caller's
        # TimeZone, an interval in its IntervalStyle, float digits): workers render keys as here
        shown_as = session.query("SELECT " + ", ".join(f"pg_catalog.current_setting('{n}') AS \"{n}\""
                                                       for n in KEY_SETTINGS))[0]
        base = {"op": "snapshot_part", "snapshot": sid, "source": source, "search_path": session.callers_path,
                "settings": {n: shown_as[n] for n in KEY_SETTINGS},
                "group_by": list(group_by),
                "features": list(features), "label": label, "seed": seed, "fraction": fraction,
                "block_rows": block_rows}
        if on_created is not None:
            on_created(sid)
        session.commit()                            # the workers' inserts reference the snapshot row
        # each part gets the numbers of its own groups only: every key to every worker made one
        # jsonb request of all keys (45,000 keys of 10 kB passed jsonb's 256 MB limit)
        requests = []
        for part in assign_buckets(bucket_rows, parallel.parts):
            mine = set(part)
            requests.append(dict(base, buckets=part, group_nos={r["gkey"]: i for i, r in enumerate(groups)
                                                                if int(r["b"]) in mine}))
        done = parallel(sid, requests)
        n_total, g = sum(r["rows"] for r in done), sum(r["groups"] for r in done)
    else:
        n_total, g, keys = 0, 0, []
        cur = None
        try:
            with session.callers_search_path():
                cur = source_cursor(lambda: session.cursor(packed_scan_sql(source, group_by, features, label, cols)),
                                    source, "train_groups")
                for r in _each_group(cur):
                    check_group_keys(session, [r["gkey"]], len(group_by), "train_groups")
                    keys.append(r["gkey"])
                    n_total += _store_group(session, sid, g, r["gkey"],
                                            split_group(r["block"], r["n_rows"], d, fraction, seed, block_rows))
                    g += 1
                    if progress is not None:
                        progress(g)
            check_distinct_group_keys(session, keys, "train_groups")
        except BaseException as exc:
            # a cursor left open on a failed fetch made the caller's commit fail ('pinned portal
            # is not ready to be auto-held'), so a refused run stayed 'running'; and the caller
            # commits a refused run as failed, which kept this unfinished snapshot as an orphan
            if cur is not None:
                cur.close()
            if getattr(exc, "sqlstate", None) != "57014":
                delete_snapshot(session, sid)
            raise
    catalog.mark_snapshot_ready(session, sid, n_total, g)
    return sid


def _each_group(cur):
    """The rows of a packed-scan cursor one at a time (each holds a whole group's block)."""
    while True:
        rows = cur.fetch(1)
        if not rows:
            return
        yield rows[0]


def _key_value(gkey: str) -> tuple:
    """A group key's JSON text as a hashable value that equal keys share (numbers as Decimal:
    1.0 == 1.00, -0 == 0, exactly)."""
    return tuple(sorted(json.loads(gkey, parse_float=Decimal).items()))


def build_part(session, req: Mapping[str, Any]) -> bytes:
    """Worker side of a parallel build: pack, split and store the groups of ``req['buckets']``."""
    owner = "_gap_task snapshot_part"
    gb, feats, label = list(req["group_by"]), list(req["features"]), str(req["label"])
    cols = columns(session, req["source"])           # the name must cast to regclass
    check_columns(cols, gb + feats + [label], "columns", req["source"], numeric=False, owner=owner)
    d = len(feats)
    # the coordinator's key text of each group, found by value: numeric 1.0 and 1.00 are one
    # group whose key text depends on which row the aggregate kept
    nos = {_key_value(k): (int(no), k) for k, no in req["group_nos"].items()}
    sql = packed_scan_sql(req["source"], gb, feats, label, cols,
                          where=f"{bucket_sql(gb)} OPERATOR(pg_catalog.=) ANY ($1::int[])")
    n_total, g = 0, 0
    path = req.get("search_path")      # the coordinator's caller's: the source reads as it would there
    settings = req.get("settings") or {}
    for name in KEY_SETTINGS:          # local to this task's transaction
        if isinstance(settings.get(name), str):
            session.query("SELECT pg_catalog.set_config($1, $2, true)", [name, settings[name]], ["text", "text"])
    with session.callers_search_path(path if isinstance(path, str) else None):
        for r in _each_group(source_cursor(lambda: session.cursor(sql, [list(req["buckets"])], ["int[]"]),
                                           req["source"], "train_groups")):
            found = nos.get(_key_value(r["gkey"]))
            if found is None:
                raise PrerequisiteStateError(
                    f"The source {req['source']} changed while its snapshot was built: group {r['gkey']} was not "
                    f"there when the groups were counted",
                    hint="Call train_groups again (or once writes to the source stop).")
            n_total += _store_group(session, int(req["snapshot"]), found[0], found[1],
                                    split_group(r["block"], r["n_rows"], d, float(req["fraction"]), int(req["seed"]),
                                                int(req["block_rows"])))
            g += 1
    return json.dumps({"groups": g, "rows": n_total}).encode("utf-8")


def check_snapshot(session, snapshot_id: int, source: str, group_by, features, label, seed: int,
                   fraction: float) -> None:
    # the row lock lasts until the run has recorded the snapshot and committed: drop_snapshot
    # deletes first, so it either waits for that (and then sees the run) or this finds nothing
    r = catalog.lock_snapshot_arguments(session, snapshot_id)
    if r is None:
        raise UndefinedObjectError(f"The 'snapshot' option of train_groups must name an existing snapshot; "
                                   f"got {snapshot_id}", hint="See SELECT * FROM groupml.snapshots.")
    if (r["source"], list(r["group_by"]), list(r["features"]), r["label"], int(r["seed"]),
            float(r["validation_fraction"]), r["status"]) != \
            (source, list(group_by), list(features), label, int(seed), float(fraction), "ready"):
        raise InvalidParameterError(
            f"Snapshot {snapshot_id} was built from other arguments (source, group_by, features, label, seed or "
            f"validation_fraction) or is not ready",
            hint="Omit the 'snapshot' option to build a fresh snapshot.")
    if not snapshot_intact(session, snapshot_id):
        raise PrerequisiteStateError(
            f"Snapshot {snapshot_id} has lost its blocks: snapshot blocks are unlogged, and a crash restart of the "
            f"server empties them",
            hint=f"Omit the 'snapshot' option to build a fresh snapshot; SELECT groupml.drop_snapshot({snapshot_id}) "
                 f"removes the empty one.")


def snapshot_intact(session, snapshot_id: int) -> bool:
    """False when a 'ready' snapshot with rows has no blocks (a crash restart emptied them)."""
    return catalog.snapshot_has_blocks(session, snapshot_id)


def load_validation(session, snapshot_id: int, group_no: int, d: int) -> np.ndarray:
    """A group's validation rows as an (n, d+1) float64 matrix (features, then the label)."""
    return unpack_rows(catalog.validation_bytes(session, snapshot_id, group_no, (d + 1) * 8), d + 1)


def pieces_for(train_rows: List[int], start: int, rows: int) -> List[List[int]]:
    """[[block_no, skip, take], ...] covering training rows [start, start + rows) of a group."""
    out, pos, stop = [], 0, start + rows
    for b, n in enumerate(train_rows):
        lo, hi = max(start, pos), min(stop, pos + n)
        if hi > lo:
            out.append([b, lo - pos, hi - lo])
        pos += n
        if pos >= stop:
            break
    return out


def delete_snapshot(session, snapshot_id: int) -> None:
    """Remove a snapshot whatever its ``keep`` (an unfinished or emptied one; its groups and
    blocks go with it)."""
    catalog.delete_snapshot(session, snapshot_id)


def drop_orphan_snapshots(session) -> List[int]:
    """Delete the snapshots no run refers to and nobody kept (``keep`` false): a run deleted
    while it trained leaves its snapshot so (its grouped_runs row goes with it, the snapshot
    would have been dropped at the run's end). A run records its snapshot in the transaction
    that commits the snapshot row, so a snapshot being built is never without its run."""
    return catalog.delete_orphan_snapshots(session)


def drop_snapshot(session, snapshot_id: Optional[int]) -> None:
    """Remove a run's snapshot unless it is kept."""
    if snapshot_id is not None:
        catalog.delete_unkept_snapshot(session, snapshot_id)
