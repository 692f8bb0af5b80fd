"""Named model sets: publish a run as a version, activate and roll back, grant, and score.

A set's versions live in groupml.model_set_versions; a version's per-group models are copied
from its run into groupml.model_set_models when it becomes ready, each with its group key in
the group columns' own types (``record_send`` of their values), so scoring matches keys by
typed value (:mod:`groupml.modelsets`). Row-level security on the three tables decides who
sees a set: its owner's members, the roles it was granted to, groupml_admin.

Scoring reads a version's models once per backend (a cache keyed by the version's id, which is
never reused) and checks the set's active version once per statement
(:func:`groupml.db.statement_token`): per row, only the key is decoded and looked up.
"""

from __future__ import annotations

import contextlib

import json
from collections import OrderedDict
from typing import Dict, List, Optional

import numpy as np

from ..db import backend_session, in_parallel_mode, quote_ident, quote_literal, statement_token
from .. import catalog
from ..errors import (ArrayLengthError, DataError, DatatypeMismatchError, FeatureNotSupportedError,
                      InsufficientPrivilegeError, InvalidParameterError, ObjectInUseError, PrerequisiteStateError,
                      UndefinedObjectError)
from ..modelsets import (check_key_types, check_on_missing, check_set_name, float8_literal, float8_rows, gate,
                         group_key, shown_key)
from ..modelsets._keys import key_columns
from ..validation import shown
from ._catalog import check_catalog_privileges
from . import sql_entry

_SEQ = "model_set_versions_version_id_seq"


# ---------------------------------------------------------------------------------------------
# the set's row and the caller's rights on it

def _set_row(session, name: str, owner: str, *, write: bool):
    """The set's row as the caller sees it; 42704 when no set has that name, 42501 when the
    caller may not read it (or, ``write``, change it). With ``write`` the row is locked."""
    rows = session.query(
        "SELECT s.name, s.owner, s.readers, s.active_version, (pg_catalog.pg_has_role(pg_catalog.to_regrole("
        "pg_catalog.quote_ident(s.owner)), 'MEMBER') OR pg_catalog.pg_has_role('groupml_admin', 'MEMBER')) AS mine "
        "FROM groupml.model_sets s WHERE s.name = $1", [name], ["text"])
    if not rows:
        if session.query("SELECT groupml._model_set_exists($1) AS e", [name], ["text"])[0]["e"]:
            raise InsufficientPrivilegeError(
                f"permission denied for model set {name}: {owner} needs to be able to read it",
                hint="Its owner (or a groupml_admin member) can run SELECT groupml.grant_model_set("
                     f"{quote_literal(name)}, <your role>).")
        raise UndefinedObjectError(f"Model set '{name}' does not exist",
                                   hint="See SELECT name, active_version FROM groupml.model_sets; sets are made "
                                        "by groupml.publish or CALL groupml.train_groups(..., model_set => ...).")
    row = rows[0]
    if write:
        if not row["mine"]:
            raise InsufficientPrivilegeError(
                f"permission denied for model set {name}: {owner} changes a set, which only members of its owner "
                f"{quote_ident(row['owner'])} and of groupml_admin may",
                hint="Ask the set's owner; a role it was granted to may only score with it.")
        session.query("SELECT 1 FROM groupml.model_sets WHERE name = $1 FOR UPDATE", [name], ["text"])
    return row


@sql_entry
def model_set_exists(model_set) -> bool:
    return bool(backend_session().query("SELECT EXISTS (SELECT 1 FROM groupml.model_sets WHERE name = $1) AS e",
                                        [model_set], ["text"])[0]["e"])


# ---------------------------------------------------------------------------------------------
# publishing: a run becomes a version

def check_publishing(session, model_set, source: str, group_by) -> Optional[str]:
    """train_groups(model_set => ...): checked before the run starts (None: no set)."""
    if model_set is None:
        return None
    name = check_set_name(model_set, "train_groups")
    check_catalog_privileges(session, "publish")
    _group_types(session, {"run_id": None, "source": source, "group_by": group_by})
    if session.query("SELECT groupml._model_set_exists($1) AS e", [name], ["text"])[0]["e"]:
        _set_row(session, name, "train_groups", write=True)
    return name


