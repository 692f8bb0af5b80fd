"""Which parts of groupml's own catalog an entry point writes, checked before it starts.

The catalog tables (runs, models, snapshots, cost_runs, ...) carry no grants to PUBLIC: the
extension's owner trains, and an administrator may grant a role the rights below. A role
without them gets one clear 42501 naming what is missing, instead of PostgreSQL's error from
the middle of a run (a half-claimed run, a Python traceback). Row-level security limits what
the rights reach to the role's own runs and snapshots (and those of roles it is a member of).
"""

from __future__ import annotations

from typing import Dict, Iterable, List, Tuple

from ..errors import InsufficientPrivilegeError

_RUN = [("runs", "SELECT"), ("runs", "INSERT"), ("runs", "UPDATE"), ("models", "SELECT"), ("models", "INSERT"),
        ("trials", "INSERT"), ("cost_runs", "INSERT")]
_EXECUTOR = [("grouped_runs", "SELECT"), ("grouped_runs", "INSERT"), ("grouped_runs", "UPDATE"),
             ("snapshots", "SELECT"), ("snapshots", "INSERT"), ("snapshots", "UPDATE"), ("snapshots", "DELETE"),
             ("snapshot_groups", "SELECT"), ("snapshot_groups", "INSERT"), ("snapshot_blocks", "SELECT"),
             ("snapshot_blocks", "INSERT"), ("trials", "SELECT"), ("trials", "DELETE"), ("run_epochs", "SELECT"),
             ("run_epochs", "INSERT"), ("run_epochs", "DELETE"), ("run_schedule", "SELECT"), ("run_schedule", "INSERT"),
             ("run_schedule", "DELETE"), ("run_checkpoints", "SELECT"), ("run_checkpoints", "INSERT"),
             ("run_checkpoints", "UPDATE"), ("run_checkpoints", "DELETE"), ("worker_endpoints", "SELECT"),
             ("run_requests", "SELECT"), ("run_requests", "UPDATE")]
#: what a request steering a model hopper run reads and writes
_STEER = [("runs", "SELECT"), ("grouped_runs", "SELECT"), ("run_epochs", "SELECT"), ("run_requests", "SELECT"),
          ("run_requests", "INSERT"), ("worker_endpoints", "SELECT")]

#: entry point -> (table, privilege) pairs it needs on groupml's catalog
NEEDS: Dict[str, List[Tuple[str, str]]] = {
    "train_groups": _RUN,
    "train_groups with workers or a strategy": _RUN + _EXECUTOR,
    "drop_snapshot": [("snapshots", "SELECT"), ("snapshots", "DELETE"), ("grouped_runs", "SELECT")],
    "calibrate_cost_model": [("cost_runs", "SELECT"), ("cost_runs", "INSERT")],
    "publish": [("runs", "SELECT"), ("models", "SELECT"), ("model_sets", "INSERT"), ("model_sets", "UPDATE"),
                ("model_set_versions", "INSERT"), ("model_set_versions", "UPDATE"), ("model_set_models", "INSERT")],
    "activate_model_set": [("model_sets", "UPDATE")],
    "drop_model_set": [("model_sets", "UPDATE"), ("model_sets", "DELETE"), ("model_set_versions", "DELETE")],
    "grant_model_set": [("model_sets", "UPDATE")],
    "replay": [("runs", "SELECT"), ("grouped_runs", "SELECT"), ("trials", "SELECT"), ("run_schedule", "SELECT"),
               ("snapshots", "SELECT"), ("snapshot_groups", "SELECT"), ("snapshot_blocks", "SELECT")],
    "mop_add_trial": _STEER,
    "mop_stop_trial": _STEER,
    "mop_add_workers": _STEER,
    "_gap_task": [("snapshot_blocks", "SELECT")],
    "_gap_partial": [("snapshot_blocks", "SELECT")],
}

#: the sequence of each catalog table whose rows take a serial id
SEQUENCES: Dict[str, str] = {"runs": "runs_run_id_seq", "models": "models_model_id_seq",
                             "cost_runs": "cost_runs_run_id_seq", "snapshots": "snapshots_snapshot_id_seq",
                             "model_set_versions": "model_set_versions_version_id_seq",
                             "run_requests": "run_requests_request_id_seq"}

_WRITES = "it writes groupml's catalog"
_VIEWS = "groupml.best_models, groupml.progress, groupml.run_trial_info"
#: what else a role needs, beyond the rights checked, to read the results: the views run as
#: the caller (security_invoker), so they also need SELECT on the tables they read
ALSO: Dict[str, str] = {"train_groups": f"GRANT SELECT ON groupml.trials, groupml.grouped_runs, {_VIEWS} TO {{role}}",
                        "train_groups with workers or a strategy": f"GRANT SELECT ON {_VIEWS} TO {{role}}"}
#: why an entry point needs its rights, when it is not that it writes the catalog
_WORKER = "it is the worker side of train_groups and reads its training snapshots"
WHY: Dict[str, str] = {"_gap_task": _WORKER, "_gap_partial": _WORKER,
                       "replay": "it reads the run's visit log, trials and training snapshot"}


def missing_privileges(session, needs: Iterable[Tuple[str, str]]) -> List[Tuple[str, str]]:
    """The (table, privilege) pairs of ``needs`` the calling role lacks, in order."""
    needs = list(needs)
    rows = session.query(
        "SELECT u.t, u.p FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(t, p, i) "
        "WHERE NOT pg_catalog.has_table_privilege(pg_catalog.format('groupml.%I', u.t), u.p) ORDER BY u.i",
        [[t for t, _ in needs], [p for _, p in needs]], ["text[]", "text[]"])
    return [(r["t"], r["p"]) for r in rows]


def missing_sequences(session, needs: Iterable[Tuple[str, str]]) -> List[str]:
    """The sequences of the tables ``needs`` inserts into that the calling role may not use."""
    seqs = list(dict.fromkeys(SEQUENCES[t] for t, p in needs if p == "INSERT" and t in SEQUENCES))
    rows = session.query(
        "SELECT u.s FROM unnest($1::text[]) WITH ORDINALITY AS u(s, i) "
        "WHERE NOT pg_catalog.has_sequence_privilege(pg_catalog.format('groupml.%I', u.s), 'USAGE') ORDER BY u.i",
        [seqs], ["text[]"]) if seqs else []
    return [r["s"] for r in rows]


def check_catalog_privileges(session, what: str) -> None:
    """Raise 42501 when the calling role lacks a right ``what`` needs on the catalog."""
    missing = missing_privileges(session, NEEDS[what])
    seqs = missing_sequences(session, NEEDS[what])
    if not missing and not seqs:
        return
    by_table: Dict[str, List[str]] = {}
    for t, p in missing:
        by_table.setdefault(t, []).append(p)
    role = session.query("SELECT pg_catalog.quote_ident(current_user::text) AS r")[0]["r"]
    grants = [f"GRANT {', '.join(ps)} ON groupml.{t} TO {role}" for t, ps in by_table.items()]
    if seqs:
        grants.append(f"GRANT USAGE ON SEQUENCE {', '.join('groupml.' + s for s in seqs)} TO {role}")
    if what in ALSO:
        grants.append(ALSO[what].format(role=role))
    kind, (obj, priv) = ("table", missing[0]) if missing else ("sequence", (seqs[0], "USAGE"))
    raise InsufficientPrivilegeError(
        f"permission denied for {kind} groupml.{obj}: {what} needs {priv} on it "
        f"({WHY.get(what, _WRITES)})",
        hint=f"Run it as the extension's owner, or have an administrator grant the calling role what it needs: "
             f"{'; '.join(grants)};")
