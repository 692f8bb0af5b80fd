"""Training where the shards live: the holders of a distributed source and their snapshots.

A **holder** is an endpoint (a node reached as the calling role) plus the table it reads
there: a Citus shard table on the node holding a placement of the shard. Every holder builds
a snapshot of its own table in the node's own groupml catalog (``node_snapshot`` tasks), so
the training rows never leave the node; the coordinator keeps, in its own snapshot, each
group's counts and -- for a group whose rows are on several holders -- the validation rows
it scores the GAP passes on. A group held by one holder trains whole there (one ``fit``
task); a group spread over holders runs the GLM partial sums of
:mod:`groupml.executor.glm`, one shard per holder, or LightGBM's data-parallel mode with one
rank per node (:func:`node_ranks`: the rank reads every shard of the group its node holds).

Connections: host and port from the shard map (``pg_dist_node``), ``dbname`` the current
database, ``user`` always the calling role. A non-superuser's connection takes no password
or client certificate from the server's environment (``.pgpass``, ``PGPASSWORD``,
``~/.postgresql``): those are the server's credentials, not the caller's.

The placement functions (:func:`node_groups`, :func:`node_tasks`, :func:`node_ranks`,
:func:`check_pattern`, ...) are pure data; the others read the catalog, resolve a node's
address or look at the pool's connections.
"""

from __future__ import annotations

import json
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


#: access patterns whose groups may span nodes: GLM partial sums, MLP model hopping, LightGBM
#: ranks (one per node)
SPREAD_PATTERNS = ("algebraic", "sequential", "sampling")
#: how a group spread over nodes trains, per access pattern (plans and explain_train_groups)
SPREAD_HOW = {"algebraic": "GLM partial sums per pass", "sequential": "MLP model hopping",
              "sampling": "LightGBM data-parallel, one rank per node"}


def check_grouping(pattern: str, group_by: Sequence[str], distribution_column: Optional[str], source: str) -> None:
    """A group of a pattern with no way to train across nodes must lie in one shard: the
    grouping must include the distribution column (GLM groups train by partial sums, MLP
    groups by model hopping, LightGBM groups by one rank per node)."""
    if pattern not in SPREAD_PATTERNS and distribution_column not in group_by:
        raise FeatureNotSupportedError(
            f"On the distributed table {source}, group_by must include its distribution column "
            f"{distribution_column!r} for this model (its groups train whole on one node); got "
            f"{', '.join(group_by) or 'no columns'}",
            hint="Add the distribution column to group_by, distribute the table by the group column, or train a "
                 "GLM (logistic, linear, svm), an MLP or LightGBM, whose groups may span nodes.")


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
              "dbname": h.dbname,
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
    """Groups spread over several holders train by GLM partial sums, MLP model hopping or
    LightGBM ranks; any other pattern needs a group's rows on one node."""
    if pattern not in SPREAD_PATTERNS and split:
        raise FeatureNotSupportedError(
            f"Group {keys.get(split[0], split[0])} has rows on several shards; on a distributed table only GLM "
            f"(logistic, linear, svm), MLP and LightGBM groups may span shards ({len(split)} groups do)",
            hint="Distribute the table by the group-by column (or a column the group determines), or train a GLM, "
                 "an MLP or LightGBM.")


def node_ranks(shards: Sequence[tuple], endpoints: Sequence[Mapping[str, Any]]) -> List[Tuple[int, List[int]]]:
    """The ranks of a distributed LightGBM job over a spread group, one per node: ``[(worker
    that runs the rank, [indices of the group's shards it reads])]``, in the order of each
    node's first shard. A node is an endpoint's ``node`` (host:port), database and role: every
    holder snapshot there is in that node's one catalog, so one backend reads them all. The
    rank runs on the node's holder with the most of the group's training rows (the first on
    a tie)."""
    nodes: Dict[tuple, List[int]] = {}
    for s, shard in enumerate(shards):
        ep = endpoints[shard[0]]
        nodes.setdefault((ep["node"], ep.get("dbname"), ep.get("role")), []).append(s)
    out = []
    for ids in nodes.values():
        best = max(ids, key=lambda s: (int(shards[s][2]), -s))
        out.append((int(shards[best][0]), ids))
    return out