def publish_pending(session, run_id: int, name: Optional[str]) -> None:
    """train_groups(model_set => ...): the run's version of the set, made ready and active by
    the trigger when the run is marked done (unless this run already has a pending version
    of the set, from an earlier call of a resumed run)."""
    if name is None:
        return
    if session.query("SELECT 1 FROM groupml.model_set_versions WHERE set_name = $1 AND run_id = $2 AND status = "
                     "'pending'", [name, run_id], ["text", "bigint"]):
        return
    _new_version(session, name, _run_row(session, run_id, "train_groups"), "train_groups", margin=_retrain_margin)


#: the margin of the version retrain_model_set's train_groups call publishes (None otherwise)
_retrain_margin: Optional[float] = None


def _run_row(session, run_id, owner: str):
    rows = catalog.run_for_publishing(session, run_id)
    if not rows:
        raise UndefinedObjectError(f"The 'run_id' value of {owner} must name a run you can see; got {run_id}",
                                   hint="See SELECT run_id, source, status FROM groupml.runs.")
    return rows[0]


def _group_types(session, run) -> List[str]:
    """The group columns' types in the run's source, now (a version records them)."""
    from ..sourcesql import columns

    group_by = list(run["group_by"] or [])
    if not group_by:
        return []
    ok = session.query("SELECT pg_catalog.to_regclass($1) IS NOT NULL AS ok", [run["source"]], ["text"])[0]["ok"]
    cols = columns(session, run["source"]) if ok else {}
    missing = [g for g in group_by if g not in cols]
    if missing:
        raise UndefinedObjectError(
            f"The source {run['source']} of run {run['run_id']} no longer has its group column {missing[0]}: the "
            f"types of the group keys cannot be known", hint="Publish a run whose source still exists, or train again.")
    types = [cols[g] for g in group_by]
    for g, t in zip(group_by, types):
        if t.endswith("[]"):
            raise FeatureNotSupportedError(
                f"Group column {g} of {run['source']} is an array ({t}); a model set routes rows by scalar group keys",
                hint="Group by a scalar column, e.g. a view with array_to_string(the_column, ',') AS key.")
    return types


def _new_version(session, name: str, run, owner: str, margin: Optional[float] = None) -> int:
    """A new version of ``name`` (the set made, owned by the caller, if it does not exist yet)
    for ``run``; ready at once when the run is done, and active (``margin``: only if no worse
    than the active version by more than that). Returns its number."""
    if run["kind"] != "train_groups":
        raise InvalidParameterError(f"Run {run['run_id']} is a {run['kind']} run; a model set version is a "
                                    f"train_groups run", hint="Publish a run of groupml.train_groups.")
    types = _group_types(session, run)
    session.query("INSERT INTO groupml.model_sets (name) VALUES ($1) ON CONFLICT (name) DO NOTHING", [name], ["text"])
    _set_row(session, name, owner, write=True)
    version = session.query("SELECT coalesce(pg_catalog.max(version), 0) + 1 AS v FROM groupml.model_set_versions "
                            "WHERE set_name = $1", [name], ["text"])[0]["v"]
    vid = session.query(
        "INSERT INTO groupml.model_set_versions (set_name, version, run_id, group_by, group_types, features, n_features, "
        "family, margin) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) RETURNING version_id",
        [name, version, run["run_id"], list(run["group_by"] or []), types, list(run["features"]),
         len(run["features"]), run["family"], margin],
        ["text", "integer", "bigint", "text[]", "text[]", "text[]", "integer", "text", "float8"])[0]["version_id"]
    if run["status"] == "done":
        _make_ready(session, vid, run)
    return int(version)


