"""Every read and write of groupml's run catalog, one statement per function.

The tables: ``runs`` (one row per train_groups run), ``grouped_runs`` (the executor's record
of a run), ``models`` and ``trials`` (a group's result), ``run_epochs``, ``run_schedule`` and
``run_checkpoints`` (a run's epoch reports, executed tasks and epoch checkpoints),
``snapshots``, ``snapshot_groups`` and ``snapshot_blocks`` (training snapshots) and
``cost_runs`` (measured passes of the cost model). Callers pass a
:class:`groupml.db.Session`; nothing here commits. Table names are fixed, schema-qualified
identifiers; every value is a bound parameter. Privileges on these tables are checked by
:mod:`groupml.udf._catalog` before an entry point starts.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence, Set

import numpy as np

#: Session settings that change how a group key is written as JSON text.
KEY_SETTINGS = ("TimeZone", "IntervalStyle", "extra_float_digits")


def _num(v) -> Optional[float]:
    return None if v is None or not np.isfinite(v) else float(v)


# ------------------------------------------------------------------------------ runs
def insert_run(session, *, source: str, group_by, features, label: str, model: str, search: Mapping[str, Any],
               options: Mapping[str, Any]) -> int:
    """A new train_groups run (with the session's :data:`KEY_SETTINGS`); its run_id."""
    key_settings = "pg_catalog.jsonb_build_object(" + ", ".join(
        f"'{n}', pg_catalog.current_setting('{n}')" for n in KEY_SETTINGS) + ")"
    return session.query(
        "INSERT INTO groupml.runs (kind, source, group_by, features, label, family, search, options, "
        f"key_settings) VALUES ('train_groups', $1, $2, $3, $4, $5, $6::jsonb, $7::jsonb, {key_settings}) "
        "RETURNING run_id",
        [source, group_by, features, label, model, json.dumps(search), json.dumps(options)],
        ["text", "text[]", "text[]", "text", "text", "text", "text"])[0]["run_id"]


def run_arguments(session, run_id: int) -> Optional[Dict[str, Any]]:
    """The arguments a run was started with (search and options as JSON text), or None."""
    rows = session.query(
        "SELECT source, group_by, features, label, family, status, search::text AS search, "
        "options::text AS options FROM groupml.runs WHERE run_id = $1", [run_id], ["bigint"])
    return rows[0] if rows else None


def changed_key_settings(session, run_id: int, names: Sequence[str]) -> List[Dict[str, Any]]:
    """The settings of ``names`` the run's group keys were written under that differ now:
    rows of (name, was, now)."""
    return session.query(
        "SELECT s.key AS name, s.value AS was, pg_catalog.current_setting(s.key) AS now FROM groupml.runs r, "
        "pg_catalog.jsonb_each_text(r.key_settings) s WHERE r.run_id = $1 AND s.key = ANY ($2::text[]) AND "
        "s.value IS DISTINCT FROM pg_catalog.current_setting(s.key) ORDER BY s.key", [run_id, list(names)],
        ["bigint", "text[]"])


def lock_run_row(session, run_id: int) -> bool:
    """Lock the run's row against a delete until the transaction ends; False when it is gone."""
    return bool(session.query("SELECT run_id FROM groupml.runs WHERE run_id = $1 FOR KEY SHARE",
                              [run_id], ["bigint"]))


def run_elapsed_seconds(session, run_id: int) -> float:
    """Seconds since the run's first attempt started."""
    return float(session.query("SELECT extract(epoch FROM clock_timestamp() - started_at)::float8 AS s "
                               "FROM groupml.runs WHERE run_id = $1", [run_id], ["bigint"])[0]["s"])


def mark_run_running(session, run_id: int) -> None:
    session.query("UPDATE groupml.runs SET status = 'running', finished_at = NULL WHERE run_id = $1",
                  [run_id], ["bigint"])


def mark_run_failed(session, run_id: int) -> None:
    """A running run that stopped for good: status 'failed' and its end time (without one,
    groupml.progress counted its elapsed time on for ever). The caller commits."""
    session.query("UPDATE groupml.runs SET status = 'failed', finished_at = clock_timestamp() "
                  "WHERE run_id = $1 AND status = 'running'", [run_id], ["bigint"])


def mark_run_cancelled(session, run_id: int) -> None:
    """A running run whose call was cancelled: status 'cancelled' and its end time. The caller commits."""
    session.query("UPDATE groupml.runs SET status = 'cancelled', finished_at = pg_catalog.clock_timestamp() "
                  "WHERE run_id = $1 AND status = 'running'", [run_id], ["bigint"])


#: Advisory lock class of a run being trained (first key of the two-key form): 'gmlr' in ASCII.
#: A call takes its run's lock before it commits 'running' and releases it after its last commit.
RUN_LOCK_CLASS = 0x676D6C72

# advisory locks are per database: another database's run with the same id is not ours
_HELD = ("FROM pg_catalog.pg_locks l WHERE l.locktype = 'advisory' AND l.granted AND l.classid::int8 = {cls} "
         "AND l.objid::int8 = {key} AND l.objsubid = 2 AND l.database = (SELECT d.oid FROM pg_catalog.pg_database d "
         "WHERE d.datname = pg_catalog.current_database())")


def run_lock_holders(session, lock_class: int, key: int, *, mine: bool = False) -> List[int]:
    """Pids of the sessions holding the run lock (``lock_class``, ``key``); ``mine``: only this one."""
    sql = "SELECT l.pid " + _HELD.format(cls="$1", key="$2") + (" AND pid = pg_catalog.pg_backend_pid()" if mine else "")
    return [r["pid"] for r in session.query(sql, [lock_class, key], ["bigint", "bigint"])]


def close_abandoned_runs(session) -> List[int]:
    """Mark 'cancelled' the runs left 'running' by a call that is gone (a cancel whose own update
    was lost, a terminated backend, a crash): no session holds their run lock. Their ids."""
    return [r["run_id"] for r in session.query(
        "UPDATE groupml.runs r SET status = 'cancelled', finished_at = pg_catalog.clock_timestamp() "
        "WHERE r.status = 'running' AND NOT EXISTS (SELECT 1 "
        + _HELD.format(cls=RUN_LOCK_CLASS, key="(r.run_id OPERATOR(pg_catalog.&) 4294967295)")
        + ") RETURNING r.run_id")]


def charge_run_time(session, run_id: int, wall: float, train: float, *, done: bool = False) -> None:
    """Add wall and training seconds to the run; ``done`` also marks it done."""
    session.query("UPDATE groupml.runs SET seconds = coalesce(seconds, 0) + $2, "
                  "train_seconds = coalesce(train_seconds, 0) + $3"
                  + (", status = 'done', finished_at = clock_timestamp()" if done else "")
                  + " WHERE run_id = $1", [run_id, wall, train], ["bigint", "float8", "float8"])


def set_run_groups(session, run_id: int, n_groups: int) -> None:
    session.query("UPDATE groupml.runs SET n_groups = $2 WHERE run_id = $1", [run_id, n_groups],
                  ["bigint", "integer"])


def set_run_estimate(session, run_id: int, n_groups: int, estimated_seconds: float) -> None:
    session.query("UPDATE groupml.runs SET n_groups = $2, estimated_seconds = $3 WHERE run_id = $1",
                  [run_id, n_groups, estimated_seconds], ["bigint", "integer", "float8"])


def set_groups_done(session, run_id: int, n_done: int) -> None:
    session.query("UPDATE groupml.runs SET groups_done = $2 WHERE run_id = $1", [run_id, n_done],
                  ["bigint", "integer"])


def add_group_done(session, run_id: int) -> None:
    session.query("UPDATE groupml.runs SET groups_done = groups_done + 1 WHERE run_id = $1", [run_id], ["bigint"])


def add_backend_group_done(session, run_id: int, *, estimated_seconds: float, train_seconds: float,
                           wall_seconds: float) -> None:
    """A group trained in the calling backend: one more group done and its times."""
    session.query("UPDATE groupml.runs SET groups_done = groups_done + 1, "
                  "estimated_seconds = coalesce(estimated_seconds, 0) + $2, "
                  "train_seconds = coalesce(train_seconds, 0) + $3, seconds = coalesce(seconds, 0) + $4 "
                  "WHERE run_id = $1",
                  [run_id, estimated_seconds, train_seconds, wall_seconds], ["bigint", "float8", "float8", "float8"])


# ------------------------------------------------------------------------------ grouped_runs
def upsert_grouped_run(session, run_id: int, strategy: str, workers: int) -> None:
    session.query("INSERT INTO groupml.grouped_runs (run_id, strategy, workers) VALUES ($1, $2, $3) "
                  "ON CONFLICT (run_id) DO UPDATE SET workers = EXCLUDED.workers",
                  [run_id, strategy, workers], ["bigint", "text", "integer"])


def recorded_executor(session, run_id: int) -> Optional[Dict[str, Any]]:
    """(workers, strategy, status) of a run worker backends trained, or None."""
    rows = session.query("SELECT g.workers, g.strategy, r.status FROM groupml.grouped_runs g JOIN groupml.runs r "
                         "USING (run_id) WHERE run_id = $1", [run_id], ["bigint"])
    return rows[0] if rows else None


def recorded_plan(session, run_id: int) -> Optional[Dict[str, Any]]:
    """(strategy, plan as JSON text) the executor recorded for the run, or None."""
    rows = session.query("SELECT strategy, plan::text AS plan FROM groupml.grouped_runs WHERE run_id = $1",
                         [run_id], ["bigint"])
    return rows[0] if rows else None


def replay_source(session, run_id: int) -> Optional[Dict[str, Any]]:
    """What a replay of the run reads: its family, features, status, strategy and snapshot
    (with the snapshot's status), or None when there is no such run of the executor."""
    rows = session.query(
        "SELECT r.family, r.features, r.status, g.strategy, g.snapshot_id, s.status AS snapshot_status "
        "FROM groupml.runs r JOIN groupml.grouped_runs g USING (run_id) "
        "LEFT JOIN groupml.snapshots s ON s.snapshot_id = g.snapshot_id WHERE r.run_id = $1", [run_id], ["bigint"])
    return rows[0] if rows else None


def trial_group_keys(session, run_id: int, trial_id: int) -> List[str]:
    """The group keys (JSON text) of the run that have a trial ``trial_id``, in order."""
    return [r["gkey"] for r in session.query(
        "SELECT group_key::text AS gkey FROM groupml.trials WHERE run_id = $1 AND trial_id = $2 ORDER BY 1",
        [run_id, trial_id], ["bigint", "integer"])]


def trial_fork(session, run_id: int, gkey: str, trial_id: int) -> Optional[Dict[str, Any]]:
    """``{"parent_trial_id", "forked_at_epoch"}`` of a trial (both None for a trial that was
    not forked from another); None when the run has no such trial in the group."""
    rows = session.query("SELECT parent_trial_id, forked_at_epoch FROM groupml.trials WHERE run_id = $1 AND "
                         "group_key = $2::jsonb AND trial_id = $3", [run_id, gkey, trial_id],
                         ["bigint", "text", "integer"])
    return dict(rows[0]) if rows else None


def trial_params(session, run_id: int, gkey: str, trial_id: int) -> Optional[Dict[str, Any]]:
    """A stored trial's params, or None."""
    rows = session.query("SELECT params::text AS params FROM groupml.trials WHERE run_id = $1 AND "
                         "group_key = $2::jsonb AND trial_id = $3", [run_id, gkey, trial_id],
                         ["bigint", "text", "integer"])
    return json.loads(rows[0]["params"]) if rows else None


def record_plan(session, run_id: int, strategy: str, plan: Mapping[str, Any]) -> None:
    session.query("UPDATE groupml.grouped_runs SET strategy = $2, plan = $3::jsonb, last_event = $4, "
                  "updated_at = clock_timestamp() WHERE run_id = $1",
                  [run_id, strategy, json.dumps(plan), "planned"], ["bigint", "text", "text", "text"])


def add_plan_facts(session, run_id: int, facts: Mapping[str, Any]) -> None:
    """Merge ``facts`` into the run's recorded plan (jsonb ||)."""
    session.query("UPDATE groupml.grouped_runs SET plan = COALESCE(plan, '{}'::jsonb) || $2::jsonb WHERE run_id = $1",
                  [run_id, json.dumps(facts)], ["bigint", "text"])


def set_run_snapshot(session, run_id: int, snapshot_id: Optional[int]) -> None:
    session.query("UPDATE groupml.grouped_runs SET snapshot_id = $2, updated_at = clock_timestamp() WHERE run_id = $1",
                  [run_id, snapshot_id], ["bigint", "bigint"])


def clear_run_snapshot(session, run_id: int) -> None:
    session.query("UPDATE groupml.grouped_runs SET snapshot_id = NULL WHERE run_id = $1", [run_id], ["bigint"])


def clear_run_snapshot_if_gone(session, run_id: int, snapshot_id: int) -> None:
    """Forget the run's snapshot when that snapshot no longer exists."""
    session.query("UPDATE groupml.grouped_runs SET snapshot_id = NULL WHERE run_id = $1 AND NOT "
                  "EXISTS (SELECT 1 FROM groupml.snapshots s WHERE s.snapshot_id = $2)",
                  [run_id, snapshot_id], ["bigint", "bigint"])


def run_snapshot_ids(session, run_id: int) -> List[int]:
    rows = session.query("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = $1 "
                         "AND snapshot_id IS NOT NULL", [run_id], ["bigint"])
    return [int(r["snapshot_id"]) for r in rows]


def building_snapshots_of_run(session, run_id: int) -> List[int]:
    """The run's snapshot when it is still 'building' (a cancelled or crashed parallel build)."""
    return [int(r["snapshot_id"]) for r in session.query(
        "SELECT s.snapshot_id FROM groupml.grouped_runs g JOIN groupml.snapshots s ON "
        "s.snapshot_id = g.snapshot_id WHERE g.run_id = $1 AND s.status = 'building'", [run_id], ["bigint"])]


def ready_snapshot_of_run(session, run_id: int) -> Optional[int]:
    """The run's snapshot when it is 'ready', else None."""
    row = session.query("SELECT snapshot_id FROM groupml.grouped_runs g WHERE run_id = $1 AND EXISTS "
                        "(SELECT 1 FROM groupml.snapshots s WHERE s.snapshot_id = g.snapshot_id "
                        "AND s.status = 'ready')", [run_id], ["bigint"])
    return row[0]["snapshot_id"] if row else None


def runs_using_snapshot(session, snapshot_id: int) -> List[int]:
    return [int(r["run_id"]) for r in session.query(
        "SELECT run_id FROM groupml.grouped_runs WHERE snapshot_id = $1 ORDER BY run_id", [snapshot_id], ["bigint"])]


def mark_grouped_done(session, run_id: int) -> None:
    session.query("UPDATE groupml.grouped_runs SET last_event = 'done', updated_at = clock_timestamp() "
                  "WHERE run_id = $1", [run_id], ["bigint"])


def add_epochs_done(session, run_id: int, n: int, last_event: str) -> None:
    session.query("UPDATE groupml.grouped_runs SET epochs_done = epochs_done + $2, last_event = $3, "
                  "updated_at = clock_timestamp() WHERE run_id = $1", [run_id, n, last_event],
                  ["bigint", "bigint", "text"])


def set_last_event(session, run_id: int, last_event: str) -> None:
    session.query("UPDATE groupml.grouped_runs SET last_event = $2, updated_at = clock_timestamp() WHERE run_id = $1",
                  [run_id, last_event], ["bigint", "text"])


def add_passes_done(session, run_id: int, passes: int, last_event: str) -> None:
    session.query("UPDATE groupml.grouped_runs SET passes_done = passes_done + $2, last_event = $3, "
                  "updated_at = clock_timestamp() WHERE run_id = $1",
                  [run_id, passes, last_event], ["bigint", "bigint", "text"])


# ------------------------------------------------------------------------------ models and trials
def stored_group_keys(session, run_id: int) -> Set[str]:
    """The keys (jsonb as text) of the groups whose model the run has stored."""
    return {r["k"] for r in session.query("SELECT group_key::text AS k FROM groupml.models WHERE run_id = $1",
                                          [run_id], ["bigint"])}


def count_models(session, run_id: int) -> int:
    return int(session.query("SELECT count(*) AS n FROM groupml.models WHERE run_id = $1", [run_id],
                             ["bigint"])[0]["n"])


def insert_model(session, run_id: int, gkey: str, result) -> None:
    """A group's :class:`groupml.fitting.FitResult` as its groupml.models row."""
    row = result.as_sql()
    session.query(
        "INSERT INTO groupml.models (run_id, group_key, fit) VALUES ($1, $2::jsonb, "
        "ROW($3, $4, $5::jsonb, $6, $7, $8::jsonb, $9, $10, $11, $12, $13::jsonb, $14, $15)::groupml.fit)",
        [run_id, gkey, row["status"], row["family"], row["params"], row["metric"], row["score"], row["metrics"],
         row["n_train"], row["n_validation"], row["n_skipped"], row["n_features"], row["trials"], row["message"],
         row["model"]],
        ["bigint", "text", "text", "text", "text", "text", "float8", "text", "bigint", "bigint", "bigint",
         "integer", "text", "text", "bytea"])


def insert_trial(session, run_id: int, gkey: str, t: Mapping[str, Any]) -> None:
    """One trial of a group's search (an entry of ``FitResult.trials``)."""
    session.query(
        "INSERT INTO groupml.trials (run_id, group_key, trial_id, params, status, stop_reason, score, "
        "epoch_scores, metrics, parent_trial_id, forked_at_epoch) "
        "VALUES ($1, $2::jsonb, $3, $4::jsonb, $5, $6, $7, $8, $9::jsonb, $10, $11)",
        [run_id, gkey, t["trial_id"], json.dumps(t["params"]), t["status"], t["stop_reason"],
         _num(t["score"]), [_num(v) for v in t["epoch_losses"]],
         json.dumps({k: t.get(k) for k in ("passes", "seconds", "iterations", "is_best")}),
         t.get("parent_trial_id"), t.get("forked_at_epoch")],
        ["bigint", "text", "integer", "text", "text", "text", "float8", "float8[]", "text", "integer", "integer"])


def delete_group_trials(session, run_id: int, gkey: str) -> None:
    session.query("DELETE FROM groupml.trials WHERE run_id = $1 AND group_key = $2::jsonb", [run_id, gkey],
                  ["bigint", "text"])


# ------------------------------------------------------------------------------ run_epochs
def insert_epoch_reports(session, run_id: int, gkey: str, block: int, reports: Sequence[tuple]) -> None:
    """A group's epoch block: one row per (trial_id, epoch, score, decision) report."""
    session.query(
        "INSERT INTO groupml.run_epochs (run_id, group_key, block, trial_id, epoch, score, decision) "
        "SELECT $1, $2::jsonb, $3, t, e, s, dd FROM unnest($4::int[], $5::int[], $6::float8[], "
        "$7::text[]) AS u(t, e, s, dd) ON CONFLICT DO NOTHING",
        [run_id, gkey, block, [r[0] for r in reports], [r[1] for r in reports],
         [None if r[2] is None or not np.isfinite(r[2]) else float(r[2]) for r in reports],
         [str(r[3]) for r in reports]],
        ["bigint", "text", "integer", "int[]", "int[]", "float8[]", "text[]"])


def delete_group_epochs(session, run_id: int, gkey: str, after_block: Optional[int] = None) -> None:
    """A group's epoch reports (only those of blocks after ``after_block`` when given)."""
    if after_block is None:
        session.query("DELETE FROM groupml.run_epochs WHERE run_id = $1 AND group_key = $2::jsonb", [run_id, gkey],
                      ["bigint", "text"])
    else:
        session.query("DELETE FROM groupml.run_epochs WHERE run_id = $1 AND group_key = $2::jsonb AND block > $3",
                      [run_id, gkey, int(after_block)], ["bigint", "text", "integer"])


# ------------------------------------------------------------------------------ run_schedule
_SCHEDULE_COLS = ["pass", "worker", "shard", "row_start", "n_rows", "started", "finished", "worker_pid"]


def insert_schedule(session, run_id: int, gkey: str, log: Sequence[Mapping[str, Any]]) -> None:
    """A group's executed tasks (schedule log entries), in start order."""
    if not log:
        return
    cols = _SCHEDULE_COLS
    log = sorted(log, key=lambda e: e["started"])
    session.query(
        "INSERT INTO groupml.run_schedule (run_id, group_key, pass, worker, shard, row_start, n_rows, trials, started, "
        "finished, worker_pid, kind) SELECT $1, $2::jsonb, p, w, s, rs, nr, "
        "pg_catalog.string_to_array(tr, ',')::int[], st, fi, pid, k FROM unnest($3::int[], $4::int[], "
        "$5::int[], $6::bigint[], $7::bigint[], $8::text[], $9::float8[], $10::float8[], $11::int[], $12::text[]) "
        "AS u(p, w, s, rs, nr, tr, st, fi, pid, k)",
        [run_id, gkey] + [[e[c] for e in log] for c in cols[:5]]
        + [[",".join(str(t) for t in e["trials"]) for e in log], [e["started"] for e in log],
           [e["finished"] for e in log], [e["worker_pid"] for e in log], [e.get("kind", "pass") for e in log]],
        ["bigint", "text", "int[]", "int[]", "int[]", "bigint[]", "bigint[]", "text[]", "float8[]", "float8[]",
         "int[]", "text[]"])


def group_schedule(session, run_id: int, gkey: str) -> List[Dict[str, Any]]:
    """A group's committed schedule entries, as log entries."""
    return [dict(e, group_key=gkey, trials=list(e["trials"])) for e in session.query(
        "SELECT pass, worker, shard, row_start, n_rows, trials, started, finished, worker_pid, kind "
        "FROM groupml.run_schedule WHERE run_id = $1 AND group_key = $2::jsonb", [run_id, gkey],
        ["bigint", "text"])]


def delete_group_schedule(session, run_id: int, gkey: str) -> None:
    session.query("DELETE FROM groupml.run_schedule WHERE run_id = $1 AND group_key = $2::jsonb", [run_id, gkey],
                  ["bigint", "text"])


# ------------------------------------------------------------------------------ run_checkpoints
def upsert_checkpoint(session, run_id: int, gkey: str, block: int, passes: int, fingerprint: str,
                      state: bytes) -> None:
    """A group's latest epoch checkpoint (replacing the one before)."""
    session.query(
        "INSERT INTO groupml.run_checkpoints (run_id, group_key, block, passes, fingerprint, state) "
        "VALUES ($1, $2::jsonb, $3, $4, $5, $6) ON CONFLICT (run_id, group_key) DO UPDATE SET "
        "block = EXCLUDED.block, passes = EXCLUDED.passes, fingerprint = EXCLUDED.fingerprint, "
        "state = EXCLUDED.state, at = clock_timestamp()",
        [run_id, gkey, block, passes, fingerprint, state],
        ["bigint", "text", "integer", "bigint", "text", "bytea"])


def run_checkpoints(session, run_id: int) -> Dict[str, Dict[str, Any]]:
    """The run's checkpoints by group key: block, fingerprint, state."""
    return {r["k"]: r for r in session.query(
        "SELECT group_key::text AS k, block, fingerprint, state FROM groupml.run_checkpoints WHERE run_id = $1",
        [run_id], ["bigint"])}


def delete_group_checkpoint(session, run_id: int, gkey: str) -> None:
    session.query("DELETE FROM groupml.run_checkpoints WHERE run_id = $1 AND group_key = $2::jsonb",
                  [run_id, gkey], ["bigint", "text"])


def delete_run_checkpoints(session, run_id: int) -> None:
    session.query("DELETE FROM groupml.run_checkpoints WHERE run_id = $1", [run_id], ["bigint"])


def delete_checkpoints_except(session, run_id: int, keep: Sequence[str]) -> None:
    """The run's checkpoints of every group not in ``keep`` (group keys as text)."""
    session.query("DELETE FROM groupml.run_checkpoints WHERE run_id = $1 AND NOT (group_key::text = ANY ($2))",
                  [run_id, list(keep)], ["bigint", "text[]"])


# ------------------------------------------------------------------------------ run_requests
def request_target(session, run_id: int) -> Optional[Dict[str, Any]]:
    """What a steering request checks of its run (status, family, the executor's strategy or
    NULL), or None when the calling role sees no such run. Serialises requests of the run
    until the transaction ends (the next added trial id is read under it)."""
    session.query("SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtextextended('groupml.run_requests ' "
                  "OPERATOR(pg_catalog.||) $1::text, 0))", [run_id], ["bigint"])
    rows = session.query("SELECT r.status, r.family, g.strategy FROM groupml.runs r LEFT JOIN groupml.grouped_runs g "
                         "USING (run_id) WHERE r.run_id = $1", [run_id], ["bigint"])
    return rows[0] if rows else None


def insert_run_request(session, run_id: int, kind: str, *, trial_id: Optional[int] = None,
                       params: Optional[Mapping[str, Any]] = None, n_workers: Optional[int] = None) -> int:
    return session.query(
        "INSERT INTO groupml.run_requests (run_id, kind, trial_id, params, n_workers) VALUES ($1, $2, $3, $4::jsonb, "
        "$5) RETURNING request_id", [run_id, kind, trial_id, None if params is None else json.dumps(params), n_workers],
        ["bigint", "text", "integer", "text", "integer"])[0]["request_id"]


def run_requests(session, run_id: int, kinds: Sequence[str]) -> List[Dict[str, Any]]:
    """The run's requests of ``kinds`` in the order they were filed (params as JSON text)."""
    return session.query(
        "SELECT request_id, kind, trial_id, params::text AS params, n_workers, status FROM groupml.run_requests "
        "WHERE run_id = $1 AND kind = ANY ($2::text[]) ORDER BY request_id", [run_id, list(kinds)],
        ["bigint", "text[]"])


def next_added_trial_id(session, run_id: int, first: int) -> int:
    """The id of the run's next added trial: ``first``, then one past the last one."""
    return int(session.query(
        "SELECT coalesce(max(trial_id) + 1, $2) AS t FROM groupml.run_requests WHERE run_id = $1 AND kind = 'add_trial'",
        [run_id, first], ["bigint", "integer"])[0]["t"])


def trial_progress(session, run_id: int, trial_id: int) -> Dict[str, Any]:
    """Where a trial of a run is: groups with committed epochs of it, groups where its last
    committed decision lets it go on, and the request that added it or asked it to stop."""
    return session.query(
        "WITH last AS (SELECT DISTINCT ON (group_key) group_key, decision FROM groupml.run_epochs "
        "WHERE run_id = $1 AND trial_id = $2 ORDER BY group_key, block DESC) "
        "SELECT (SELECT count(*) FROM last)::int AS groups, "
        "(SELECT count(*) FROM last WHERE decision = 'CONTINUE')::int AS going, "
        "(SELECT min(request_id) FROM groupml.run_requests WHERE run_id = $1 AND trial_id = $2 "
        " AND kind = 'add_trial') AS added, "
        "(SELECT min(request_id) FROM groupml.run_requests WHERE run_id = $1 AND trial_id = $2 "
        " AND kind = 'stop_trial') AS stop", [run_id, trial_id], ["bigint", "integer"])[0]


def requested_workers(session, run_id: int) -> int:
    """The run's workers: those it started with and those its requests add (applied or pending)."""
    return int(session.query(
        "SELECT (SELECT workers FROM groupml.grouped_runs WHERE run_id = $1) + coalesce((SELECT sum(n_workers) FROM "
        "groupml.run_requests WHERE run_id = $1 AND kind = 'add_workers' AND status IN ('applied', 'pending')), 0) "
        "AS n", [run_id], ["bigint"])[0]["n"])


def enabled_endpoints(session) -> int:
    """Enabled rows of groupml.worker_endpoints (0: loopback workers)."""
    return int(session.query("SELECT count(*)::int AS n FROM groupml.worker_endpoints WHERE enabled")[0]["n"])


def added_workers(session, run_id: int) -> int:
    """Worker backends the run's applied requests added (a resumed run starts with them)."""
    return int(session.query(
        "SELECT coalesce(sum(n_workers), 0)::int AS n FROM groupml.run_requests WHERE run_id = $1 "
        "AND kind = 'add_workers' AND status = 'applied'", [run_id], ["bigint"])[0]["n"])


def settle_requests(session, run_id: int, request_ids: Sequence[int], status: str, note: str) -> None:
    """Mark the run's pending requests ``request_ids`` applied (or refused) now, in the caller's
    transaction (the one that commits the progress that applied them)."""
    session.query("UPDATE groupml.run_requests SET status = $3, note = $4, applied_at = clock_timestamp() "
                  "WHERE run_id = $1 AND request_id = ANY ($2::bigint[]) AND status = 'pending'",
                  [run_id, list(request_ids), status, note], ["bigint", "bigint[]", "text", "text"])


def expire_requests(session, run_id: int) -> None:
    """Requests still pending when the run finishes: no epoch boundary was left to apply them."""
    session.query("UPDATE groupml.run_requests SET status = 'expired', applied_at = clock_timestamp(), "
                  "note = 'the run finished before an epoch boundary could apply it' "
                  "WHERE run_id = $1 AND status = 'pending'", [run_id], ["bigint"])


# ------------------------------------------------------------------------------ snapshots
def insert_snapshot(session, *, source: str, group_by, features, label: str, seed: int, fraction: float,
                    block_rows: int, keep: bool) -> int:
    """A new snapshot row (status 'building'); its snapshot_id."""
    return session.query(
        "INSERT INTO groupml.snapshots (source, group_by, features, label, seed, validation_fraction, block_rows, "
        "keep) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING snapshot_id",
        [source, list(group_by), list(features), label, seed, fraction, block_rows, keep],
        ["text", "text[]", "text[]", "text", "bigint", "float8", "integer", "boolean"])[0]["snapshot_id"]


def mark_snapshot_ready(session, snapshot_id: int, n_rows: int, n_groups: int) -> None:
    session.query("UPDATE groupml.snapshots SET status = 'ready', n_rows = $2, n_groups = $3 WHERE snapshot_id = $1",
                  [snapshot_id, n_rows, n_groups], ["bigint", "bigint", "integer"])


def lock_snapshot_arguments(session, snapshot_id: int) -> Optional[Dict[str, Any]]:
    """The arguments a snapshot was built from and its status, its row locked against a delete
    until the transaction ends; None when it does not exist."""
    rows = session.query("SELECT source, group_by, features, label, seed, validation_fraction, status "
                         "FROM groupml.snapshots WHERE snapshot_id = $1 FOR KEY SHARE", [snapshot_id], ["bigint"])
    return rows[0] if rows else None


def snapshot_has_blocks(session, snapshot_id: int) -> bool:
    """False when the snapshot is gone, or has rows but no blocks (a crash restart emptied them)."""
    rows = session.query("SELECT coalesce(s.n_rows, 0) = 0 OR EXISTS (SELECT 1 FROM groupml.snapshot_blocks b "
                         "WHERE b.snapshot_id = s.snapshot_id) AS ok FROM groupml.snapshots s "
                         "WHERE s.snapshot_id = $1", [snapshot_id], ["bigint"])
    return bool(rows) and bool(rows[0]["ok"])


def delete_snapshot(session, snapshot_id: int) -> bool:
    """Delete a snapshot whatever its ``keep`` (its groups and blocks go with it); True if it existed."""
    return bool(session.query("DELETE FROM groupml.snapshots WHERE snapshot_id = $1 RETURNING snapshot_id",
                              [snapshot_id], ["bigint"]))


def delete_unkept_snapshot(session, snapshot_id: int) -> None:
    session.query("DELETE FROM groupml.snapshots WHERE snapshot_id = $1 AND NOT keep", [snapshot_id], ["bigint"])


def delete_orphan_snapshots(session) -> List[int]:
    """Delete the snapshots no run refers to and nobody kept; their ids."""
    return [int(r["snapshot_id"]) for r in session.query(
        "DELETE FROM groupml.snapshots s WHERE NOT s.keep AND NOT EXISTS (SELECT 1 FROM groupml.grouped_runs g "
        "WHERE g.snapshot_id = s.snapshot_id) RETURNING s.snapshot_id")]


def insert_snapshot_group(session, snapshot_id: int, group_no: int, gkey: str, part: Mapping[str, Any]) -> None:
    """One split group's counts (``part``: :func:`groupml.executor.snapshot.split_group`)."""
    session.query("INSERT INTO groupml.snapshot_groups (snapshot_id, group_no, group_key, n_train, n_val, n_pos, "
                  "n_skipped, n_blocks, train_rows) VALUES ($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9)",
                  [snapshot_id, group_no, gkey, part["n_train"], part["n_val"], part["n_pos"], part["n_skipped"],
                   len(part["blocks"]), part["train_rows"]],
                  ["bigint", "integer", "text", "bigint", "bigint", "bigint", "bigint", "integer", "int[]"])


def insert_snapshot_block(session, snapshot_id: int, group_no: int, block_no: int, n_rows: int, n_val: int,
                          data: bytes) -> None:
    session.query("INSERT INTO groupml.snapshot_blocks (snapshot_id, group_no, block_no, n_rows, n_val, data) "
                  "VALUES ($1, $2, $3, $4, $5, $6)", [snapshot_id, group_no, block_no, n_rows, n_val, data],
                  ["bigint", "integer", "integer", "integer", "integer", "bytea"])


def snapshot_groups(session, snapshot_id: int) -> List[Dict[str, Any]]:
    """The snapshot's groups in group_no order (``train_rows``: training rows per block)."""
    rows = session.query("SELECT group_no, group_key::text AS gkey, n_train, n_val, n_pos, n_skipped, n_blocks, "
                         "train_rows FROM groupml.snapshot_groups WHERE snapshot_id = $1 ORDER BY group_no",
                         [snapshot_id], ["bigint"])
    for r in rows:
        r["train_rows"] = [int(x) for x in (r["train_rows"] or [])]
    return rows


def validation_bytes(session, snapshot_id: int, group_no: int, row_bytes: int) -> bytes:
    """A group's validation rows: each block's packed prefix, in block order."""
    rows = session.query("SELECT pg_catalog.substr(data, 1, n_val * $3) AS data FROM groupml.snapshot_blocks "
                         "WHERE snapshot_id = $1 AND group_no = $2 ORDER BY block_no",
                         [snapshot_id, group_no, row_bytes], ["bigint", "integer", "integer"])
    return b"".join(bytes(r["data"]) for r in rows)


def training_pieces(session, snapshot_id: int, group_no: int, pieces: Sequence[Sequence[int]],
                    row_bytes: int) -> List[bytes]:
    """The packed training rows of ``pieces`` = [[block_no, skip, take], ...] (after each
    block's validation prefix), one bytes per piece found, in the order given."""
    rows = session.query(
        "SELECT pg_catalog.substr(b.data, (b.n_val + r.skip) * $4 + 1, r.take * $4) AS data "
        "FROM unnest($3::int[], $5::int[], $6::int[]) WITH ORDINALITY AS r(block_no, skip, take, ord) "
        "JOIN groupml.snapshot_blocks b ON b.snapshot_id = $1 AND b.group_no = $2 AND b.block_no = r.block_no "
        "ORDER BY r.ord",
        [snapshot_id, group_no, [int(p[0]) for p in pieces], row_bytes, [int(p[1]) for p in pieces],
         [int(p[2]) for p in pieces]],
        ["bigint", "integer", "int[]", "integer", "int[]", "int[]"])
    return [bytes(r["data"]) for r in rows]


# ------------------------------------------------------------------------------ cost_runs
def insert_cost_run(session, *, n: int, d: int, k: int, workers: int, passes: int, seconds: float,
                    family: Optional[str], source: str) -> None:
    session.query(
        "INSERT INTO groupml.cost_runs (n, d, k, workers, passes, seconds, family, source) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        [n, d, k, workers, passes, seconds, family, str(source)],
        ["bigint", "integer", "integer", "integer", "integer", "float8", "text", "text"])


def recent_cost_runs(session, limit: int, *, family: Optional[str] = None,
                     before_run: Optional[int] = None) -> List[Dict[str, Any]]:
    """The newest ``limit`` cost runs (n, d, k, workers, passes, seconds), of ``family`` when
    given; with ``before_run`` only those recorded before that run started."""
    sql = ("SELECT n, d, k, workers, passes, seconds FROM groupml.cost_runs WHERE {} "
           "ORDER BY run_id DESC LIMIT " + str(int(limit)))
    # compared in SQL: a timestamptz as text does not always read back as the same instant
    # (DateStyle SQL with an ambiguous zone abbreviation: 14 hours off)
    # (only then groupml.runs is read: explain_search and the aggregate need no catalog rights)
    cutoff = ("created_at OPERATOR(pg_catalog.<) coalesce((SELECT r.started_at FROM groupml.runs r "
              "WHERE r.run_id OPERATOR(pg_catalog.=) $1), 'infinity'::timestamptz)" if before_run is not None
              else "$1::bigint IS NULL")
    if family is not None:
        return session.query(sql.format(cutoff + " AND family OPERATOR(pg_catalog.=) $2"), [before_run, family],
                             ["bigint", "text"])
    return session.query(sql.format(cutoff), [before_run], ["bigint"])


# ------------------------------------------------------------------------------ calibration reads
def can_read_run_records(session) -> bool:
    """Whether the calling role may read what calibration reads (runs, grouped_runs,
    run_schedule, trials, models)."""
    return bool(session.query(
        "SELECT pg_catalog.has_table_privilege('groupml.runs', 'SELECT') AND "
        "pg_catalog.has_table_privilege('groupml.grouped_runs', 'SELECT') AND "
        "pg_catalog.has_table_privilege('groupml.run_schedule', 'SELECT') AND "
        "pg_catalog.has_table_privilege('groupml.trials', 'SELECT') AND "
        "pg_catalog.has_table_privilege('groupml.models', 'SELECT') AS ok")[0]["ok"])


def recent_worker_overheads(session, family: str, limit: int) -> List[Dict[str, Any]]:
    """The newest ``limit`` complete runs of ``family`` on worker backends: what each spent
    beyond its training (``seconds - train_seconds``: the snapshot, the workers' connections,
    planning and commits), its worker count, feature count and rows (its groups' training
    and validation rows)."""
    return session.query(
        "SELECT r.seconds - r.train_seconds AS overhead, g.workers, pg_catalog.cardinality(r.features) AS d, "
        "(SELECT pg_catalog.sum(((m.fit).n_train + (m.fit).n_validation)::float8) FROM groupml.models m "
        "WHERE m.run_id = r.run_id) AS n_rows "
        "FROM groupml.runs r JOIN groupml.grouped_runs g ON g.run_id = r.run_id "
        "WHERE r.family = $1 AND r.status = 'done' AND r.seconds IS NOT NULL AND r.train_seconds IS NOT NULL "
        "ORDER BY r.run_id DESC LIMIT $2", [family, int(limit)], ["text", "integer"])


def _search_args(family: str, source: str, features: Sequence[str], search: Mapping[str, Any], limit: int):
    """(values, types) of the queries below: $1 family, $2 source, $3 features, $4 search, $5 limit."""
    return ([family, source, list(features), json.dumps(search), int(limit)],
            ["text", "text", "text[]", "text", "integer"])


def recent_family_runs(session, *, family: str, source: str, features: Sequence[str], search: Mapping[str, Any],
                       limit: int) -> List[Dict[str, Any]]:
    """The newest ``limit`` executor runs of ``family`` with executed tasks: run_id, feature
    count d, whether it is a complete run of the same source, features and search, its
    planned workload."""
    return session.query(
        "SELECT r.run_id, pg_catalog.cardinality(r.features) AS d, "
        "(r.status = 'done' AND r.source = $2 AND r.features OPERATOR(pg_catalog.=) $3::text[] AND "
        "r.search = $4::jsonb) AS same, "
        "g.plan -> 'workload' AS workload "
        "FROM groupml.runs r JOIN groupml.grouped_runs g ON g.run_id = r.run_id "
        "WHERE r.family = $1 AND EXISTS (SELECT 1 FROM groupml.run_schedule s WHERE s.run_id = r.run_id) "
        "ORDER BY r.run_id DESC LIMIT $5",
        *_search_args(family, source, features, search, limit))


def backend_runs_work(session, *, family: str, source: str, features: Sequence[str], search: Mapping[str, Any],
                      limit: int) -> List[Dict[str, Any]]:
    """The newest ``limit`` complete runs of ``family`` over the same source, features and
    search that trained in one backend (no executor plan): per run its groups' training rows
    and the sum over groups of training rows x the configuration-passes of the group's trials."""
    return session.query(
        "WITH r AS (SELECT r.run_id FROM groupml.runs r WHERE r.family = $1 AND r.status = 'done' AND r.source = $2 "
        "AND r.features OPERATOR(pg_catalog.=) $3::text[] AND r.search = $4::jsonb AND NOT EXISTS "
        "(SELECT 1 FROM groupml.grouped_runs g WHERE g.run_id = r.run_id) ORDER BY r.run_id DESC LIMIT $5), "
        "t AS (SELECT t.run_id, t.group_key, pg_catalog.sum((t.metrics ->> 'passes')::float8) AS p "
        "FROM groupml.trials t WHERE t.run_id IN (SELECT run_id FROM r) GROUP BY 1, 2) "
        "SELECT m.run_id, pg_catalog.sum(((m.fit).n_train)::float8) AS rows, "
        "pg_catalog.sum(((m.fit).n_train)::float8 * t.p) AS executed "
        "FROM groupml.models m JOIN t ON t.run_id = m.run_id AND t.group_key = m.group_key GROUP BY m.run_id",
        *_search_args(family, source, features, search, limit))


def runs_tasks(session, run_ids: Sequence[int], limit: int) -> List[Dict[str, Any]]:
    """Executed tasks of ``run_ids``, newest run first, at most ``limit``."""
    return session.query(
        "SELECT run_id, group_key::text AS group_key, kind, pass, worker, row_start, n_rows, trials, started, "
        "finished FROM groupml.run_schedule WHERE run_id = ANY ($1) ORDER BY run_id DESC, started LIMIT $2",
        [list(run_ids), int(limit)], ["bigint[]", "integer"])


def runs_trials(session, run_ids: Sequence[int], limit: int) -> List[Dict[str, Any]]:
    """Trials of ``run_ids`` with their executed iterations and passes, batch size and rounds."""
    return session.query(
        "SELECT run_id, group_key::text AS group_key, trial_id, (metrics ->> 'iterations')::bigint AS iterations, "
        "(metrics ->> 'passes')::bigint AS passes, params -> 'batch_size' AS batch_size, "
        "params -> 'num_boost_round' AS num_boost_round "
        "FROM groupml.trials WHERE run_id = ANY ($1) ORDER BY run_id DESC LIMIT $2",
        [list(run_ids), int(limit)], ["bigint[]", "integer"])


# ------------------------------------------------------------------------------ transforms and model sets
def run_transform(session, run_id: int) -> Optional[str]:
    """The run's stored raw-column transform (JSON text), or None."""
    rows = session.query("SELECT transform::text AS t FROM groupml.runs WHERE run_id = $1", [run_id], ["bigint"])
    return rows[0]["t"] if rows else None


def set_run_transform(session, run_id: int, transform_json: str) -> None:
    session.query("UPDATE groupml.runs SET transform = $2::jsonb WHERE run_id = $1", [run_id, transform_json],
                  ["bigint", "text"])


def run_for_publishing(session, run_id: int) -> List[Dict[str, Any]]:
    """The run a model-set version is published from (no row: none the caller may see)."""
    return session.query("SELECT run_id, kind, source, group_by, features, family, status, key_settings::text AS ks "
                         "FROM groupml.runs WHERE run_id = $1", [run_id], ["bigint"])


def copy_models_to_version(session, version_id: int, run_id: int, key_casts: Sequence[str]) -> None:
    """Copy the run's models into model-set version ``version_id``, each group key as the binary
    record of ``key_casts`` (SQL expressions over ``m.group_key`` built by the caller from
    quoted literals and checked type names)."""
    session.query(
        "INSERT INTO groupml.model_set_models (version_id, group_key, key_value, fit) SELECT $1, m.group_key, "
        f"pg_catalog.record_send(ROW({', '.join(key_casts)})), m.fit FROM groupml.models m WHERE m.run_id = $2",
        [version_id, run_id], ["bigint", "bigint"])


def model_set_run_arguments(session, name: str) -> List[Dict[str, Any]]:
    """The arguments of the run behind set ``name``'s active version (the newest when none is)."""
    return session.query(
        "SELECT r.source, r.group_by, r.features, r.label, r.family, r.search::text AS search, "
        "r.options::text AS options FROM groupml.model_set_versions v JOIN groupml.runs r USING (run_id) "
        "WHERE v.set_name = $1 ORDER BY (v.version = (SELECT s.active_version FROM groupml.model_sets s "
        "WHERE s.name = $1)) DESC, v.version DESC LIMIT 1", [name], ["text"])


# ------------------------------------------------------------------------------ reports (groupml.report)
def report_run(session, run_id: int) -> List[Dict[str, Any]]:
    """The run's row with its executor record, as the caller may read it (no row: none)."""
    return session.query(
        "SELECT r.run_id, r.kind, r.source, r.group_by, r.features, r.label, r.family, r.status, r.n_groups, "
        "r.groups_done, r.started_at::text AS started_at, r.finished_at::text AS finished_at, r.seconds, "
        "r.estimated_seconds, r.train_seconds, r.created_by::text AS created_by, g.strategy, g.workers "
        "FROM groupml.runs r LEFT JOIN groupml.grouped_runs g ON g.run_id = r.run_id WHERE r.run_id = $1",
        [run_id], ["bigint"])


def report_trials(session, run_id: int) -> List[Dict[str, Any]]:
    """Every trial of the run with its per-epoch scores, by group and trial."""
    return session.query(
        "SELECT group_key::text AS group_key, trial_id, params::text AS params, status, score, epoch_scores "
        "FROM groupml.trials WHERE run_id = $1 ORDER BY group_key, trial_id", [run_id], ["bigint"])


def report_models(session, run_id: int) -> List[Dict[str, Any]]:
    """The chosen configuration, metric and score of every group of the run."""
    return session.query(
        "SELECT group_key::text AS group_key, (fit).status AS status, (fit).params::text AS params, "
        "(fit).metric AS metric, (fit).score AS score, (fit).message AS message "
        "FROM groupml.models WHERE run_id = $1 ORDER BY group_key", [run_id], ["bigint"])


def report_task_times(session, run_id: int) -> List[Dict[str, Any]]:
    """The run's executed worker tasks by kind: their count and summed seconds."""
    return session.query(
        "SELECT kind, count(*) AS n, sum(finished - started) AS seconds FROM groupml.run_schedule "
        "WHERE run_id = $1 GROUP BY kind ORDER BY kind", [run_id], ["bigint"])