def node_rank_hosts(endpoints: Sequence[Mapping[str, Any]], workers: Sequence[int]) -> List[str]:
    """The IPv4 address each node's rank listens on (``workers``: the pool index of each
    rank's holder): the node's host as the shard map gives it (a Citus node's name, a foreign
    server's host), resolved here; a unix-socket directory or a loopback address is this host
    (127.0.0.1). A node without an IPv4 address, or loopback ranks mixed with ranks on other
    hosts (which could not reach them), is refused."""
    import socket

    hosts = []
    for w in workers:
        ep = endpoints[w]
        host = str(ep["node"]).rpartition(":")[0]
        if not host or host.startswith("/"):
            hosts.append("127.0.0.1")
            continue
        try:
            addr = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0]
        except (OSError, UnicodeError):
            raise FeatureNotSupportedError(
                f"Distributed LightGBM needs an IPv4 address for every node; node {ep['node']} ({ep['name']}) "
                f"has none here",
                hint="Register the node by an IPv4 address or a host name that has one (citus_update_node, or the "
                     "foreign server's host option), or group by the distribution column so that each group lies "
                     "on one node.") from None
        hosts.append("127.0.0.1" if addr.startswith("127.") else addr)
    local = [h == "127.0.0.1" for h in hosts]
    if any(local) and not all(local):
        mixed = sorted({endpoints[w]["node"] for w, loc in zip(workers, local) if loc})
        raise FeatureNotSupportedError(
            f"A LightGBM group spread over nodes has ranks on loopback nodes ({', '.join(mixed)}) and on other "
            f"hosts, which cannot connect to 127.0.0.1",
            hint="Register every node by its network address (citus_update_node, or the foreign server's host "
                 "option), or group by the distribution column so that each group lies on one node.")
    return hosts


def lost_node(pool, exc, wait_s: float = 5.0) -> Optional[str]:
    """The node (host:port) a run lost, when the pool's workers are the holders of a
    distributed source and ``exc`` is a lost worker's error (None otherwise): the holder whose
    connection broke (a rank's peers fail with it, and other groups' tasks on a failed worker
    report the peer's error: neither names the node that went away). For a plain lost-worker
    error this waits up to ``wait_s`` seconds for a connection to break; a task that failed
    on a node still connected names no node. Call it before the pool closes."""
    import time

    from .pool import WorkerLostError

    eps = getattr(pool, "endpoints", None) or []
    if not isinstance(exc, WorkerLostError) or not eps or not all(ep.get("remote") for ep in eps):
        return None
    plain = type(exc) is WorkerLostError
    deadline = time.monotonic() + (wait_s if plain else 0.0)
    while True:
        broken = [ep for ep, c in zip(eps, pool.conns) if c is not None and c.broken]
        if broken:
            return broken[0]["node"]
        if time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    return None


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


def fdw_group_counts(session, source: str, group_by, holders: Sequence[Holder]) -> Dict[int, Dict[str, int]]:
    """Per holder (``shard_id``: the foreign partition's index), each group's row count (key
    text -> rows) of a table partitioned over postgres_fdw servers: ``count(*) ... GROUP BY``
    on each foreign partition, which postgres_fdw runs on its server (only keys and counts
    travel; read with the calling role's user mapping)."""
    from ..shards import fdw_shard_map
    from ..sourcesql import group_key_sql

    parts = fdw_shard_map(session, source).partitions
    cols = ", ".join(_quoted(g) for g in group_by)
    out = {}
    for h in holders:
        inner = (f"SELECT {cols}, pg_catalog.count(*) AS n FROM {parts[h.shard_id].partition} GROUP BY {cols}"
                 if group_by else f"SELECT pg_catalog.count(*) AS n FROM {parts[h.shard_id].partition}")
        rows = session.query(f"SELECT {group_key_sql(group_by)}::text AS k, s.n FROM ({inner}) s WHERE s.n > 0")
        out[h.shard_id] = {r["k"]: int(r["n"]) for r in rows}
    return out


#: rough sizes in a distributed LightGBM job: one tree of the model text, the rest of the
#: text (header, parameters), and a rank's request and digest
LGBM_TREE_BYTES = 2048
LGBM_TEXT_BYTES = 3072
LGBM_RANK_BYTES = 512