def _make_ready(session, version_id: int, run) -> None:
    """Copy the run's models into the version with their typed keys, summarise them, mark the
    version ready and make it the set's active one (with a margin: if :func:`gate` says so)."""
    v = session.query("SELECT set_name, version, group_by, group_types, margin FROM groupml.model_set_versions "
                      "WHERE version_id = $1", [version_id], ["bigint"])[0]
    casts = []
    for g, t in zip(v["group_by"], v["group_types"]):
        typ = session.query("SELECT pg_catalog.format_type(pg_catalog.to_regtype($1), NULL) AS t", [t], ["text"])[0]["t"]
        if typ is None:
            raise UndefinedObjectError(f"The type {t} of group column {g} no longer exists",
                                       hint="Recreate the type, or train and publish again.")
        casts.append(f"(m.group_key OPERATOR(pg_catalog.->>) {quote_literal(g)})::{typ}")
    settings = json.loads(run["ks"]) if run.get("ks") else {}
    with _settings(session, settings):        # the key text as it was written (a timestamptz's zone, ...)
        catalog.copy_models_to_version(session, version_id, run["run_id"], casts)
    summary = session.query(
        "SELECT pg_catalog.count(*) AS groups, pg_catalog.count((m.fit).model) AS with_model, "
        "pg_catalog.min((m.fit).metric) AS metric, pg_catalog.min((m.fit).score) AS score_min, "
        "pg_catalog.percentile_cont(0.5) WITHIN GROUP (ORDER BY (m.fit).score) AS score_median, "
        "pg_catalog.max((m.fit).score) AS score_max, pg_catalog.avg((m.fit).score) AS score_mean "
        "FROM groupml.model_set_models m WHERE m.version_id = $1", [version_id], ["bigint"])[0]
    if v["margin"] is None:
        activate, why = True, "activated when ready"
    else:
        old = session.query(
            "SELECT s.active_version AS version, a.summary OPERATOR(pg_catalog.->>) 'metric' AS metric, "
            "(a.summary OPERATOR(pg_catalog.->>) 'score_mean')::float8 AS score FROM groupml.model_sets s LEFT JOIN "
            "groupml.model_set_versions a ON a.set_name = s.name AND a.version = s.active_version WHERE s.name = $1",
            [v["set_name"]], ["text"])[0]
        activate, why = gate(summary["metric"], summary["score_mean"], old["version"], old["metric"], old["score"],
                             float(v["margin"]))
        session.notice(f"groupml: model set '{v['set_name']}' version {v['version']}: {why}")
    session.query("UPDATE groupml.model_set_versions SET status = 'ready', ready_at = pg_catalog.clock_timestamp(), "
                  "summary = $2::jsonb, decision = $3 WHERE version_id = $1",
                  [version_id, json.dumps(dict(summary)), why], ["bigint", "text", "text"])
    if activate:
        session.query("UPDATE groupml.model_sets SET active_version = $2 WHERE name = $1",
                      [v["set_name"], v["version"]], ["text", "integer"])


class _settings:
    """Session settings set for a block (transaction-local) and put back after it."""

    def __init__(self, session, settings: Dict[str, str]):
        self.session, self.settings, self.saved = session, settings, {}

    def __enter__(self):
        for k, val in self.settings.items():
            self.saved[k] = self.session.query("SELECT pg_catalog.current_setting($1) AS v", [k], ["text"])[0]["v"]
            self.session.query("SELECT pg_catalog.set_config($1, $2, true)", [k, val], ["text", "text"])

    def __exit__(self, *exc):
        for k, val in self.saved.items():
            self.session.query("SELECT pg_catalog.set_config($1, $2, true)", [k, val], ["text", "text"])


@sql_entry
def publish(run_id, model_set):
    session = backend_session()
    with session.pinned_search_path():
        name = check_set_name(model_set, "publish")
        if run_id is None:
            raise InvalidParameterError("The 'run_id' value of publish must name a run; got null",
                                        hint="See SELECT run_id, source, status FROM groupml.runs.")
        check_catalog_privileges(session, "publish")
        return _new_version(session, name, _run_row(session, run_id, "publish"), "publish")


