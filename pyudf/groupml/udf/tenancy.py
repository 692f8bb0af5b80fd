"""Multi-tenant model selection in SQL: tenants, jobs, the coordinator procedure, pg_cron, infer.

Tables (sql/tenancy/): ``tenants`` (bound to a role), ``jobs``, ``candidates``,
``observations`` and ``scheduler_state``; row-level security lets a role see only the
rows of tenants it is a member of, ``groupml_admin`` members see all.

The coordinator (:func:`run_scheduler`) keeps the pure-Python
:class:`groupml.tenancy.Scheduler` in ``scheduler_state.state`` (jsonb). One core
*tenant* is one job (``"job:<job_id>"``); candidate keys are the stable strings
``"<family>:<canonical JSON params>"``, identical across jobs, so the GP prior of one job
is estimated from the qualities other jobs observed for the same keys. Every step runs
in its own transaction::

    lock state row -> Scheduler.from_state -> add new jobs -> next_step -> train
    -> observation row + candidate status + job best + state (log grows by one) -> COMMIT

so a cancelled or crashed run loses at most the step in flight, and the next call makes
exactly the decision the interrupted one was working on. ``run_scheduler`` is that loop:
argument checks (:func:`_check_scheduler_args`), then :func:`_scheduler_step` until done.

What is not SQL is pure Python in :mod:`groupml.tenancy`: the scheduler, the expansion of a
job's candidates into keyed configurations and their estimated costs.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..db import backend_session, quote_ident, quote_literal
from ..errors import (DataError, DuplicateObjectError, FeatureNotSupportedError, GroupmlError,
                      InsufficientPrivilegeError, InvalidParameterError, PrerequisiteStateError,
                      InvalidCatalogNameError, PassedOnError, UndefinedObjectError, UndefinedTableError)
from ..fitting import unpack_rows
from ..tenancy import (POLICIES, TASK_METRIC, Scheduler, aggregate, estimated_cost, expand_candidates, simulate,
                       synthetic_dataset)
from ..validation import SHOWN_CHARS, check_bool, check_choice, check_number, clipped, shown
from ..sourcesql import (check_columns, check_label_not_a_feature, check_source_kind, columns, packed_row_expr,
                         reading_source, source_oid)
from . import parse_jsonb, pinned, sql_entry

#: Both metrics are at most 1: EIRATE's expected improvement is of the quality clipped there
#: (a tenant holding a perfect model has nothing left to gain).
QUALITY_MAX = 1.0
#: Trainings started without an outcome (cancelled, timed out, backend ended) after which
#: run_scheduler records a candidate as failed.
MAX_ATTEMPTS = 3
#: Longest schedule and job name schedule_with_cron passes to pg_cron (its messages echo them).
MAX_CRON_TEXT = 256
#: Users x models of one simulate_scheduler dataset (each user's qualities become GP history).
MAX_SIMULATED_CELLS = 1_000_000
STATE_NAME = "default"
#: Advisory lock key of a coordinator step (transaction-scoped): 'groupml' in ASCII.
SCHEDULER_LOCK = 0x67726F75706D6C
#: The coordinator re-estimates every job's GP prior from all recorded qualities every this many steps.
PRIOR_REFRESH = 10
ADMIN_HINT = "Run it as a member of groupml_admin: GRANT groupml_admin TO <role>; (or as a superuser)."


# ---------------------------------------------------------------------------- helpers
def _is_admin(session) -> bool:
    return bool(session.query("SELECT pg_catalog.pg_has_role('groupml_admin', 'MEMBER') AS ok")[0]["ok"])


def _require_admin(session, what: str) -> None:
    if not _is_admin(session):
        raise InsufficientPrivilegeError(f"permission denied: {what} needs membership in groupml_admin",
                                         hint=ADMIN_HINT)


# ---------------------------------------------------------------------------- create_tenant
@sql_entry
@pinned
def create_tenant(name, role):
    session = backend_session()
    if name is None or not str(name).strip():
        raise InvalidParameterError(f"The 'name' value of create_tenant must be a non-empty text; got {shown(name)}",
                                    hint="Name the tenant, e.g. SELECT groupml.create_tenant('astro');")
    if role is None:
        raise InvalidParameterError("The 'role' value of create_tenant must name a role; got null",
                                    hint="Omit role to bind the tenant to the calling role.")
    rows = session.query("SELECT oid::bigint AS oid FROM pg_catalog.pg_roles WHERE rolname = $1", [role], ["name"])
    if not rows:
        raise UndefinedObjectError(f"Role '{role}' of create_tenant does not exist",
                                   hint=f"CREATE ROLE {quote_ident(role)} LOGIN; first, or pass an existing role.")
    if str(role).startswith("pg_"):
        # predefined roles (pg_monitor, pg_read_all_data, ...): every role granted them for
        # another purpose would see and change the tenant's jobs and models
        raise InvalidParameterError(
            f"The 'role' value of create_tenant must not be a predefined role; got {shown(str(role))}",
            hint="Bind the tenant to a role of its own, e.g. CREATE ROLE astro; GRANT astro TO alice;")
    ok = session.query("SELECT pg_catalog.pg_has_role($1::oid, 'MEMBER') OR "
                       "pg_catalog.pg_has_role('groupml_admin', 'MEMBER') AS ok", [rows[0]["oid"]], ["bigint"])
    if not ok[0]["ok"]:
        raise InsufficientPrivilegeError(
            f"permission denied: create_tenant may bind tenant '{name}' to role '{role}' only for a member of "
            f"that role or of groupml_admin", hint="Create the tenant as that role, or as a groupml_admin member.")
    got = session.query("INSERT INTO groupml.tenants (name, role) VALUES ($1, $2::oid::regrole) "
                        "ON CONFLICT (name) DO NOTHING RETURNING tenant_id", [name, rows[0]["oid"]],
                        ["text", "bigint"])
    if not got:
        raise DuplicateObjectError(f"Tenant '{name}' already exists", hint="Pick another tenant name.")
    return got[0]["tenant_id"]


# ---------------------------------------------------------------------------- submit_job
@sql_entry
def submit_job(tenant, source, features, label, candidates):
    session = backend_session()
    if source is None:
        raise InvalidParameterError("The 'source' value of submit_job must name a table or view; got null",
                                    hint="Pass source => 'my_table'.")
    # the only statements on the caller's search_path: the name as the caller means it, shown as
    # the caller would write it; every other statement runs pinned, by OID or qualified name
    oid = source_oid(session, source, "submit_job")
    named = session.query("SELECT $1::oid::regclass::text AS name", [oid], ["bigint"])[0]
    with session.pinned_search_path():
        return _submit_job(session, tenant, oid, named["name"], features, label, candidates)


def _submit_job(session, tenant, oid, shown, features, label, candidates):
    if tenant is None:
        raise InvalidParameterError("The 'tenant' value of submit_job must name a tenant; got null",
                                    hint="Create one with SELECT groupml.create_tenant('name');")
    # the role's plain name (role::text is already quoted, e.g. "Astro", and quote_ident would quote it again)
    trows = session.query("SELECT t.tenant_id, t.role::oid::bigint AS role_oid, "
                          "coalesce(r.rolname::text, t.role::text) AS role FROM groupml.tenants t "
                          "LEFT JOIN pg_catalog.pg_roles r ON r.oid = t.role WHERE t.name = $1", [tenant], ["text"])
    if not trows:
        if len(str(tenant)) > SHOWN_CHARS:
            raise UndefinedObjectError(f"Tenant '{clipped(tenant)}' does not exist",
                                       hint="Use one of SELECT name FROM groupml.tenants;")
        raise UndefinedObjectError(f"Tenant '{tenant}' does not exist (or belongs to a role you are not a member of)",
                                   hint="Create it with SELECT groupml.create_tenant('" + str(tenant).replace("'", "''")
                                   + "'); or use one of SELECT name FROM groupml.tenants;")
    t = trows[0]
    rel = session.query("SELECT c.oid::bigint AS oid, pg_catalog.format('%I.%I', n.nspname, c.relname) AS qname, "
                        "c.relkind::text AS kind, pg_catalog.has_table_privilege(c.oid, 'SELECT') AS caller_reads, "
                        "(SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = current_user)::bigint AS me, "
                        "current_user::text AS me_name, c.relpersistence::text AS persistence FROM "
                        "pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace "
                        "WHERE c.oid = $1::oid", [oid], ["bigint"])
    if not rel:                 # a regclass given by number, of no relation
        raise UndefinedTableError(f"The 'source' value of submit_job names no relation: {shown} does not exist",
                                  hint="Pass an existing table or view, by name.")
    rel = rel[0]
    rel["name"] = shown
    if rel["persistence"] == "t":
        what = "view" if rel["kind"] == "v" else "table"
        # its rows are stored with the job, but every training step checks that the source is
        # still there and readable by the job's role: once the session ends, every step would fail
        raise PrerequisiteStateError(
            f"submit_job cannot take the temporary {what} {shown}: the scheduler trains the job later, from other "
            f"sessions, and checks the source each time; the {what} ends with this session",
            hint="Copy it into a regular table (CREATE TABLE ... AS SELECT ...) and submit that.")
    check_source_kind(rel["name"], rel["kind"], "submit_job", hint="Submit the table (or a view over it) that holds "
                                                                   "the rows.")
    readable = session.query("SELECT pg_catalog.has_table_privilege($1::oid, $2::oid, 'SELECT') AS ok",
                             [t["role_oid"], rel["oid"]], ["bigint", "bigint"])[0]["ok"]
    if not readable:
        raise InsufficientPrivilegeError(
            f"permission denied for table {rel['name']}: the role '{t['role']}' of tenant '{tenant}' cannot SELECT it",
            hint=f"GRANT SELECT ON {rel['name']} TO {quote_ident(t['role'])};")
    if not rel["caller_reads"]:
        raise InsufficientPrivilegeError(
            f"permission denied for table {rel['name']}: submit_job reads the job's rows as the calling role "
            f"'{rel['me_name']}', which cannot SELECT it",
            hint=f"Submit the job as the tenant's role '{t['role']}' (SET ROLE {quote_ident(t['role'])};), or "
                 f"GRANT SELECT ON {rel['name']} TO {quote_ident(rel['me_name'])};")
    if int(rel["me"]) != int(t["role_oid"]) and not _member_of(session, int(t["role_oid"])):
        # a role outside the tenant (an administrator, a superuser) reads the rows with its own
        # rights: only a source that reads alike for every role and runs none of the source
        # owner's code is taken then. A member of the tenant's role (a team member) submits as
        # part of the tenant, as the tenant's role itself does.
        problem = reader_dependent(session, int(rel["oid"]), int(t["role_oid"]), int(rel["me"]))
        if problem:
            raise FeatureNotSupportedError(
                f"The source {rel['name']} of submit_job {problem}: read by the calling role '{rel['me_name']}' its "
                f"rows can differ from the tenant's, and code of the source would run with the calling role's rights",
                hint=f"Submit the job as the tenant's role or one of its members (SET ROLE {quote_ident(t['role'])}; "
                     f"needs membership), or submit a plain table of the rows.")
    cols = columns(session, int(rel["oid"]))
    if features is None or len(features) == 0:
        raise InvalidParameterError(f"The 'features' value of submit_job must name at least one column; got "
                                    f"{'null' if features is None else '{}'}", hint="Pass ARRAY['f1', 'f2', ...].")
    features = check_columns(cols, list(features), "features", rel["name"], numeric=True, owner="submit_job")
    label = check_columns(cols, [label], "label", rel["name"], numeric=True, owner="submit_job")[0]
    check_label_not_a_feature(label, features, "submit_job")
    task, cands = expand_candidates(parse_jsonb(candidates, "candidates", "submit_job"))
    # the rows are read here, as the calling role: whatever the source runs (a view's functions,
    # policies, casts) runs with that role's rights, and the coordinator trains on these rows
    packed = packed_row_expr(cols, features + [label])
    with reading_source(session, rel["name"], "submit_job"):    # its views may name their tables bare
        got = session.query(f"SELECT pg_catalog.count(*) AS n_rows, pg_catalog.string_agg("
                            f"{packed}, ''::bytea) AS block FROM {rel['qname']}")
    n_rows, block = int(got[0]["n_rows"]), bytes(got[0]["block"] or b"")
    usable = _check_job_rows(block, len(features), n_rows, rel["name"], label, task)
    for c in cands:     # the same check the definer helper repeats, before anything is written
        estimated_cost(c["family"], c["params"], usable, len(features))
    job_id = session.query(
        "INSERT INTO groupml.jobs (tenant_id, owner_role, source, features, label, task, metric, n_rows) "
        "VALUES ($1, $2::oid::regrole, $3::oid::regclass, $4, $5, $6, $7, $8) RETURNING job_id",
        [t["tenant_id"], t["role_oid"], rel["oid"], features, label, task, TASK_METRIC[task], n_rows],
        ["bigint", "bigint", "bigint", "text[]", "text", "text", "text", "bigint"])[0]["job_id"]
    session.query("SELECT groupml._tenancy_add_candidates($1, $2::jsonb, $3, $4)",
                  [job_id, json.dumps([{"model": c["family"], "params": c["params"]} for c in cands]), n_rows, block],
                  ["bigint", "text", "bigint", "bytea"])
    return job_id


def _member_of(session, role_oid: int) -> bool:
    """Whether the calling role is a member of role ``role_oid``, not merely a superuser (for
    whom pg_has_role is always true)."""
    return bool(session.query(
        "SELECT pg_catalog.pg_has_role($1::oid, 'MEMBER') AND NOT r.rolsuper AS m FROM pg_catalog.pg_roles r "
        "WHERE r.rolname = current_user", [role_oid], ["bigint"])[0]["m"])


def reader_dependent(session, relid: int, role_oid: int, caller_oid: int):
    """Why reading ``relid`` as role ``caller_oid`` may not give role ``role_oid``'s rows, or may
    run code the source's owner wrote, with the reader's rights; None when it may not.

    Used when another role (an administrator) submits for a tenant. A view can filter on
    current_user and call functions (which run as the reader); a foreign table, or a
    partition or inheritance child that is one, reads through a per-role user mapping; a
    table's row-level security policies run (their functions included) for every role they
    do not exempt -- a superuser, a BYPASSRLS role, the owner without FORCE -- so such a
    table is taken only when they exempt both roles. A materialized view or a plain table
    reads its stored rows alike for everyone, unless user-defined functions or operators are
    attached to it (:data:`_ATTACHED_CODE`): the planner can run those as it plans the read
    (an index expression calling such a function would run it with an administrator's rights)."""
    r = session.query(
        "SELECT c.relkind::text AS kind, c.relrowsecurity AS rls, "
        "(SELECT pg_catalog.count(*) FILTER (WHERE ro.rolsuper OR ro.rolbypassrls OR "
        "        (ro.oid = c.relowner AND NOT c.relforcerowsecurity)) "
        "   FROM pg_catalog.pg_roles ro WHERE ro.oid IN ($2::oid, $3::oid)) AS exempt, "
        "EXISTS (WITH RECURSIVE d(oid) AS (SELECT i.inhrelid FROM pg_catalog.pg_inherits i WHERE i.inhparent = c.oid "
        "        UNION SELECT i.inhrelid FROM pg_catalog.pg_inherits i JOIN d ON i.inhparent = d.oid) "
        "        SELECT 1 FROM d JOIN pg_catalog.pg_class k ON k.oid = d.oid WHERE k.relkind = 'f') AS foreign_part "
        "FROM pg_catalog.pg_class c WHERE c.oid = $1::oid", [relid, role_oid, caller_oid],
        ["bigint", "bigint", "bigint"])
    if not r:
        return "does not exist"
    r = r[0]
    if r["kind"] == "v":
        return "is a view"
    if r["kind"] == "f":
        return "is a foreign table"
    if r["foreign_part"]:
        return "has a foreign table among its partitions or children"
    if r["rls"] and int(r["exempt"]) < 2:
        return "has row-level security"
    code = session.query(_ATTACHED_CODE, [relid], ["bigint"])
    if code:
        return (f"has code of its own ({code[0]['what']}, in an index, partition key, statistics object, "
                f"constraint or default of it or of a partition or child), which PostgreSQL can run while it "
                f"plans the read")
    return None


#: The first user-defined function or operator (not built in: oid >= 16384) that an index
#: expression or predicate, a partition key, an extended-statistics expression, a constraint or
#: a column default of a relation or its partitions and children depends on. The planner
#: folds such expressions as it plans a read (an IMMUTABLE-labelled function with constant
#: arguments runs then), with the reader's rights.
_ATTACHED_CODE = (
    "WITH RECURSIVE rels(oid) AS (SELECT $1::oid UNION SELECT i.inhrelid FROM pg_catalog.pg_inherits i "
    "    JOIN rels ON i.inhparent = rels.oid), "
    "objs(classid, objid) AS ("
    "    SELECT 'pg_catalog.pg_class'::regclass::oid, oid FROM rels "
    "    UNION ALL SELECT 'pg_catalog.pg_class'::regclass::oid, x.indexrelid FROM pg_catalog.pg_index x "
    "        JOIN rels ON x.indrelid = rels.oid "
    "    UNION ALL SELECT 'pg_catalog.pg_statistic_ext'::regclass::oid, s.oid FROM pg_catalog.pg_statistic_ext s "
    "        JOIN rels ON s.stxrelid = rels.oid "
    "    UNION ALL SELECT 'pg_catalog.pg_constraint'::regclass::oid, c.oid FROM pg_catalog.pg_constraint c "
    "        JOIN rels ON c.conrelid = rels.oid "
    "    UNION ALL SELECT 'pg_catalog.pg_attrdef'::regclass::oid, a.oid FROM pg_catalog.pg_attrdef a "
    "        JOIN rels ON a.adrelid = rels.oid) "
    "SELECT CASE WHEN d.refclassid = 'pg_catalog.pg_proc'::regclass THEN 'function ' || d.refobjid::regprocedure::text "
    "            ELSE 'operator ' || d.refobjid::regoperator::text END AS what "
    "FROM pg_catalog.pg_depend d JOIN objs o ON d.classid = o.classid AND d.objid = o.objid "
    "WHERE d.refclassid IN ('pg_catalog.pg_proc'::regclass, 'pg_catalog.pg_operator'::regclass) "
    "AND d.refobjid >= 16384 ORDER BY 1 LIMIT 1")


# ---------------------------------------------------------------------------- candidates (SECURITY DEFINER)
def usable_rows(block: bytes, d: int) -> int:
    """Rows of a job's packed block that training uses (every value finite)."""
    return int(np.isfinite(unpack_rows(block, d + 1)).all(axis=1).sum())


def _check_job_rows(block: bytes, d: int, n_rows: int, name: str, label: str, task: str) -> int:
    """A job whose rows can only fail later is refused at submission: no usable row (each has
    a NULL), a classification label other than 0/1, or one label value only (run_scheduler
    would record every candidate as failed). Returns the usable rows' count (:func:`usable_rows`)."""
    rows = unpack_rows(block, d + 1)
    usable = rows[np.isfinite(rows).all(axis=1)]
    if usable.shape[0] == 0:
        raise DataError(f"The source {name} of submit_job has no usable rows ({n_rows} rows; every one has a NULL, "
                        f"NaN or infinite feature or label)", hint="Submit a table (or view) with complete rows.")
    labels = usable[:, -1]
    other = labels[~np.isin(labels, (0.0, 1.0))]
    if task == "classification" and other.size:
        bad = float(other[0])
        raise DataError(f"The label column '{label}' of submit_job must hold 0 or 1 for classifiers; got "
                        f"{shown(int(bad) if bad.is_integer() else bad)}",
                        hint="Code the label as 0/1 (e.g. (label = 'yes')::int), or submit regressors (linear, "
                             "mlp_regressor, lightgbm_regressor).")
    if np.all(labels == labels[0]):
        # every candidate would fail, and a job without a model keeps the scheduler's
        # priority: its failures would have held up every other job's first model
        value = float(labels[0])
        what = (f"one class only (every usable row has label {shown(int(value))})" if task == "classification"
                else f"the same label in every usable row ({shown(int(value) if value.is_integer() else value)})")
        raise DataError(f"The label column '{label}' of submit_job has {what}: there is nothing to learn",
                        hint="Submit rows with both classes (or, for regressors, labels that vary).")
    return int(usable.shape[0])


@sql_entry
def add_job_candidates(job_id, candidates, n_rows, block):
    """Body of groupml._tenancy_add_candidates: runs with the extension owner's rights.

    Tenants cannot write candidates themselves: their keys and estimated costs steer the shared
    scheduler. This adds the candidates of a job that *this transaction* inserted (so it was
    inserted through row-level security by a member of the job's role: nobody can add
    candidates to another's job), once, with keys and costs computed here from the job's rows,
    and stores those rows (``block``, packed by submit_job as the calling role) for the
    coordinator. It runs no tenant code: it reads only groupml's tables, never a source.
    """
    session = backend_session()
    owner = "submit_job"
    hint = "Call groupml.submit_job(...); it adds the candidates in the transaction that inserts the job."
    if job_id is None or n_rows is None or block is None:
        raise InvalidParameterError("_tenancy_add_candidates needs a job id, a row count and the rows; got null",
                                    hint=hint)
    rows = session.query(
        "SELECT j.owner_role::oid::bigint AS role_oid, j.features, j.label, j.task, j.metric, "
        "EXISTS (SELECT 1 FROM groupml.candidates c WHERE c.job_id = j.job_id) "
        "OR EXISTS (SELECT 1 FROM groupml.job_data d WHERE d.job_id = j.job_id) AS has_candidates, "
        "j.submitted_xact = pg_catalog.pg_current_xact_id() AS ours "
        "FROM groupml.jobs j WHERE j.job_id = $1", [job_id], ["bigint"])
    # the job row must be one this transaction inserted (submitted_xact defaults to the
    # inserting transaction's id, 64 bits, never reused; tenants cannot UPDATE jobs). The same
    # message whether the job exists or not, so this tells nobody about other tenants' jobs.
    if not rows or not rows[0]["ours"]:
        raise InsufficientPrivilegeError(f"permission denied: job {job_id} was not inserted by this transaction; "
                                         f"a job's candidates are added by the submit_job call that creates it",
                                         hint=hint)
    j = rows[0]
    if j["has_candidates"]:
        raise PrerequisiteStateError(f"Job {job_id} already has candidates; a job's candidates are added once",
                                     hint="Submit another job with groupml.submit_job(...).")
    features = list(j["features"] or [])
    # a job row written by hand gets the checks submit_job makes
    if not features or len(set(features)) != len(features) or j["label"] in features \
            or any(not isinstance(f, str) or not f for f in features):
        raise InvalidParameterError(f"Job {job_id} must name distinct feature columns, without its label; got "
                                    f"features {features}, label {j['label']!r}", hint=hint)
    if j["metric"] != TASK_METRIC.get(j["task"]):
        raise InvalidParameterError(f"The metric of job {job_id} must be {TASK_METRIC.get(j['task'])!r} for a "
                                    f"{j['task']} job; got {j['metric']!r}", hint=hint)
    width = 8 * (len(features) + 1)
    block = bytes(block)
    n_rows = check_number(n_rows, "n_rows", "_tenancy_add_candidates", ge=len(block) // width, integer=True,
                          hint=hint)
    if len(block) % width:
        raise DataError(f"The rows of job {job_id} must be packed {len(features) + 1} doubles each; got "
                        f"{len(block)} bytes", hint=hint)
    task, cands = expand_candidates(parse_jsonb(candidates, "candidates", owner), owner)
    if task != j["task"]:
        raise InvalidParameterError(f"The 'candidates' value of {owner} must be {j['task']} models for job {job_id}; "
                                    f"got {task} models", hint="Submit one job per task.")
    # the rows a candidate trains on: those with a NULL (not packed) or NaN/infinite value are skipped
    usable = usable_rows(block, len(features))
    costs = [estimated_cost(c["family"], c["params"], usable, len(features)) for c in cands]
    session.query("UPDATE groupml.jobs SET n_rows = $2 WHERE job_id = $1", [job_id, n_rows], ["bigint", "bigint"])
    session.query("INSERT INTO groupml.job_data (job_id, owner_role, n_rows, block) "
                  "VALUES ($1, $2::oid::regrole, $3, $4)", [job_id, j["role_oid"], n_rows, block],
                  ["bigint", "bigint", "bigint", "bytea"])
    session.query(
        "INSERT INTO groupml.candidates (job_id, owner_role, key, family, params, estimated_cost) "
        "SELECT $1, $2::oid::regrole, k, f, p::jsonb, c FROM unnest($3::text[], $4::text[], $5::text[], $6::float8[]) "
        "AS u(k, f, p, c)",
        [job_id, j["role_oid"], [c["key"] for c in cands], [c["family"] for c in cands],
         [json.dumps(c["params"]) for c in cands], costs],
        ["bigint", "bigint", "text[]", "text[]", "text[]", "float8[]"])
    return len(cands)


# ---------------------------------------------------------------------------- run_scheduler
def _tenant_name(job_id: int) -> str:
    return f"job:{job_id}"


def _job_of(tenant: str) -> int:
    return int(tenant.split(":", 1)[1])


def _load_scheduler(session, policy: str, cost_aware: bool, cached=None):
    """Lock the state row and return (scheduler, steps) with every submitted job registered.

    ``cached`` is (updated_at, scheduler) as saved by this call's previous step: when the row
    is unchanged since, the in-memory scheduler is reused (it equals from_state of the saved
    state; rebuilding costs ~0.5 s at 50 jobs x 100 candidates and 2000 outcomes).
    """
    # one coordinator step at a time, also before the state row exists (a first run)
    session.query("SELECT pg_catalog.pg_advisory_xact_lock($1)", [SCHEDULER_LOCK], ["bigint"])
    rows = session.query("SELECT steps, policy, cost_aware, updated_at::text AS updated_at "
                         "FROM groupml.scheduler_state WHERE name = $1 FOR UPDATE", [STATE_NAME], ["text"])
    if rows:
        same_config = rows[0]["policy"] == policy and rows[0]["cost_aware"] == cost_aware
        if same_config and cached is not None and cached[0] == rows[0]["updated_at"]:
            sched = cached[1]
        else:
            state = json.loads(session.query("SELECT state::text AS state FROM groupml.scheduler_state "
                                             "WHERE name = $1", [STATE_NAME], ["text"])[0]["state"])
            if same_config:
                sched = Scheduler.from_state(state)
            else:  # same history, another configuration: replay the outcomes under the new one
                sched = Scheduler.replay(state, policy=policy, cost_aware=cost_aware)
        steps = int(rows[0]["steps"])
    else:
        sched = Scheduler(policy, cost_aware=cost_aware, refresh_every=PRIOR_REFRESH, quality_max=QUALITY_MAX)
        steps = None  # rebuilt below from the tables (first run, or the state row was deleted)
    known = set(sched.tenants)
    jobs = session.query("SELECT job_id FROM groupml.jobs ORDER BY job_id")
    new = [j["job_id"] for j in jobs if _tenant_name(j["job_id"]) not in known]
    if new:
        cands = session.query("SELECT job_id, key, estimated_cost FROM groupml.candidates "
                              "WHERE job_id = ANY($1) ORDER BY job_id, candidate_id", [new], ["bigint[]"])
        by_job: Dict[int, List[Tuple[str, float]]] = {}
        for c in cands:
            by_job.setdefault(c["job_id"], []).append((c["key"], c["estimated_cost"]))
        for job_id in new:
            if job_id in by_job:
                keys, costs = zip(*by_job[job_id])
                sched.add_tenant(_tenant_name(job_id), list(keys), list(costs))
    if steps is None:
        # Outcomes already in the tables (the state row was deleted) are replayed in order, so
        # no candidate is ever trained twice.
        steps = 0
        for o in session.query("SELECT o.job_id, c.key, o.quality, o.cost_seconds, o.step FROM groupml.observations o "
                               "JOIN groupml.candidates c USING (candidate_id) ORDER BY o.step, o.observation_id"):
            name = _tenant_name(o["job_id"])
            if name in sched.tenants:
                if o["quality"] is None:
                    sched.observe_failure(name, o["key"], o["cost_seconds"])
                else:
                    sched.observe(name, o["key"], o["quality"], o["cost_seconds"])
            steps = max(steps, int(o["step"]))
        # candidates trained (or failed) whose observation a tenant deleted stay done: rebuilt
        # from the observations alone, they would be trained again
        done = session.query("SELECT job_id, key FROM groupml.candidates WHERE status <> 'pending' "
                             "ORDER BY job_id, candidate_id")
        for c in done:
            name = _tenant_name(c["job_id"])
            if name in sched.tenants:
                sched.retire(name, [c["key"]])
    return sched, steps


def _save_scheduler(session, sched, steps: int):
    """Write the state; returns (updated_at, scheduler) for the next step's cache."""
    got = session.query(
        "INSERT INTO groupml.scheduler_state (name, policy, cost_aware, state, steps) "
        "VALUES ($1, $2, $3, $4::jsonb, $5) ON CONFLICT (name) DO UPDATE SET policy = EXCLUDED.policy, "
        "cost_aware = EXCLUDED.cost_aware, state = EXCLUDED.state, steps = EXCLUDED.steps, "
        "updated_at = clock_timestamp() RETURNING updated_at::text AS updated_at",
        [STATE_NAME, sched.policy_name, sched.cost_aware, json.dumps(sched.state_dict(), allow_nan=False), steps],
        ["text", "text", "boolean", "text", "bigint"])
    return got[0]["updated_at"], sched


def _source_problem(session, job_id: int):
    """Why a job may not be trained now, or None: its source was dropped, or its role may no
    longer SELECT it. Checked before every step (catalog facts only; the rows are cached), so a
    revocation takes effect at the next step, not at the next call of run_scheduler."""
    got = session.query(
        "SELECT j.source::oid::bigint AS relid, "
        "EXISTS (SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = j.source::oid) AS rel_exists, "
        "pg_catalog.has_table_privilege(j.owner_role::oid, j.source::oid, 'SELECT') AS readable "
        "FROM groupml.jobs j WHERE j.job_id = $1", [job_id], ["bigint"])
    if not got:
        return f"job {job_id} does not exist"
    g = got[0]
    if not g["rel_exists"]:
        return f"the source relation of job {job_id} (oid {g['relid']}) no longer exists"
    if not g["readable"]:
        name = session.query("SELECT pg_catalog.format('%I.%I', n.nspname, c.relname) AS n FROM pg_catalog.pg_class c "
                             "JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1::oid",
                             [g["relid"]], ["bigint"])[0]["n"]
        return f"the job's role may no longer SELECT from {name}"
    return None


def _load_data(session, job_id: int, n_features: int):
    """(X, y, n_skipped) of a job, or an error text: the rows submit_job read as the submitting
    role (``groupml.job_data``)."""
    got = session.query("SELECT n_rows, block FROM groupml.job_data WHERE job_id = $1", [job_id], ["bigint"])
    if not got:
        return None, f"job {job_id} has no stored rows (its candidates were not added by submit_job)"
    arr = unpack_rows(bytes(got[0]["block"]), n_features + 1)
    return (np.ascontiguousarray(arr[:, :n_features]), arr[:, n_features].copy(),
            int(got[0]["n_rows"]) - arr.shape[0]), None


# Numerical trouble in a learner is a failed candidate, not a failed run.
TRAINING_ERRORS = (GroupmlError, ValueError, ArithmeticError, np.linalg.LinAlgError)


def _grid_value(value: Any) -> Any:
    """A parameter value as a one-value grid axis holds it: search specs hold scalars, so a
    list (an MLP's layer widths) goes in its text form, [64, 32] -> "64,32"."""
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return value


def load_library(family: str, interrupt_check=None) -> None:
    """Import the family's library (torch, LightGBM) if this backend has not yet: a candidate's
    measured cost is its training, not the first import (1.7-2.6 s of a new backend's first MLP
    step; every pg_cron tick is a new backend). A missing library is the candidate's error.
    ``interrupt_check`` (the session's cancel check) keeps a cancel noticed during torch's import."""
    from ..learners import access_pattern

    try:
        pattern = access_pattern(family)
        if pattern == "sequential":
            from ..learners import mlp
            mlp.warm_up(interrupt_check)
        elif pattern == "sampling":
            from ..learners import lgb_module
            lgb_module()
    except GroupmlError:
        pass


def train_candidate(data, family: str, params: Dict[str, Any], metric: str, check_cancel=None):
    """Train one configuration with the foundation's fit_group; (quality, model bytes, error)."""
    from ..fitting import fit_group

    X, y, n_skipped = data
    try:
        search = {"method": "grid", "space": {k: [_grid_value(v)] for k, v in params.items()}} if params else {}
        result = fit_group(X, y, family, search, {"metric": metric},
                           n_skipped=n_skipped, interrupt_check=check_cancel)
    except TRAINING_ERRORS as exc:
        return None, None, (exc.message if isinstance(exc, GroupmlError) else f"{type(exc).__name__}: {exc}")
    if result.status != "ok" or result.score is None or not math.isfinite(result.score):
        return None, None, f"{result.status}: {result.message or 'no finite validation score'}"
    return float(result.score), result.model, None


@sql_entry
@pinned
def run_scheduler(max_steps, max_seconds, policy, cost_aware):
    """The coordinator: validate, bring every job's best up to date, then step until
    ``max_steps`` trainings, ``max_seconds`` or every candidate of every job is done."""
    session = backend_session()
    _check_scheduler_args(max_steps, max_seconds, policy, cost_aware)
    _require_admin(session, "run_scheduler")
    _refresh_best(session)
    session.commit()

    started = time.time()
    cache: Dict[int, Any] = {}
    cached = None
    done_steps = 0
    while max_steps is None or done_steps < max_steps:
        if max_seconds is not None and time.time() - started >= max_seconds:
            break
        session.check_cancel()
        outcome, cached = _scheduler_step(session, policy, cost_aware, cached, cache)
        if outcome == STEP_DONE:
            break
        if outcome == STEP_TRAINED:
            done_steps += 1


def _check_scheduler_args(max_steps, max_seconds, policy, cost_aware) -> None:
    """run_scheduler's argument checks (before anything is read or written)."""
    owner = "run_scheduler"
    check_choice(policy, "policy", owner, sorted(POLICIES),
                 hint="hybrid (default) and greedy are the ease.ml policies; eirate is ours (expected improvement "
                      "per unit of cost); roundrobin, random and fcfs are baselines.")
    if cost_aware is None:
        raise InvalidParameterError("The 'cost_aware' value of run_scheduler must be true or false; got null",
                                    hint="Omit it for the default (true).")
    check_bool(cost_aware, "cost_aware", owner)
    if max_steps is not None:
        check_number(max_steps, "max_steps", owner, ge=1, integer=True, hint="Omit it to run until done.")
    if max_seconds is not None:
        check_number(max_seconds, "max_seconds", owner, gt=0, hint="Omit it to run until done.")


def _refresh_best(session) -> None:
    """Set every job's best from the observations there are: a tenant may have deleted the best
    one of a finished job, and best_* would name a deleted row (its job gets no further step)."""
    session.query(
        "UPDATE groupml.jobs j SET (best_observation_id, best_quality) = (b.observation_id, b.quality) "
        "FROM groupml.jobs j2 LEFT JOIN LATERAL (SELECT o.observation_id, o.quality FROM groupml.observations o "
        "WHERE o.job_id = j2.job_id AND o.status = 'ok' ORDER BY o.quality DESC, o.observation_id LIMIT 1) b "
        "ON true WHERE j.job_id = j2.job_id AND j.best_observation_id IS DISTINCT FROM b.observation_id")


#: What one coordinator step did (:func:`_scheduler_step`).
STEP_DONE, STEP_WITHDRAWN, STEP_TRAINED = "done", "withdrawn", "trained"


def _scheduler_step(session, policy: str, cost_aware: bool, cached, cache: Dict[int, Any]):
    """One coordinator step under the step lock, committed; returns (outcome, cached).

    The outcome is :data:`STEP_DONE` (no candidate of any job is left), :data:`STEP_WITHDRAWN`
    (the candidate picked, or its job, was deleted by its tenant: what is gone is withdrawn,
    nothing trains, and the step counts neither against max_steps nor as an outcome) or
    :data:`STEP_TRAINED` (an observation was recorded, a failure included). ``cached`` is the
    state's cache entry (:func:`_save_scheduler`); ``cache`` holds each job's rows, by job id.
    """
    with _step_lock(session):
        sched, steps = _load_scheduler(session, policy, cost_aware, cached)
        step = sched.next_step()
        if step is None:
            _save_scheduler(session, sched, steps)
            session.commit()
            session.notice(f"groupml: run_scheduler: every candidate of every job is done ({steps} steps)")
            return STEP_DONE, cached
        tenant, key = step
        job_id = _job_of(tenant)
        c, given_up = _claim_candidate(session, job_id, key)
        if c is None:
            left = {r["key"] for r in session.query("SELECT key FROM groupml.candidates WHERE job_id = $1",
                                                    [job_id], ["bigint"])}
            gone = sched.retire(tenant, [k for k in sched.untried(tenant) if k not in left] or [key])
            cached = _save_scheduler(session, sched, steps)
            session.commit()
            session.notice(f"groupml: job {job_id}: {len(gone)} deleted candidate(s) withdrawn")
            return STEP_WITHDRAWN, cached
        return STEP_TRAINED, _train_step(session, sched, steps, policy, tenant, key, job_id, c, cache, given_up)


def _claim_candidate(session, job_id: int, key: str):
    """(candidate, given_up) for the step that trains ``key`` of job ``job_id``: the candidate
    row locked (:func:`_lock_candidate`; None when it or its job is gone), and the reason to
    fail it without training (:func:`_interrupted_too_often`) or None.

    An attempt that will train is counted before it trains, and committed: a step that never
    ends (a cancel, a statement_timeout, a crash of the backend: the OOM killer) has counted
    its attempt, so such a candidate is not retried on every call for ever."""
    c = _lock_candidate(session, job_id, key)
    given_up = None if c is None else _interrupted_too_often(session, c["attempts"])
    if c is not None and given_up is None:
        session.query("UPDATE groupml.candidates SET attempts = attempts + 1 WHERE candidate_id = $1",
                      [c["candidate_id"]], ["bigint"])
        session.commit()
        c = _lock_candidate(session, job_id, key)     # the commit ended the row locks
    return c, given_up


def _lock_candidate(session, job_id: int, key: str):
    """The candidate ``key`` of job ``job_id`` with its job's features and metric, both rows
    locked FOR KEY SHARE until the next commit (a tenant deleting them waits for it); None
    when either is gone."""
    rows = session.query(
        "SELECT c.candidate_id, c.family, c.params::text AS params, c.attempts, j.features, j.metric "
        "FROM groupml.candidates c JOIN groupml.jobs j USING (job_id) WHERE c.job_id = $1 AND c.key = $2 "
        "FOR KEY SHARE OF c, j", [job_id, key], ["bigint", "text"])
    return rows[0] if rows else None


@contextlib.contextmanager
def _step_lock(session):
    """One coordinator step at a time, in every session: a step commits before it trains (its
    attempt), so the lock is session-level, held until the step's last commit and released
    however the step ends (break and continue included)."""
    session.query("SELECT pg_catalog.pg_advisory_lock($1)", [SCHEDULER_LOCK], ["bigint"])
    try:
        yield
    except BaseException:
        _release_step_lock(session, quiet=True)
        raise
    _release_step_lock(session, quiet=False)


def _release_step_lock(session, *, quiet: bool) -> None:
    """Release run_scheduler's step lock. ``quiet``: an error (a cancel included) is
    propagating and is what the caller must see; the session then keeps the lock only if
    even this statement fails, until it ends."""
    try:
        session.query("SELECT pg_catalog.pg_advisory_unlock($1)", [SCHEDULER_LOCK], ["bigint"])
    except Exception:  # noqa: BLE001 - only while another error propagates, which is raised instead
        if not quiet:
            raise


def _train_step(session, sched, steps: int, policy: str, tenant: str, key: str, job_id: int, c, cache,
                given_up: Optional[str]):
    """Train candidate ``c`` of ``job_id`` (or record why it cannot be: ``given_up``, the
    source, the data), record the observation, the job's best and the scheduler's state, and
    commit; returns the state's cache entry (see :func:`_save_scheduler`)."""
    t0 = datetime.datetime.now(datetime.timezone.utc)
    data, error = None, given_up
    if error is None:
        error = _source_problem(session, job_id)
    if error is None:
        if job_id not in cache:
            cache[job_id] = _load_data(session, job_id, len(c["features"]))
        data, error = cache[job_id]
    if error is None:
        load_library(c["family"], session.check_cancel)
    clock = time.perf_counter()
    quality = model = None
    if error is None:
        quality, model, error = train_candidate(data, c["family"], json.loads(c["params"]), c["metric"],
                                                session.check_cancel)
    seconds = time.perf_counter() - clock
    t1 = datetime.datetime.now(datetime.timezone.utc)
    status = "ok" if error is None else "failed"
    session.query(
        "INSERT INTO groupml.observations (job_id, candidate_id, owner_role, step, policy, status, quality, "
        "cost_seconds, error, started_at, finished_at, model) SELECT $1, $2, j.owner_role, $3, $4, $5, $6, $7, "
        "$8, $9::timestamptz, $10::timestamptz, $11 FROM groupml.jobs j WHERE j.job_id = $1",
        [job_id, c["candidate_id"], steps + 1, policy, status, quality, seconds, error, t0.isoformat(),
         t1.isoformat(), model],
        ["bigint", "bigint", "bigint", "text", "text", "float8", "float8", "text", "text", "text", "bytea"])
    session.query("UPDATE groupml.candidates SET status = $2 WHERE candidate_id = $1",
                  [c["candidate_id"], status], ["bigint", "text"])
    if error is None:
        sched.observe(tenant, key, quality, seconds)
    else:
        sched.observe_failure(tenant, key, seconds)
    # the job's best from the observations there are (a tenant may have deleted some);
    # the first of equal qualities stays the best
    session.query(
        "UPDATE groupml.jobs j SET (best_observation_id, best_quality) = (SELECT o.observation_id, o.quality "
        "FROM groupml.observations o WHERE o.job_id = j.job_id AND o.status = 'ok' "
        "ORDER BY o.quality DESC, o.observation_id LIMIT 1) WHERE j.job_id = $1", [job_id], ["bigint"])
    cached = _save_scheduler(session, sched, steps + 1)
    session.commit()
    session.notice(f"groupml: step {steps + 1}: job {job_id} {key}: "
                   + (f"{c['metric']} {quality:.4f}" if error is None else f"failed ({error})")
                   + f", {seconds:.3f} s")
    return cached


def _interrupted_too_often(session, attempts: int) -> Optional[str]:
    """The reason to fail a pending candidate whose training was started :data:`MAX_ATTEMPTS`
    times (candidates.attempts, counted and committed as each training starts: a pending
    candidate's attempts all ended without an outcome), else None. Without it a candidate that
    trains longer than the database's statement_timeout, or that crashes its backend, would be
    tried again on every call (and every pg_cron tick), for ever, and nothing after it in the
    schedule would ever train."""
    if attempts < MAX_ATTEMPTS:
        return None
    timeout = session.query("SELECT pg_catalog.current_setting('statement_timeout') AS t")[0]["t"]
    timeout = "" if timeout in ("0", "0ms") else f"; statement_timeout is {timeout} here"
    return (f"its training was interrupted {attempts} times (a cancel, a statement_timeout or the end of its "
            f"backend{timeout}); given up")


# ---------------------------------------------------------------------------- pg_cron
@sql_entry
@pinned
def schedule_with_cron(schedule, max_seconds, policy, cost_aware, database, job_name):
    session = backend_session()
    owner = "schedule_with_cron"
    _check_cron_args(schedule, max_seconds, policy, cost_aware, database, job_name)
    _require_admin(session, owner)
    here = cron_prerequisites(session, database, job_name)
    command = (f"CALL groupml.run_scheduler(max_seconds => {float(max_seconds)!r}, policy => {quote_literal(policy)}, "
               f"cost_aware => {'true' if cost_aware else 'false'})")
    return cron_schedule(session, owner, here, job_name, schedule, command, database)


def cron_schedule(session, owner: str, here: bool, job_name: str, schedule: str, command: str, database: str) -> int:
    """pg_cron's job ``job_name`` running ``command`` on ``schedule`` (in ``database`` unless
    ``here``), created or updated; its jobid. pg_cron's refusals in ``owner``'s words."""
    if here:
        got, failed = session.query_or_error("SELECT cron.schedule($1, $2, $3) AS jobid", [job_name, schedule, command],
                                             ["text", "text", "text"])
    else:
        got, failed = session.query_or_error("SELECT cron.schedule_in_database($1, $2, $3, $4) AS jobid",
                                             [job_name, schedule, command, database], ["text", "text", "text", "text"])
    if failed is not None:      # pg_cron's own refusal, e.g. 'invalid schedule: ...' (22023)
        if failed[0] == "22023":
            raise InvalidParameterError(
                f"The 'schedule' value of {owner} is not a schedule pg_cron accepts; got {shown(schedule)} "
                f"(pg_cron: {failed[1]})",
                hint="Five cron fields (minute hour day month weekday), e.g. '*/5 * * * *', or '[1-59] seconds'.")
        raise PassedOnError(failed[0], f"{owner}: pg_cron refused the job: {failed[1]}",
                            hint="See pg_cron's documentation for cron.schedule.")
    return got[0]["jobid"]


def _check_cron_args(schedule, max_seconds, policy, cost_aware, database, job_name) -> None:
    """schedule_with_cron's argument checks (before anything is read)."""
    owner = "schedule_with_cron"
    if schedule is None or not str(schedule).strip() or len(str(schedule)) > MAX_CRON_TEXT:
        raise InvalidParameterError(f"The 'schedule' value of {owner} must be a cron schedule of at most "
                                    f"{MAX_CRON_TEXT} characters; got {shown(schedule)}",
                                    hint="For example '* * * * *' (every minute) or '*/5 * * * *'.")
    check_number(max_seconds, "max_seconds", owner, gt=0, le=86400,
                 hint="Give each run less time than the schedule's interval, e.g. 50 for every minute.")
    check_choice(policy, "policy", owner, sorted(POLICIES), hint="hybrid is the default.")
    check_bool(cost_aware, "cost_aware", owner)
    if not job_name or len(job_name) > MAX_CRON_TEXT:
        raise InvalidParameterError(f"The 'job_name' value of {owner} must be a non-empty text of at most "
                                    f"{MAX_CRON_TEXT} characters; got {shown(job_name)}",
                                    hint="Omit it for 'groupml_scheduler'.")
    if not database:
        raise InvalidParameterError(f"The 'database' value of {owner} must name a database; got {shown(database)}",
                                    hint="Omit it for the current database.")


def cron_prerequisites(session, database: str, job_name: str, owner: str = "schedule_with_cron") -> bool:
    """Check what ``owner`` (schedule_with_cron, schedule_retraining) needs before it asks
    pg_cron: the database exists, pg_cron is installed in this one, the calling role may
    schedule there, and no job of that name of the role runs in another database. Returns
    whether the job runs in this database."""
    if not session.query("SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_database WHERE datname = $1) AS ok",
                         [database], ["text"])[0]["ok"]:
        raise InvalidCatalogNameError(f"The 'database' value of {owner} names no database: {shown(database)} does "
                                      f"not exist", hint="Omit it for the current database, or see SELECT datname "
                                                         "FROM pg_database;")
    # pg_settings leaves out what this role may not read (current_setting would raise 42501)
    info = session.query(
        "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'pg_cron') AS installed, "
        "current_database() AS db, (SELECT setting FROM pg_catalog.pg_settings WHERE name = "
        "'shared_preload_libraries') AS preload, "
        "(SELECT setting FROM pg_catalog.pg_settings WHERE name = 'cron.database_name') AS cron_db")[0]
    if not info["installed"]:
        raise PrerequisiteStateError(f"pg_cron is not installed in database '{info['db']}'",
                                     hint=_cron_missing_hint(info["db"], info["preload"], info["cron_db"], owner))
    # pg_cron lets a non-superuser schedule in its own database once granted USAGE on its
    # schema; schedule_in_database (another database) it gives to superusers only
    here = database == info["db"]
    rights = session.query(
        "SELECT pg_catalog.has_schema_privilege('cron', 'USAGE') AS usage, "
        "coalesce((SELECT pg_catalog.bool_or(pg_catalog.has_function_privilege(p.oid, 'EXECUTE')) "
        "          FROM pg_catalog.pg_proc p WHERE p.pronamespace = 'cron'::regnamespace "
        "          AND p.proname = 'schedule_in_database'), false) AS elsewhere")[0]
    role = session.query("SELECT current_user AS r")[0]["r"]
    if not rights["usage"]:
        raise InsufficientPrivilegeError(
            f"permission denied for schema cron: {owner} needs USAGE on pg_cron's schema",
            hint=f"Have a superuser run: GRANT USAGE ON SCHEMA cron TO {quote_ident(role)};")
    if not here and not rights["elsewhere"]:
        raise InsufficientPrivilegeError(
            f"permission denied for function cron.schedule_in_database: {owner} needs it to schedule in database "
            f"'{database}' from '{info['db']}'",
            hint=f"pg_cron grants it to superusers only: have one run GRANT EXECUTE ON FUNCTION "
                 f"cron.schedule_in_database(text, text, text, text, text, boolean) TO {quote_ident(role)}; or call "
                 f"{owner} as a superuser.")
    # pg_cron updates a job of the same name in place but never moves it to another database:
    # the job would keep running in the old one with the new schedule, and this one get none
    other = session.query("SELECT jobid, database FROM cron.job WHERE jobname = $1 AND username = current_user "
                          "AND database <> $2", [job_name, database], ["text", "text"])
    if other:
        raise DuplicateObjectError(
            f"The cron job '{job_name}' already runs in database '{other[0]['database']}'; pg_cron cannot move it "
            f"to database '{database}'",
            hint=f"Give this database's job its own name, e.g. job_name => {quote_literal(job_name + '_' + database)}, "
                 f"or remove the other with SELECT cron.unschedule({other[0]['jobid']});")
    return here


def _cron_missing_hint(db: str, preload: Optional[str], cron_db: Optional[str], owner: str = "schedule_with_cron") -> str:
    """What to do when pg_cron is not installed in database ``db``, given the server's
    shared_preload_libraries (None: the role may not read it) and cron.database_name."""
    if preload is None:         # a role that may not read the setting (not a superuser)
        return ("CREATE EXTENSION pg_cron; in the database pg_cron runs in (its cron.database_name setting; a "
                "superuser can see it, and must add pg_cron to shared_preload_libraries if it is missing), "
                f"install groupml there, and call groupml.{owner}(..., database => '{db}') from it.")
    if "pg_cron" not in preload:
        return ("Add pg_cron to shared_preload_libraries in postgresql.conf (and set cron.database_name), "
                "restart the server, then CREATE EXTENSION pg_cron; in that database (Debian/Ubuntu: "
                "apt-get install postgresql-15-cron).")
    return (f"pg_cron runs in database '{cron_db}' (cron.database_name): CREATE EXTENSION pg_cron; "
            f"there, install groupml there too and call groupml.{owner}(..., database => "
            f"'{db}') from it.")


# ---------------------------------------------------------------------------- infer
@sql_entry
def infer(job_id, features):
    from .predict import labels, load_cached, one_row

    session = backend_session()
    if job_id is None:
        raise InvalidParameterError("The 'job_id' value of infer must be a job id; got null",
                                    hint="See SELECT job_id FROM groupml.jobs;")
    # the recorded best model, or -- when its tenant deleted that observation -- the best left
    rows = session.query(
        # not pinned (one call per row): its operators are named with their schema instead
        "SELECT (SELECT o.model FROM groupml.observations o WHERE o.job_id OPERATOR(pg_catalog.=) j.job_id "
        "        AND o.status OPERATOR(pg_catalog.=) 'ok'::text "
        "        ORDER BY o.observation_id OPERATOR(pg_catalog.=) j.best_observation_id DESC, o.quality DESC, "
        "        o.observation_id LIMIT 1) AS model FROM groupml.jobs j WHERE j.job_id OPERATOR(pg_catalog.=) $1",
        [job_id], ["bigint"])
    if not rows:
        raise UndefinedObjectError(f"Job {job_id} does not exist (or belongs to a tenant you are not a member of)",
                                   hint="See SELECT job_id, tenant_id, source FROM groupml.jobs;")
    if rows[0]["model"] is None:
        # what its candidates say (a tenant may have deleted the observations themselves)
        got = session.query(
            "SELECT pg_catalog.count(*) FILTER (WHERE c.status OPERATOR(pg_catalog.=) 'pending'::text) AS pending, "
            "pg_catalog.count(*) FILTER (WHERE c.status OPERATOR(pg_catalog.=) 'failed'::text) AS failed, "
            "pg_catalog.count(*) FILTER (WHERE c.status OPERATOR(pg_catalog.=) 'ok'::text) AS ok "
            "FROM groupml.candidates c WHERE c.job_id OPERATOR(pg_catalog.=) $1", [job_id], ["bigint"])[0]
        pending, failed, ok = got["pending"], got["failed"], got["ok"]
        rest = (f"{pending} other candidate(s) are still to be trained." if pending else
                "It has no candidate left: submit a job with other candidates.")
        if not failed and not ok:
            hint = "Run the coordinator first: CALL groupml.run_scheduler(max_steps => 10);"
        elif not ok:
            hint = (f"Every candidate trained so far failed ({failed}); their errors are in groupml.scheduler_log "
                    f"(WHERE job_id = {job_id}). " + rest)
        else:
            hint = f"The observations of its {ok} trained candidate(s) were deleted, with their models. " + rest
        raise PrerequisiteStateError(f"Job {job_id} has no trained model yet", hint=hint)
    model = load_cached(bytes(rows[0]["model"]))
    if features is None:
        raise DataError("The 'features' value of infer must be an array of numbers; got null",
                        hint="Pass ARRAY[f1, f2, ...] in the job's feature order.")
    X = one_row(model, features, "infer", whose=f"Job {job_id}'s model",
                width_hint="Pass the job's feature columns, in the order given to submit_job.",
                row_hint="Call infer once per row, with a one-dimensional array.")
    return float(labels(model, X, "infer")[0])


# ---------------------------------------------------------------------------- simulation
@sql_entry
def simulate_scheduler(policy, sigma_m, alpha, seeds, cost_aware, n_users, n_models, n_tenants,
                       budget_fraction, grid_points):
    owner = "simulate_scheduler"
    check_choice(policy, "policy", owner, sorted(POLICIES), hint="hybrid, greedy, eirate, roundrobin, random or fcfs.")
    seeds = check_number(seeds, "seeds", owner, ge=1, le=1000, integer=True, hint="Average over e.g. 5 seeds.")
    check_bool(cost_aware, "cost_aware", owner)
    n_users = check_number(n_users, "n_users", owner, ge=2, le=100000, integer=True)
    n_models = check_number(n_models, "n_models", owner, ge=1, le=5000, integer=True,
                            hint="The generator builds an n_models x n_models covariance; 100 is the paper's.")
    n_tenants = check_number(n_tenants, "n_tenants", owner, ge=1, lt=n_users, integer=True,
                             hint="The other users form the history that feeds the GP prior.")
    grid_points = check_number(grid_points, "grid_points", owner, ge=2, le=10000, integer=True)
    # checked here so the messages name this function (not the generator's or the simulator's
    # Python names), with bounds (1e308 would overflow inside the generator)
    syn = "The paper's datasets are SYN(0.01, 0.1), SYN(0.01, 1.0), SYN(0.5, 0.1) and SYN(0.5, 1.0)."
    sigma_m = check_number(sigma_m, "sigma_m", owner, gt=0, le=1000, hint=syn)
    alpha = check_number(alpha, "alpha", owner, ge=0, le=1000, hint=syn)
    budget_fraction = check_number(budget_fraction, "budget_fraction", owner, gt=0, le=1,
                                   hint="The share of the tenants' total cost the simulation may spend.")
    if n_users * n_models > MAX_SIMULATED_CELLS:
        raise InvalidParameterError(
            f"The 'n_users' x 'n_models' value of {owner} must be <= {MAX_SIMULATED_CELLS}; got {n_users} x "
            f"{n_models} = {n_users * n_models}",
            hint="Every user's qualities are held as the GP's history: simulate fewer users or models "
                 "(the paper's SYN datasets are 200 x 100).")
    session = backend_session()
    results = []
    for seed in range(seeds):
        session.check_cancel()
        q, c = synthetic_dataset(n_users, n_models, sigma_m, alpha, seed=1000 + seed)
        results.append(simulate(q, c, policy, cost_aware, seed=seed, n_test=n_tenants,
                                budget_fraction=budget_fraction, interrupt_check=session.check_cancel))
    grid = np.linspace(0.0, max(float(r.cum_cost[-1]) for r in results), grid_points)
    agg = aggregate(results, grid)
    return [(float(g), float(a), float(w), float(r))
            for g, a, w, r in zip(grid, agg["avg"], agg["worst_tenant"], agg["worst_run"])]