def explain_on_nodes(session, source: str, group_by, features, holders: Sequence[Holder], inputs, pattern: str,
                     *, validation_fraction: float) -> List[Dict[str, Any]]:
    """explain_train_groups of a distributed source: one 'nodes' row per holder (its node,
    shard table or foreign partition, groups and rows, the planner's estimate of its work)
    and one 'gather' row; each says the bytes its way would move between the nodes and the
    coordinator."""
    from ..executor.plan import make_plan

    fdw = bool(holders) and holders[0].server is not None
    counts = fdw_group_counts(session, source, group_by, holders) if fdw else shard_group_counts(session, source,
                                                                                                  group_by)
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
    visits = sum(len(where[k]) * epochs * k_conf for k in split) if hop else 0
    if hop:                         # every config visits every partition once per epoch: its state moves
        spread_what, spread = f"model states of {visits} visits", 0
    elif pattern == "sampling":     # per config, one rank sends the model text back, the others its digest
        spread_what = "model texts of the ranks"
        spread = sum(k_conf * (epochs * LGBM_TREE_BYTES + LGBM_TEXT_BYTES
                               + len({holders[w].node() for w in where[k]}) * LGBM_RANK_BYTES) for k in split)
    else:                           # theta out, sums back, per pass and holder
        spread_what = "partial sums"
        spread = sum(len(where[k]) * epochs * 2 * row_bytes * k_conf for k in split)
    val = sum(int(round(n * validation_fraction)) for c in counts.values() for k, n in c.items() if k in split)
    nodes_bytes = model_bytes + spread + val * row_bytes
    spread_how = SPREAD_HOW.get(pattern, pattern)
    if hop:
        spread_how += (f": {visits} visits, each configuration's state hopping between the nodes and visiting every "
                       f"partition of its group once per epoch (Cerebro's randomized scheduler)"
                       + "".join(f"; hop plan of group {k}: partitions on "
                                 + ", ".join(holders[w].node() for w in where[k]) for k in sorted(split)[:3]))
    moved_how = f"models {model_bytes}, " + (spread_what if hop else f"{spread_what} {spread}")
    gather_bytes = n_rows * row_bytes
    places = "partitions" if fdw else "shards"
    hosts = "servers" if fdw else "nodes"
    n_hosts = len({x.server for x in holders} if fdw else {x.node() for x in holders})
    partitions = _partition_names(session, source) if fdw else []
    out = []
    for w, h in enumerate(holders):
        mine = counts.get(h.shard_id, {})
        sizes = {i: int(round(n * (1 - validation_fraction))) for i, n in enumerate(mine.values())}
        secs = 0.0
        if sizes:
            plan = make_plan(sizes, k_conf, epochs, 1, "gtp", pattern=pattern, blocks=wl["blocks"],
                             calibration=inputs["cal"], pass_task_rows=inputs["max_rows"])
            secs = float(plan.estimates[plan.strategy].makespan)
        shard = {"node": h.node(), "table": h.name.split(" ", 1)[1], "shard_id": h.shard_id,
                 "groups": [{"group": json.loads(k), "rows": n} for k, n in mine.items()]}
        if fdw:
            shard.update(server=h.server, partition=partitions[h.shard_id])
        out.append({"strategy": "nodes", "chosen": True, "worker": w, "estimated_seconds": secs,
                    "shards": json.dumps(shard),
                    "explanation": f"nodes: each {hosts[:-1]} trains from its own {places} ({len(holders)} {places} "
                                   f"on {n_hosts} {hosts}; {len(where) - len(split)} groups whole on one "
                                   f"{hosts[:-1]}, {len(split)} spread over {hosts} with {spread_how}); moves about "
                                   f"{nodes_bytes} bytes ({moved_how}, validation rows of spread groups "
                                   f"{val * row_bytes}), no training rows"})
    out.append({"strategy": "gather", "chosen": False, "worker": 0, "estimated_seconds": None, "shards": None,
                "explanation": f"gather: every row to the coordinator ({n_rows} rows x {d + 1} values) moves "
                               f"{gather_bytes} bytes before training starts"})
    return out


def _partition_names(session, source: str) -> List[str]:
    from ..shards import fdw_shard_map

    return [p.partition for p in fdw_shard_map(session, source).partitions]