@sql_entry
def run_done_trigger(td):
    """A run marked done: its pending versions become ready and active, in that transaction."""
    session = backend_session()
    run_id = int(td["new"]["run_id"])
    with session.pinned_search_path():
        pending = session.query("SELECT version_id FROM groupml.model_set_versions WHERE run_id = $1 AND status = "
                                "'pending' ORDER BY version_id", [run_id], ["bigint"])
        if pending:
            run = _run_row(session, run_id, "train_groups")
            for p in pending:
                _make_ready(session, int(p["version_id"]), run)
    return None


# ---------------------------------------------------------------------------------------------
# retraining, by hand or by pg_cron

def check_margin(margin, owner: str) -> float:
    from ..validation import check_number

    return float(check_number(0.0 if margin is None else margin, "margin", owner, ge=0,
                              hint="The worsening of the mean validation score (in the metric's units) a new "
                                   "version may show and still be activated; 0 = no worse."))


@contextlib.contextmanager
def retraining(margin: float):
    """While a retrain's train_groups runs, the version it publishes is activated only if its
    score passes :func:`gate` with ``margin``."""
    global _retrain_margin
    _retrain_margin = margin
    try:
        yield
    finally:
        _retrain_margin = None


def retrain_arguments(session, name: str, owner: str):
    """The run arguments of the version a retrain of set ``name`` (checked) repeats: the active
    version's run, the newest version's when none is active."""
    with session.pinned_search_path():
        _set_row(session, name, owner, write=False)
        rows = catalog.model_set_run_arguments(session, name)
    if not rows:
        raise PrerequisiteStateError(
            f"Model set '{name}' has no version whose run is still in groupml.runs: what to train is unknown",
            hint="Train it with CALL groupml.train_groups(..., model_set => ...) once; retraining repeats that run.")
    return rows[0]


@sql_entry
def schedule_retraining(model_set, schedule, margin, database, job_name):
    from .tenancy import MAX_CRON_TEXT, cron_prerequisites, cron_schedule

    session = backend_session()
    owner = "schedule_retraining"
    name = check_set_name(model_set, owner)
    margin = check_margin(margin, owner)
    if schedule is None or not str(schedule).strip() or len(str(schedule)) > MAX_CRON_TEXT:
        raise InvalidParameterError(f"The 'schedule' value of {owner} must be a cron schedule of at most "
                                    f"{MAX_CRON_TEXT} characters; got {shown(schedule)}",
                                    hint="For example '0 3 * * *' (every night at 3).")
    job_name = job_name or f"groupml_retrain_{name}"[:MAX_CRON_TEXT]
    with session.pinned_search_path():
        here = cron_prerequisites(session, database, job_name, owner)
        if here:                # a set in another database is checked when the job runs there
            _changing(session, name, owner, "activate_model_set")
        command = f"CALL groupml.retrain_model_set({quote_literal(name)}, margin => {margin!r})"
        return cron_schedule(session, owner, here, job_name, schedule, command, database)


# ---------------------------------------------------------------------------------------------
# versions: activate, roll back, drop; readers

def _version_row(session, name: str, version, owner: str):
    if version is None:
        raise InvalidParameterError(f"The 'version' value of {owner} must be a version number; got null",
                                    hint=f"See SELECT version, status FROM groupml.model_set_versions WHERE "
                                         f"set_name = {quote_literal(name)};")
    rows = session.query("SELECT version_id, status FROM groupml.model_set_versions WHERE set_name = $1 AND version = $2",
                         [name, version], ["text", "integer"])
    if not rows:
        raise UndefinedObjectError(f"Model set '{name}' has no version {version}",
                                   hint=f"See SELECT version, status FROM groupml.model_set_versions WHERE "
                                        f"set_name = {quote_literal(name)};")
    return rows[0]


def _activate(session, name: str, version: int, owner: str) -> None:
    if _version_row(session, name, version, owner)["status"] != "ready":
        raise PrerequisiteStateError(f"Version {version} of model set '{name}' is not ready: its run is not done",
                                     hint="It becomes ready, and active, when its run finishes; resume the run with "
                                          "CALL groupml.train_groups(..., run_id => <its run>).")
    session.query("UPDATE groupml.model_sets SET active_version = $2 WHERE name = $1", [name, version],
                  ["text", "integer"])


