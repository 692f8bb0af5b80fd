"""Training where the shards live: the holders of a distributed source and their snapshots.

A **holder** is an endpoint (a node reached as the calling role) plus the table it reads
there: a Citus shard table on the node holding a placement of the shard. Every holder builds
a snapshot of its own table in the node's own groupml catalog (``node_snapshot`` tasks), so
the training rows never leave the node; the coordinator keeps, in its own snapshot, each
group's counts and -- for a group whose rows are on several holders -- the validation rows
it scores the GAP passes on. A group held by one holder trains whole there (one ``fit``
task); a group spread over holders runs the GLM partial sums of
:mod:`groupml.executor.glm`, one shard per holder.

Connections: host and port from the shard map (``pg_dist_node``), ``dbname`` the current
database, ``user`` always the calling role. A non-superuser's connection takes no password
or client certificate from the server's environment (``.pgpass``, ``PGPASSWORD``,
``~/.postgresql``): those are the server's credentials, not the caller's.

Everything here but :func:`citus_holders` and :func:`node_conninfo` is pure data.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import FeatureNotSupportedError, GroupmlError
from .snapshot import pieces_for

#: a path no server has: libpq then finds no password file or client certificate there
NO_FILE = "/nonexistent/groupml-caller-credentials-only"


class NodeUnavailableError(GroupmlError):
    """No active placement of a shard is on a node that can be reached."""

    sqlstate = "08001"


@dataclass(frozen=True)
class Holder:
    """An endpoint and the table read there (a Citus shard table, schema-qualified, quoted)."""
    name: str                                  # "127.0.0.1:9701 public.clicks_102008"
    host: str
    port: int
    table: str
    shard_id: int
    alternates: Tuple[Tuple[str, int], ...] = field(default=())   # other active placements
    server: Optional[str] = None               # a postgres_fdw foreign server (its user mapping connects)
    dbname: Optional[str] = None

    def node(self) -> str:
        return f"{self.host}:{self.port}"


def is_distributed(session, source: str) -> bool:
    """Whether ``source`` is a Citus distributed table (Citus installed and the table in
    ``pg_dist_partition``)."""
    if not session.query("SELECT 1 AS ok FROM pg_catalog.pg_extension WHERE extname = 'citus'"):
        return False
    return bool(session.query("SELECT 1 AS ok FROM pg_catalog.pg_dist_partition "
                              "WHERE logicalrelid = pg_catalog.to_regclass($1)", [source], ["text"]))


#: access patterns whose groups may span holders: GLM partial sums, MLP model hopping
SPREAD_PATTERNS = ("algebraic", "sequential")


def check_grouping(pattern: str, group_by: Sequence[str], distribution_column: Optional[str], source: str) -> None:
    """LightGBM groups must each lie in one shard: the grouping must include the
    distribution column (GLM groups train by partial sums, MLP groups by model hopping)."""
    if pattern not in SPREAD_PATTERNS and distribution_column not in group_by:
        raise FeatureNotSupportedError(
            f"On the distributed table {source}, group_by must include its distribution column "
            f"{distribution_column!r} for this model (its groups train whole on one node); got "
            f"{', '.join(group_by) or 'no columns'}",
            hint="Add the distribution column to group_by, distribute the table by the group column, or train a "
                 "GLM (logistic, linear, svm), whose groups may span nodes.")


def groups_may_spread(session, source: str, group_by: Sequence[str]) -> bool:
    """Whether a group of a Citus table may lie on several shards: the grouping leaves out
    the distribution column (replica endpoints serve only such groups)."""
    from ..shards import citus_shard_map

    return citus_shard_map(session, source).distribution_column not in group_by


def check_node_strategy(pattern: str, strategy: str, source: str) -> None:
    """On the nodes, strategy 'mop' hops MLP states over the shards; a GLM trains there by
    partial sums (its SGD hops are for one server's partitions)."""
    if strategy == "mop" and pattern != "sequential":
        raise FeatureNotSupportedError(
            f"The 'strategy' value 'mop' on the distributed table {source} trains MLPs (their states hop between "
            f"the nodes); got a model of the {pattern} pattern",
            hint="Omit strategy: on the nodes a GLM group spread over shards trains by partial sums per pass.")


def has_foreign_partitions(session, source: str) -> bool:
    """Whether ``source`` is a partitioned table with postgres_fdw foreign partitions."""
    return bool(session.query(
        "SELECT 1 AS ok FROM pg_catalog.pg_partition_tree(pg_catalog.to_regclass($1)) t "
        "JOIN pg_catalog.pg_foreign_table ft ON ft.ftrelid = t.relid WHERE t.isleaf LIMIT 1", [source], ["text"]))


def fdw_holders(session, source: str) -> List[Holder]:
    """One holder per foreign partition: its server's host/port/dbname and the remote table.
    A local partition, or a server the calling role has no user mapping for, is refused."""
    from ..db import quote_ident
    from ..errors import InvalidAuthorizationError
    from ..shards import fdw_shard_map

    out = []
    for i, p in enumerate(fdw_shard_map(session, source).partitions):
        if not p.is_foreign:
            raise FeatureNotSupportedError(
                f"Partition {p.partition} of {source} is a local table; train_groups on the servers of its "
                f"partitions needs every partition to be a foreign table",
                hint="Move the partition to a server with groupml, or train a view over the partitions (read "
                     "through this server).")
        if not p.has_user_mapping:
            raise InvalidAuthorizationError(
                f"The calling role has no user mapping for server {p.server} (partition {p.partition})",
                hint=f"CREATE USER MAPPING FOR CURRENT_USER SERVER {p.server} OPTIONS (user '...', password '...').")
        out.append(Holder(name=f"{p.server} {p.remote_schema}.{p.remote_table}", host=p.host or "localhost",
                          port=int(p.port or 5432), table=f"{quote_ident(p.remote_schema)}.{quote_ident(p.remote_table)}",
                          shard_id=i, server=p.server, dbname=p.dbname))
    return out


_MAPPING = ("SELECT um.umoptions FROM pg_catalog.pg_user_mappings um WHERE um.srvname = $1 AND "
            "(um.umuser = 0 OR um.umuser = (SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname = CURRENT_USER)) "
            "ORDER BY um.umuser = 0 LIMIT 1")


def fdw_conninfo(session, h: Holder, superuser: bool) -> Tuple[str, Optional[str]]:
    """(DSN, remote role) of a foreign server through the calling role's user mapping (its own,
    else PUBLIC's), read as the caller; never logged. A non-superuser's mapping must give a
    password (as postgres_fdw requires), and nothing else of the server's environment is used."""
    from psycopg.conninfo import make_conninfo

    from ..errors import InvalidAuthorizationError

    rows = session.query(_MAPPING, [h.server], ["text"])
    opts = dict(o.split("=", 1) for o in (rows[0]["umoptions"] or [])) if rows else {}
    user = opts.get("user") or session.query("SELECT current_user::text AS u")[0]["u"]
    extra: Dict[str, str] = {} if superuser else caller_only_options()
    if opts.get("password"):
        extra["password"] = opts["password"]
    elif not superuser:
        raise InvalidAuthorizationError(
            f"The user mapping of the calling role for server {h.server} gives no password",
            hint="A non-superuser connects to a foreign server with a password from its own user mapping "
                 "(ALTER USER MAPPING ... OPTIONS (ADD password '...')).")
    dsn = make_conninfo(host=h.host, port=str(h.port), dbname=h.dbname or "postgres", user=user, **extra)
    return dsn, user


def citus_holders(session, source: str) -> List[Holder]:
    """One holder per shard of a Citus distributed table: one of the shard's active placements
    (the i-th shard's i-th, modulo: replicated shards spread their holders over the nodes),
    the others as alternates. A shard without an active placement is NodeUnavailableError
    naming its nodes."""
    from ..db import quote_ident
    from ..shards import citus_shard_map

    out = []
    for i, shard in enumerate(citus_shard_map(session, source).shards):
        active = shard.active_placements()
        if not active:
            nodes = ", ".join(f"{p.host}:{p.port}" for p in shard.placements) or "none"
            raise NodeUnavailableError(
                f"Shard {shard.shard_id} of {source} has no active placement (placements on {nodes})",
                hint="Bring the node back (citus_activate_node) or repair the shard's placements, then call "
                     "train_groups again (with run_id to resume).")
        first = active[i % len(active)]
        rest = active[i % len(active) + 1:] + active[:i % len(active)]
        table = f"{quote_ident(shard.schema)}.{quote_ident(shard.table)}"
        out.append(Holder(name=f"{first.host}:{first.port} {shard.schema}.{shard.table}", host=first.host,
                          port=int(first.port), table=table, shard_id=int(shard.shard_id),
                          alternates=tuple((p.host, int(p.port)) for p in rest)))
    return out


def node_conninfo(session, host: str, port: int) -> str:
    """The DSN of a node as the calling role (see the module doc)."""
    from psycopg.conninfo import make_conninfo

    r = session.query("SELECT pg_catalog.current_database() AS db, current_user::text AS usr, "
                      "(SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user) AS su")[0]
    extra: Dict[str, str] = {}
    if not r["su"]:
        extra = caller_only_options()
    return make_conninfo(host=host, port=str(port), dbname=r["db"], user=r["usr"], **extra)


def caller_only_options() -> Dict[str, str]:
    """libpq options that keep the server's own credentials out of a non-superuser's
    connection: an empty password (so ``PGPASSWORD`` is not read), no password file, no
    client certificate or key."""
    return {"password": "", "passfile": NO_FILE, "sslcert": NO_FILE, "sslkey": NO_FILE}


def holder_endpoints(session, holders: Sequence[Holder]) -> List[Dict[str, Any]]:
    """Pool endpoints of the holders: the primary placement's DSN and the alternates' (Citus),
    or the DSN of the calling role's user mapping (postgres_fdw; ``role``: the remote user)."""
    su = _is_superuser(session)
    out = []
    for h in holders:
        ep = {"name": h.name, "node": h.node(), "table": h.table, "remote": True, "caller_only": not su,
              "alternates": [{"node": f"{a}:{p}", "dsn": node_conninfo(session, a, p)} for a, p in h.alternates]}
        if h.server is not None:
            ep["dsn"], ep["role"] = fdw_conninfo(session, h, su)
        else:
            ep["dsn"] = node_conninfo(session, h.host, h.port)
        out.append(ep)
    return out


def replay_endpoints(session, snapshots: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """Pool endpoints of the kept node snapshots a run recorded (``nodes.snapshots`` of its
    plan), as the calling role: a Citus node directly, a postgres_fdw server through the
    caller's user mapping."""
    su = _is_superuser(session)
    out = []
    for s in snapshots:
        host, port = str(s["node"]).rsplit(":", 1)
        ep = {"name": f"{s['node']} {s['table']}", "node": s["node"], "table": s["table"], "remote": True,
              "caller_only": not su, "snapshot": int(s["snapshot"])}
        if s.get("server"):
            h = Holder(name=ep["name"], host=host, port=int(port), table=s["table"], shard_id=0, server=s["server"],
                       dbname=s.get("dbname"))
            ep["dsn"], ep["role"] = fdw_conninfo(session, h, su)
        else:
            ep["dsn"] = node_conninfo(session, host, int(port))
        out.append(ep)
    return out


def _is_superuser(session) -> bool:
    return bool(session.query("SELECT rolsuper AS su FROM pg_catalog.pg_roles WHERE rolname = current_user")[0]["su"])


# ---------------------------------------------------------------- pure: the data placement
def node_groups(parts: Sequence[Mapping[str, Any]]) -> Dict[int, Dict[str, Any]]:
    """Per group_no, the counts over every holder and its shards ``[(holder, n_train,
    train_rows)]``: ``parts[w]['groups']`` maps a group_no (text) to the holder's counts."""
    out: Dict[int, Dict[str, Any]] = {}
    for w, part in enumerate(parts):
        for gno_text, c in sorted(part["groups"].items(), key=lambda kv: int(kv[0])):
            g = out.setdefault(int(gno_text), {"n_train": 0, "n_val": 0, "n_pos": 0, "n_skipped": 0, "holders": []})
            for k in ("n_train", "n_val", "n_pos", "n_skipped"):
                g[k] += int(c[k])
            g["holders"].append((w, int(c["n_train"]), [int(x) for x in c["train_rows"]], int(c["n_val"])))
    return out


def node_tasks(groups: Mapping[int, Mapping[str, Any]]) -> Dict[int, Dict[str, Any]]:
    """Per group_no: mode 'shards' and one shard per holder with training rows, ``(worker,
    row_start, n_rows, pieces)`` -- the placement the rows already have."""
    out = {}
    for gno, g in groups.items():
        shards, start = [], 0
        for w, n_train, train_rows, _ in g["holders"]:
            if n_train <= 0:
                continue
            shards.append((w, start, n_train, pieces_for(train_rows, 0, n_train)))
            start += n_train
        if shards:
            out[gno] = {"mode": "shards", "shards": shards}
    return out


def hop_tasks(tasks: Mapping[int, Mapping[str, Any]], groups: Mapping[int, Mapping[str, Any]],
              replicas: Mapping[int, Sequence[int]]) -> Dict[int, Dict[str, Any]]:
    """The tasks of an MLP run on the nodes: a group spread over holders trains by model
    hopping (mode 'mop', Cerebro's randomized scheduler). ``holders[s]``: the workers that
    may visit its shard s (the shard's holder, then its replicas: endpoints reading another
    placement of the same shard table); ``val``: per holder with validation rows, in the
    order the coordinator gathered them, the workers that may score on them. ``replicas``:
    holder -> its replica endpoints."""
    out = {}
    for gno, t in tasks.items():
        if len(t["shards"]) < 2:
            out[gno] = dict(t)
            continue
        out[gno] = dict(t, mode="mop",
                        holders=[[sh[0], *replicas.get(sh[0], ())] for sh in t["shards"]],
                        val=[[w, *replicas.get(w, ())] for w, _, _, n_val in groups[gno]["holders"] if n_val])
    return out


def replica_endpoints(endpoints: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """An endpoint per other placement of every holder's shard (Citus replication): it reads
    the same shard table on that node and builds the same snapshot there (the rows are
    ordered by their hash, not by the heap), so a configuration may visit the shard on
    either node. ``optional``: a node that cannot be reached leaves the replica out."""
    out = []
    for w, ep in enumerate(endpoints):
        for alt in ep.get("alternates") or ():
            out.append({"name": f"{alt['node']} {ep['name'].split(' ', 1)[1]}", "node": alt["node"],
                        "dsn": alt["dsn"], "table": ep["table"], "remote": True, "caller_only": ep["caller_only"],
                        "alternates": [], "replica_of": w, "optional": True})
    return out


def hop_plan_text(tasks: Mapping[int, Mapping[str, Any]], endpoints: Sequence[Mapping[str, Any]],
                  most: int = 3) -> str:
    """The hop plan of the spread MLP groups, in words: each partition's nodes (holder first,
    then its replicas)."""
    hops = sorted(g for g, t in tasks.items() if t.get("mode") == "mop")
    if not hops:
        return "MLP model hopping between nodes"
    shown = []
    for g in hops[:most]:
        parts = ", ".join(f"{s} on {'/'.join(endpoints[w]['node'] for w in ws)}"
                          for s, ws in enumerate(tasks[g]["holders"]))
        shown.append(f"group_no {g}: partitions {parts}")
    more = f"; +{len(hops) - most} more" if len(hops) > most else ""
    return ("MLP model hopping: configurations' states hop between the nodes, each visiting every partition "
            "once per epoch (Cerebro's randomized scheduler); " + "; ".join(shown) + more)


def split_groups(tasks: Mapping[int, Mapping[str, Any]]) -> List[int]:
    return sorted(g for g, t in tasks.items() if len(t["shards"]) > 1)


def check_pattern(pattern: str, split: Sequence[int], keys: Mapping[int, str]) -> None:
    """Groups spread over several holders train by GLM partial sums or MLP model hopping;
    LightGBM needs a group's rows on one node."""
    if pattern not in SPREAD_PATTERNS and split:
        raise FeatureNotSupportedError(
            f"Group {keys.get(split[0], split[0])} has rows on several shards; on a distributed table only GLM "
            f"groups (logistic, linear, svm) may span shards ({len(split)} groups do)",
            hint="Distribute the table by the group-by column (or a column the group determines), or train a GLM.")


def moved_bytes(n_rows_by_holder: Sequence[int], d: int) -> int:
    """Bytes the rows of the holders weigh as packed float8 (what gathering them would move)."""
    return int(sum(n_rows_by_holder)) * (d + 1) * 8


# ---------------------------------------------------------------- coordinator side (catalog I/O)
def build_node_snapshots(session, pool, *, run_id: int, source: str, group_by, features, label: str, seed: int,
                         fraction: float, block_rows: int, cancel_check,
                         stale=(), hop: bool = False) -> Tuple[int, Dict[int, Dict[str, Any]]]:
    """Every holder snapshots its own table on its node; the coordinator's snapshot gets the
    groups' counts and the validation rows of the groups spread over holders. Returns (the
    coordinator's snapshot id, node_tasks). The group list comes from a count through the
    distributed table (the nodes count; only keys and counts reach the coordinator).
    Replica endpoints (:func:`replica_endpoints`, after the holders) snapshot their
    placement too; ``hop``: spread groups train by model hopping (:func:`hop_tasks`)."""
    import json

    from .. import catalog
    from ..catalog import KEY_SETTINGS
    from ..sourcesql import (check_distinct_group_keys, check_group_keys, group_clause_sql, group_key_sql,
                             reading_source)
    from .snapshot import delete_snapshot

    _drop_stale(pool, stale)
    for old in catalog.building_snapshots_of_run(session, run_id) + [
            s for s in [catalog.ready_snapshot_of_run(session, run_id)] if s is not None]:
        delete_snapshot(session, old)           # an earlier attempt's: the nodes snapshot again
    with reading_source(session, source, "train_groups"):
        rows = session.query(f"SELECT {group_key_sql(group_by)}::text AS gkey, pg_catalog.count(*) AS n "
                             f"FROM {source}{group_clause_sql(group_by, source)}")
    keys = [r["gkey"] for r in rows]
    check_group_keys(session, keys, len(group_by), "train_groups")
    check_distinct_group_keys(session, keys, "train_groups")
    shown_as = session.query("SELECT " + ", ".join(f"pg_catalog.current_setting('{n}') AS \"{n}\""
                                                   for n in KEY_SETTINGS))[0]
    base = {"op": "node_snapshot", "search_path": session.callers_path,
            "settings": {n: shown_as[n] for n in KEY_SETTINGS}, "group_by": list(group_by),
            "features": list(features), "label": label, "seed": seed, "fraction": fraction,
            "block_rows": block_rows, "group_nos": {k: i for i, k in enumerate(keys)}}
    primary = [w for w, ep in enumerate(pool.endpoints) if ep.get("replica_of") is None]
    live = [w for w in range(len(pool.endpoints)) if w in primary or pool.alive(w)]
    parts = _run_on_holders(pool, [(w, dict(base, source=pool.endpoints[w]["table"])) for w in live], cancel_check,
                            optional={w for w in live if w not in primary})
    found = {}
    for w, raw in zip(live, parts):
        if raw is not None:
            found[w] = json.loads(raw)
            pool.endpoints[w]["snapshot"] = int(found[w]["snapshot"])
    groups = node_groups([found[w] for w in primary])
    replicas: Dict[int, List[int]] = {}
    for w in sorted(found):
        of = pool.endpoints[w].get("replica_of")
        # a replica whose snapshot differs from its holder's (the placements diverged) is left out
        if of is not None and found[w]["groups"] == found[of]["groups"]:
            replicas.setdefault(of, []).append(w)
    tasks = node_tasks(groups)
    if hop:
        tasks = hop_tasks(tasks, groups, replicas)
    d = len(features)
    split = set(split_groups(tasks))
    sid = catalog.insert_snapshot(session, source=source, group_by=group_by, features=features, label=label,
                                  seed=seed, fraction=fraction, block_rows=block_rows, keep=False)
    catalog.set_run_snapshot(session, run_id, sid)
    total = 0
    for gno, key in enumerate(keys):
        g = groups.get(gno, {"n_train": 0, "n_val": 0, "n_pos": 0, "n_skipped": 0, "holders": []})
        blocks = []
        if gno in split and g["n_val"]:
            asks = [(w, {"op": "node_validation", "snapshot": 1, "group_no": gno, "d": d})
                    for w, _, _, n_val in g["holders"] if n_val]
            data = b"".join(_run_on_holders(pool, asks, cancel_check, raw=True))
            blocks = [(g["n_val"], g["n_val"], data)]
        catalog.insert_snapshot_group(session, sid, gno, key, dict(g, blocks=blocks, train_rows=[0] * len(blocks)))
        for b, (n, nv, data) in enumerate(blocks):
            catalog.insert_snapshot_block(session, sid, gno, b, n, nv, data)
        total += g["n_train"] + g["n_val"]
    catalog.mark_snapshot_ready(session, sid, total, len(keys))
    return sid, tasks


def stale_node_snapshots(plan_text: Optional[str]) -> List[Dict[str, Any]]:
    """The node snapshots an earlier attempt of the run recorded in its plan (``nodes.snapshots``)."""
    import json

    if not plan_text:
        return []
    try:
        return list(json.loads(plan_text).get("nodes", {}).get("snapshots", []))
    except (ValueError, AttributeError):
        return []


def _drop_stale(pool, stale) -> None:
    """Drop an earlier attempt's snapshots on the nodes reached now (a node still down keeps
    its own until a later attempt reaches it)."""
    import json

    futs = []
    for s in stale:
        for w, ep in enumerate(pool.endpoints):
            if ep["node"] == s.get("node") and ep["table"] == s.get("table"):
                futs.append(pool.submit(w, json.dumps({"op": "node_drop", "snapshot": int(s["snapshot"])}), b"",
                                        {"kind": "drop", "group_key": None}, fn="task"))
    for f in futs:
        try:
            f.result(timeout=60)
        except Exception:  # noqa: BLE001 - best effort
            pass


def drop_node_snapshots(pool) -> None:
    """Remove the holders' snapshots (best effort: a node that is gone keeps its own)."""
    import json

    futs = [pool.submit(w, json.dumps({"op": "node_drop", "snapshot": 1}), b"", {"kind": "drop", "group_key": None},
                        fn="task") for w, ep in enumerate(pool.endpoints) if ep.get("snapshot") is not None]
    for f in futs:
        try:
            f.result(timeout=60)
        except Exception:  # noqa: BLE001 - best effort; the run's models are committed already
            pass


def _run_on_holders(pool, asks, cancel_check, raw: bool = False, optional=frozenset()) -> List[Optional[bytes]]:
    """Run ``[(worker, request), ...]`` and wait for all, checking for cancel; the first
    failure is raised (a lost node as the pool reports it), except that of an ``optional``
    worker (a replica), whose result is None."""
    import json
    from concurrent.futures import wait

    from .pool import WorkerDataError, WorkerLostError

    futs = [pool.submit(w, json.dumps(r), b"", {"kind": "snapshot", "group_key": None}, fn="task") for w, r in asks]
    while not all(f.done() for f in futs):
        wait(futs, timeout=0.25)
        cancel_check()
    for (w, _), f in zip(asks, futs):
        exc = f.exception()
        if exc is not None and w not in optional:
            raise exc if isinstance(exc, (WorkerLostError, WorkerDataError)) else WorkerLostError(str(exc))
    return [None if f.exception() is not None else f.result() for f in futs]


def node_plan_facts(holders: Sequence[Holder], tasks: Mapping[int, Mapping[str, Any]],
                    endpoints: Sequence[Mapping[str, Any]]) -> Dict[str, Any]:
    """What the run's recorded plan says about the nodes: holders, per group the holders and
    rows of its shards, and the node snapshots (dropped by a later attempt if this one fails)."""
    return {"snapshots": [{"node": ep["node"], "table": ep["table"], "snapshot": ep.get("snapshot"), "worker": w,
                           "server": h.server if ep.get("replica_of") is None else None,
                           "dbname": h.dbname, "replica_of": ep.get("replica_of")}
                          for w, (ep, h) in enumerate(zip(endpoints, _holder_of_endpoints(holders, endpoints)))
                          if ep.get("snapshot") is not None],
            "holders": [{"name": h.name, "node": h.node(), "table": h.table, "shard_id": h.shard_id,
                         "alternates": [f"{a}:{p}" for a, p in h.alternates]} for h in holders],
            "groups": {str(g): [[s[0], s[2]] for s in t["shards"]] for g, t in sorted(tasks.items())}}


def _holder_of_endpoints(holders: Sequence[Holder], endpoints: Sequence[Mapping[str, Any]]) -> List[Holder]:
    """The holder each endpoint reads (a replica endpoint reads its holder's shard table)."""
    return [holders[w] if ep.get("replica_of") is None else holders[ep["replica_of"]]
            for w, ep in enumerate(endpoints)]


# ---------------------------------------------------------------- explain_train_groups on the nodes
def shard_group_counts(session, source: str, group_by) -> Dict[int, Dict[str, int]]:
    """Per shard id, each group's row count (key text -> rows), counted on the nodes by Citus
    (``run_command_on_shards``, as the calling role): only keys and counts travel."""
    from ..db import quote_literal
    from ..sourcesql import group_key_sql

    cols = ", ".join(_quoted(g) for g in group_by) or "()"
    inner = (f"SELECT COALESCE(pg_catalog.json_agg(pg_catalog.json_build_array(k, n)), '[]') FROM "
             f"(SELECT {group_key_sql(group_by)}::text AS k, pg_catalog.count(*) AS n FROM %s GROUP BY {cols}) s")
    rows = session.query(f"SELECT shardid, success, result FROM pg_catalog.run_command_on_shards($1, "
                         f"{quote_literal(inner)})", [source], ["text"])
    import json

    out = {}
    for r in rows:
        if not r["success"]:
            raise NodeUnavailableError(f"Counting the groups of shard {r['shardid']} of {source} failed: {r['result']}",
                                       hint="Check that the nodes holding the shards are up, then explain again.")
        out[int(r["shardid"])] = {k: int(n) for k, n in json.loads(r["result"])}
    return out


def _quoted(name: str) -> str:
    from ..db import quote_ident

    return quote_ident(name)


def explain_on_nodes(session, source: str, group_by, features, holders: Sequence[Holder], inputs, pattern: str,
                     *, validation_fraction: float) -> List[Dict[str, Any]]:
    """explain_train_groups of a distributed source: one 'nodes' row per holder (its node,
    shard table, groups and rows, the planner's estimate of its work) and one 'gather' row;
    each says the bytes its way would move between the nodes and the coordinator."""
    from ..executor.plan import make_plan

    counts = shard_group_counts(session, source, group_by)
    d = len(features)
    row_bytes = (d + 1) * 8
    where: Dict[str, List[int]] = {}
    for w, h in enumerate(holders):
        for k in counts.get(h.shard_id, {}):
            where.setdefault(k, []).append(w)
    wl = inputs["wl"]
    k_conf, epochs = int(wl["n_configs"]), int(wl["epochs"])
    split = {k for k, ws in where.items() if len(ws) > 1}
    n_rows = sum(n for c in counts.values() for n in c.values())
    model_bytes = len(where) * (row_bytes + 512)             # one model (+ its trials) per group
    hop = pattern == "sequential"
    # GLM: theta out, sums back, per pass; MLP: every config visits every partition once per epoch
    gap = 0 if hop else sum(len(where[k]) * epochs * 2 * row_bytes * k_conf for k in split)
    visits = sum(len(where[k]) * epochs * k_conf for k in split) if hop else 0
    val = sum(int(round(n * validation_fraction)) for c in counts.values() for k, n in c.items() if k in split)
    nodes_bytes = model_bytes + gap + val * row_bytes
    if hop:
        spread_how = (f"MLP model hopping: {visits} visits, each configuration's state hopping between the nodes "
                      f"and visiting every partition of its group once per epoch (Cerebro's randomized scheduler)"
                      + "".join(f"; hop plan of group {k}: partitions on "
                                + ", ".join(holders[w].node() for w in where[k]) for k in sorted(split)[:3]))
        moved_how = f"models {model_bytes}, model states of {visits} visits"
    else:
        spread_how = "GLM partial sums per pass"
        moved_how = f"models {model_bytes}, partial sums {gap}"
    gather_bytes = n_rows * row_bytes
    out = []
    for w, h in enumerate(holders):
        mine = counts.get(h.shard_id, {})
        sizes = {i: int(round(n * (1 - validation_fraction))) for i, n in enumerate(mine.values())}
        secs = 0.0
        if sizes:
            plan = make_plan(sizes, k_conf, epochs, 1, "gtp", pattern=pattern, blocks=wl["blocks"],
                             calibration=inputs["cal"], pass_task_rows=inputs["max_rows"])
            secs = float(plan.estimates[plan.strategy].makespan)
        groups = ", ".join(f'{{"group": {k}, "rows": {n}}}' for k, n in mine.items())
        out.append({"strategy": "nodes", "chosen": True, "worker": w, "estimated_seconds": secs,
                    "shards": f'{{"node": "{h.node()}", "table": "{h.name.split(" ", 1)[1]}", "shard_id": '
                              f'{h.shard_id}, "groups": [{groups}]}}',
                    "explanation": f"nodes: each node trains from its own shard tables ({len(holders)} shards on "
                                   f"{len({x.node() for x in holders})} nodes; {len(where) - len(split)} groups whole "
                                   f"on one node, {len(split)} spread over nodes with {spread_how}); "
                                   f"moves about {nodes_bytes} bytes ({moved_how}, "
                                   f"validation rows of spread groups {val * row_bytes}), no training rows"})
    out.append({"strategy": "gather", "chosen": False, "worker": 0, "estimated_seconds": None, "shards": None,
                "explanation": f"gather: every row to the coordinator ({n_rows} rows x {d + 1} values) moves "
                               f"{gather_bytes} bytes before training starts"})
    return out