def _changing(session, model_set, owner: str, needs: str):
    """(name, the set's row, locked) for an entry point ``owner`` that changes the set: its
    name checked, the catalog rights of ``needs`` (:data:`~groupml.udf._catalog.NEEDS`) and
    the caller's ownership of the set."""
    name = check_set_name(model_set, owner)
    check_catalog_privileges(session, needs)
    return name, _set_row(session, name, owner, write=True)


@sql_entry
def activate_model_set(model_set, version):
    session = backend_session()
    with session.pinned_search_path():
        name, row = _changing(session, model_set, "activate_model_set", "activate_model_set")
        _activate(session, name, version, "activate_model_set")
        return row["active_version"]


@sql_entry
def rollback_model_set(model_set):
    session = backend_session()
    with session.pinned_search_path():
        name, row = _changing(session, model_set, "rollback_model_set", "activate_model_set")
        active = row["active_version"]
        rows = session.query("SELECT pg_catalog.max(version) AS v FROM groupml.model_set_versions WHERE set_name = $1 "
                             "AND status = 'ready' AND version < $2", [name, active or 0], ["text", "integer"])
        if rows[0]["v"] is None:
            raise PrerequisiteStateError(
                f"Model set '{name}' has no ready version older than its active version {shown(active)}",
                hint="Versions dropped with drop_model_set_version are gone; activate_model_set picks any ready one.")
        _activate(session, name, int(rows[0]["v"]), "rollback_model_set")
        return int(rows[0]["v"])


@sql_entry
def drop_model_set_version(model_set, version):
    session = backend_session()
    with session.pinned_search_path():
        name, row = _changing(session, model_set, "drop_model_set_version", "drop_model_set")
        active = row["active_version"]
        if version is not None and version == active:
            raise ObjectInUseError(f"Version {version} of model set '{name}' is its active version",
                                   hint="Activate another version first (groupml.activate_model_set or "
                                        "groupml.rollback_model_set), or drop the whole set with drop_model_set.")
        return bool(session.query("DELETE FROM groupml.model_set_versions WHERE set_name = $1 AND version = $2 "
                                  "RETURNING 1", [name, version], ["text", "integer"]))


@sql_entry
def drop_model_set(model_set):
    session = backend_session()
    with session.pinned_search_path():
        try:
            name, _ = _changing(session, model_set, "drop_model_set", "drop_model_set")
        except UndefinedObjectError:
            return False
        return bool(session.query("DELETE FROM groupml.model_sets WHERE name = $1 RETURNING 1", [name], ["text"]))


def _readers(model_set, role, owner: str, change: str):
    session = backend_session()
    with session.pinned_search_path():
        name = check_set_name(model_set, owner)
        if role is None:
            raise InvalidParameterError(f"The 'role' value of {owner} must name a role; got null",
                                        hint="Pass a role name, e.g. 'analysts'.")
        if not session.query("SELECT pg_catalog.to_regrole(pg_catalog.quote_ident($1)) IS NOT NULL AS ok", [role],
                             ["text"])[0]["ok"]:
            raise UndefinedObjectError(f"The 'role' value of {owner} names no role: {shown(role)} does not exist",
                                       hint="See SELECT rolname FROM pg_roles.")
        _, row = _changing(session, name, owner, "grant_model_set")
        readers = list(row["readers"] or [])
        had = role in readers
        readers = ([r for r in readers if r != role] if change == "revoke" else readers + ([] if had else [role]))
        session.query("UPDATE groupml.model_sets SET readers = $2 WHERE name = $1", [name, readers],
                      ["text", "name[]"])
        return had if change == "revoke" else not had


@sql_entry
def grant_model_set(model_set, role):
    return _readers(model_set, role, "grant_model_set", "grant")


@sql_entry
def revoke_model_set(model_set, role):
    return _readers(model_set, role, "revoke_model_set", "revoke")


# ---------------------------------------------------------------------------------------------
# scoring

class _Version:
    """A ready version's models, by typed group key; decoded on first use."""

    RAW_KEYS = 100_000

    def __init__(self, version_id, name, version, group_by, oids, n_features, entries):
        self.version_id, self.name, self.version = version_id, name, version
        self.group_by, self.oids, self.n_features = list(group_by), list(oids), n_features
        self.entries = entries                        # key -> [status, model bytes, decoded model]
        self.by_raw: Dict[bytes, object] = {}         # record_send bytes of a scoring key -> entry (None: missing)

    def route(self, raw: bytes, on_missing: str, fn: str):
        """The model for a key in record_send form, or None (no model and on_missing 'null')."""
        if raw is None:
            raise DataError("A group key is NULL; groupml.predict passes the key values as a row",
                            hint="Call groupml.predict(model_set, features, group_key), not its internal function.")
        entry = self.by_raw.get(raw, 0)
        if entry == 0:
            cols = key_columns(raw)
            check_key_types([c[0] for c in cols], self.oids, self.group_by, self.name)
            entry = self.entries.get(group_key(cols))
            if entry is None or entry[1] is None:
                entry = ("missing", shown_key(cols, self.group_by), None if entry is None else entry[0])
            if len(self.by_raw) < self.RAW_KEYS:
                self.by_raw[raw] = entry
        if entry[0] == "missing":
            if on_missing == "null":
                return None
            why = "has no model of that group" if entry[2] is None else f"has no model of it (status {entry[2]})"
            raise DataError(f"Version {self.version} of model set '{self.name}' {why}: {entry[1]}",
                            hint=f"Pass on_missing => 'null' to {fn} to give such rows a NULL prediction.")
        if entry[2] is None:
            from .predict import load_cached
            entry[2] = load_cached(bytes(entry[1]))
        return entry[2]


_versions: "OrderedDict[int, _Version]" = OrderedDict()
VERSIONS_KEPT = 8
_active: Dict[str, tuple] = {}           # set name -> (statement token, version id)
_authorised: Dict[int, tuple] = {}       # version id -> statement token predict_table loaded it in


def _load_version(session, version_id: int) -> _Version:
    hit = _versions.get(version_id)
    if hit is not None:
        _versions.move_to_end(version_id)
        return hit
    meta = session.query(
        "SELECT v.set_name, v.version, v.group_by, v.n_features, ARRAY(SELECT coalesce(pg_catalog.to_regtype(t)::oid, 0) "
        "FROM pg_catalog.unnest(v.group_types) WITH ORDINALITY AS u(t, i) ORDER BY u.i) AS oids "
        "FROM groupml.model_set_versions v WHERE v.version_id = $1", [version_id], ["bigint"])[0]
    entries = {}
    for r in session.query("SELECT key_value, (fit).status AS status, (fit).model AS model FROM "
                           "groupml.model_set_models WHERE version_id = $1", [version_id], ["bigint"]):
        entries[group_key(key_columns(r["key_value"]))] = [r["status"], r["model"], None]
    version = _Version(version_id, meta["set_name"], meta["version"], meta["group_by"] or [],
                       [int(o) for o in meta["oids"] or []], int(meta["n_features"]), entries)
    _versions[version_id] = version
    while len(_versions) > VERSIONS_KEPT:
        _versions.popitem(last=False)
    return version


def _active_version(session, model_set, fn: str) -> _Version:
    """The set's active version as this statement sees it (asked once per statement)."""
    name = check_set_name(model_set, fn)
    token = statement_token()
    hit = _active.get(name)
    if hit is not None and token is not None and hit[0] == token and hit[1] in _versions:
        return _versions[hit[1]]
    if in_parallel_mode():
        raise FeatureNotSupportedError(
            f"{fn} with a model set reads the set's models, which a parallel query cannot",
            hint="Call it in a query the planner runs without parallel workers (a function that wraps it must not "
                 "be PARALLEL SAFE), or use groupml.predict_table.")
    with session.pinned_search_path():
        row = _set_row(session, name, fn, write=False)
        if row["active_version"] is None:
            raise PrerequisiteStateError(f"Model set '{name}' has no active version yet: its first run is not done",
                                         hint="It gets one when the run it was published from finishes.")
        vid = session.query("SELECT version_id FROM groupml.model_set_versions WHERE set_name = $1 AND version = $2",
                            [name, row["active_version"]], ["text", "integer"])[0]["version_id"]
        version = _load_version(session, int(vid))
    _active[name] = (token, version.version_id)
    return version


def _predict_one(model_set, features, group_key_value, on_missing, fn: str):
    """One row scored with its group's model of the set's active version: its class or value
    (``predict``) or its probability of class 1 (``predict_proba``)."""
    from .predict import labels, one_row, probabilities

    session = backend_session()
    version = _active_version(session, model_set, fn)
    check_on_missing(on_missing, fn)
    if features is None:
        return None
    model = version.route(group_key_value, on_missing, fn)
    if model is None:
        return None
    X = one_row(model, features, fn, whose=f"Model set '{version.name}'")
    score = probabilities if fn == "predict_proba" else labels
    return float(score(model, X, fn)[0])


@sql_entry
def predict_in_set(model_set, features, group_key_value, on_missing):
    return _predict_one(model_set, features, group_key_value, on_missing, "predict")


@sql_entry
def predict_proba_in_set(model_set, features, group_key_value, on_missing):
    return _predict_one(model_set, features, group_key_value, on_missing, "predict_proba")


# ---------------------------------------------------------------------------------------------
# the table scorer

_INTEGER_TYPES = ("smallint", "integer", "bigint")
OWNER_TABLE = "predict_table"


def _auth_token():
    t = statement_token()
    return None if t is None else (t[0], t[1], t[3])


@sql_entry
def predict_table_sql(model_set, source, key_column, features, group_by, on_missing, proba=False):
    from ..sourcesql import check_column_privileges, check_columns, check_select_privilege, columns, source_oid

    fn = _table_owner(proba)
    session = backend_session()
    on_missing = check_on_missing(on_missing, fn)
    version = _active_version(session, model_set, fn)
    oid = source_oid(session, source, fn)
    with session.pinned_search_path():
        src = check_select_privilege(session, oid, fn)
        cols = columns(session, oid)
        if key_column is None:
            raise InvalidParameterError(f"The 'key_column' value of {fn} must name a column; got null",
                                        hint="Pass the integer column that identifies a row, e.g. 'id'.")
        check_columns(cols, [key_column], "key_column", src, numeric=False, owner=fn)
        if cols[key_column] not in _INTEGER_TYPES:
            raise DatatypeMismatchError(
                f"Column '{key_column}' of {fn} key_column must be smallint, integer or bigint; it is "
                f"{cols[key_column]}", hint="Pass an integer key (e.g. a view adding row_number() OVER () AS id).")
        feats = check_columns(cols, features, "features", src, numeric=True, owner=fn)
        if len(feats) != version.n_features:
            raise ArrayLengthError(
                f"Model set '{version.name}' expects {version.n_features} features; found {len(feats)}",
                hint="Name the same columns, in the same order, as for training.")
        groups = version.group_by if group_by is None else check_columns(cols, group_by, "group_by", src,
                                                                          numeric=False, owner=fn)
        missing = [g for g in groups if g not in cols]
        if missing:
            raise DatatypeMismatchError(
                f"Model set '{version.name}' routes by {', '.join(version.group_by)}; {src} has no column {missing[0]}",
                hint="Pass group_by => ARRAY[...] naming the source's columns that hold the set's group keys.")
        oids = [int(r["o"]) for r in session.query(
            "SELECT coalesce(pg_catalog.to_regtype(u.t)::oid, 0) AS o FROM pg_catalog.unnest($1::text[]) WITH ORDINALITY "
            "AS u(t, i) ORDER BY u.i", [[cols[g] for g in groups]], ["text[]"])]
        check_key_types(oids, version.oids, list(groups), version.name,
                        names={o: cols[g] for o, g in zip(oids, groups)})
        check_column_privileges(session, src, [key_column] + list(groups) + feats, fn)
    _authorised[version.version_id] = _auth_token()
    return _table_query(version.version_id, src, key_column, cols, feats, groups, on_missing, bool(proba))


def _table_owner(proba) -> str:
    return "predict_proba_table" if proba else OWNER_TABLE


def _table_query(version_id: int, src: str, key_column: str, cols, feats, groups, on_missing: str,
                 proba: bool) -> str:
    """The query that scores ``src``: one row per group with the rows' keys aggregated into an
    array and their features into a two-dimensional array, one row of it per source row (one
    aggregate instead of one per column; a NULL feature is read as NaN: its row's prediction is
    NULL), each group
    scored by one call of groupml._score_block, whose float8[] literal is unnested with the keys
    back into (row_key, prediction) -- in the select list, which zips the two arrays without
    the tuplestore a function in FROM fills."""
    g_alias = [quote_ident(f"g{i}") for i in range(len(groups))]
    f_alias = [quote_ident(f"f{i}") for i in range(len(feats))]
    inner = ", ".join([f"t.{quote_ident(g)} AS {a}" for g, a in zip(groups, g_alias)]
                      + [f"(t.{quote_ident(key_column)})::int8 AS k"]
                      + [f"(t.{quote_ident(f)}){'::int' if cols[f] == 'boolean' else ''}::float8 AS {a}"
                         for f, a in zip(feats, f_alias)])
    packed = f"groupml._float8_bytes(pg_catalog.array_agg(ARRAY[{', '.join('s.' + a for a in f_alias)}]))"
    group_clause = (" GROUP BY " + ", ".join(f"s.{a}" for a in g_alias)) if groups else ""
    return (
        "SELECT pg_catalog.unnest(b.keys) AS row_key, pg_catalog.unnest(b.preds) AS prediction FROM ("
        "SELECT pg_catalog.array_agg(s.k) AS keys, "
        f"groupml._score_block({int(version_id)}, pg_catalog.record_send(ROW({', '.join('s.' + a for a in g_alias)})), "
        f"{quote_literal(on_missing)}, {'true' if proba else 'false'}, {packed})::pg_catalog.float8[] AS preds "
        f"FROM (SELECT {inner} FROM {src} t WHERE t.{quote_ident(key_column)} IS NOT NULL) s{group_clause}) b")


@sql_entry
def score_block(version_id, group_key_value, on_missing, proba, rows) -> str:
    """One group's rows (the bytes of its float8[][] of features, a row per source row; a NULL
    is read as NaN) scored with its model: a float8[] literal, NULL for a row with a non-finite feature."""
    from ..db import cancel_check_here
    from .predict import BATCH_CHUNK_ROWS, labels, probabilities

    fn = _table_owner(proba)
    version = _versions.get(version_id)
    if version is None or version_id not in _authorised or _authorised[version_id] != _auth_token():
        raise PrerequisiteStateError(f"groupml._score_block scores only within the query groupml.{fn} runs",
                                     hint=f"Call groupml.{fn}.")
    X = float8_rows(rows, version.n_features)
    n = X.shape[0]
    if n == 0:
        return "{}"
    bad = np.zeros(n, dtype=bool) if np.isfinite(X).all() else ~np.isfinite(X).all(axis=1)
    if bad.all():                  # no row to score: no model needed
        return float8_literal(np.zeros(n), bad)
    model = version.route(group_key_value, on_missing, fn)
    if model is None:
        return float8_literal(np.zeros(n), np.ones(n, dtype=bool))
    if bad.any():
        X[bad] = 0.0
    score = probabilities if proba else labels
    check = cancel_check_here()
    out = np.empty(n)
    step = BATCH_CHUNK_ROWS * 16
    for s in range(0, n, step):
        if s and check is not None:
            check()
        out[s:s + step] = score(model, X[s:s + step], fn, s)
    return float8_literal(out, bad)
