"""Where a table's rows live when they are spread over several servers: the shard map.

Two kinds of source:

* a **Citus distributed table**: its shards (``pg_dist_shard``), each shard's placements
  (``pg_dist_placement`` -> ``pg_dist_node``: the node's host and port, the placement's
  ``shardstate``; more than one placement when shards are replicated) and the shard table's name
  on the nodes (``shard_name()``);
* a **partitioned table of postgres_fdw foreign tables**: its leaf partitions, each with its
  foreign server's host, port and dbname, the remote schema and table, and whether the calling
  role has a user mapping for that server (its own or PUBLIC). Local partitions are listed with
  no server.

The data types are plain and frozen; :func:`citus_shard_map` and :func:`fdw_shard_map` read the
catalog through a :class:`groupml.db.Session` (one query each) and decide nothing else. They
never read user mapping options: a mapping's password is neither read nor logged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from .errors import FeatureNotSupportedError, UndefinedTableError, WrongObjectTypeError

#: ``pg_dist_placement.shardstate`` of a placement Citus reads and writes.
SHARD_STATE_ACTIVE = 1


@dataclass(frozen=True)
class Placement:
    """One copy of a shard on one node."""
    placement_id: int
    node_id: int
    group_id: int
    host: str
    port: int
    shard_state: int
    node_active: bool

    @property
    def active(self) -> bool:
        return self.shard_state == SHARD_STATE_ACTIVE and self.node_active


@dataclass(frozen=True)
class CitusShard:
    """A shard: its table on the nodes (``schema.table``, unquoted) and its placements."""
    shard_id: int
    schema: str
    table: str
    min_value: Optional[str]
    max_value: Optional[str]
    placements: Tuple[Placement, ...]

    @property
    def replicas(self) -> int:
        return len(self.placements)

    def active_placements(self) -> Tuple[Placement, ...]:
        return tuple(p for p in self.placements if p.active)


@dataclass(frozen=True)
class CitusShardMap:
    relation: str                       # the distributed table, as regclass text
    distribution_column: Optional[str]  # None for a reference table
    colocation_id: int
    shards: Tuple[CitusShard, ...]

    def nodes(self) -> List[Tuple[str, int]]:
        """Every (host, port) holding a placement, sorted."""
        return sorted({(p.host, p.port) for s in self.shards for p in s.placements})

    def shards_on(self, host: str, port: int) -> List[CitusShard]:
        return [s for s in self.shards if any((p.host, p.port) == (host, port) for p in s.placements)]


@dataclass(frozen=True)
class ForeignPartition:
    """A leaf partition: a foreign table on ``server`` (host/port/dbname as the server's options
    give them; None when an option is not set and libpq's default applies), or a local table
    (``server`` None)."""
    partition: str                      # the partition, as regclass text
    bound: str                          # its partition bound (FOR VALUES ...)
    server: Optional[str]
    host: Optional[str]
    port: Optional[int]
    dbname: Optional[str]
    remote_schema: Optional[str]
    remote_table: Optional[str]
    has_user_mapping: bool

    @property
    def is_foreign(self) -> bool:
        return self.server is not None


@dataclass(frozen=True)
class FdwShardMap:
    relation: str                       # the partitioned table, as regclass text
    partition_key: str                  # pg_get_partkeydef: "LIST (country)"
    partitions: Tuple[ForeignPartition, ...]

    def servers(self) -> List[str]:
        return sorted({p.server for p in self.partitions if p.server is not None})


def _relation(session, relation: str, owner: str) -> Dict[str, Any]:
    rows = session.query("SELECT c.oid::regclass::text AS name, c.relkind::text AS kind "
                         "FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass($1)", [relation], ["text"])
    if not rows:
        raise UndefinedTableError(f"The table of {owner} does not exist; got {relation!r}",
                                  hint="Name an existing table, schema-qualified if it is not on the search_path.")
    return rows[0]


_CITUS_SHARDS = """
SELECT s.shardid, s.shardminvalue, s.shardmaxvalue, n.nspname AS schema_name,
       pg_catalog.parse_ident(pg_catalog.shard_name(s.logicalrelid, s.shardid)) AS shard_parts,
       p.placementid, p.shardstate, p.groupid, d.nodeid, d.nodename, d.nodeport, d.isactive
  FROM pg_catalog.pg_dist_shard s
  JOIN pg_catalog.pg_class c ON c.oid = s.logicalrelid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_catalog.pg_dist_placement p ON p.shardid = s.shardid
  JOIN pg_catalog.pg_dist_node d ON d.groupid = p.groupid AND d.noderole = 'primary'
 WHERE s.logicalrelid = pg_catalog.to_regclass($1)
 ORDER BY s.shardid, d.nodeid"""


def citus_shard_map(session, relation: str) -> CitusShardMap:
    """The shards and placements of a Citus distributed (or reference) table."""
    owner = "citus_shard_map"
    if not session.query("SELECT 1 AS ok FROM pg_catalog.pg_extension WHERE extname = 'citus'"):
        raise FeatureNotSupportedError(
            f"{relation} cannot be a Citus distributed table: Citus is not installed in this database",
            hint="CREATE EXTENSION citus on every node (see docs/scaleout.md).")
    rel = _relation(session, relation, owner)
    dist = session.query(
        "SELECT CASE WHEN partkey IS NOT NULL THEN pg_catalog.column_to_column_name(logicalrelid, partkey) END AS col, "
        "colocationid "
        "FROM pg_catalog.pg_dist_partition WHERE logicalrelid = pg_catalog.to_regclass($1)", [rel["name"]], ["text"])
    if not dist:
        raise WrongObjectTypeError(
            f"{rel['name']} is not a Citus distributed table",
            hint="Distribute it first: SELECT create_distributed_table('<table>', '<column>').")
    shards: Dict[int, dict] = {}
    for r in session.query(_CITUS_SHARDS, [rel["name"]], ["text"]):
        parts = list(r["shard_parts"])
        shard = shards.setdefault(int(r["shardid"]), {
            "schema": parts[0] if len(parts) == 2 else r["schema_name"], "table": parts[-1],
            "min": r["shardminvalue"], "max": r["shardmaxvalue"], "placements": []})
        shard["placements"].append(Placement(int(r["placementid"]), int(r["nodeid"]), int(r["groupid"]),
                                             str(r["nodename"]), int(r["nodeport"]), int(r["shardstate"]),
                                             bool(r["isactive"])))
    return CitusShardMap(
        relation=rel["name"], distribution_column=dist[0]["col"] or None,
        colocation_id=int(dist[0]["colocationid"]),
        shards=tuple(CitusShard(sid, s["schema"], s["table"], s["min"], s["max"], tuple(s["placements"]))
                     for sid, s in sorted(shards.items())))


_FDW_PARTITIONS = """
SELECT t.relid::regclass::text AS partition, pg_catalog.pg_get_expr(c.relpartbound, c.oid) AS bound,
       n.nspname AS local_schema, c.relname AS local_table, fs.srvname,
       (SELECT o.option_value FROM pg_catalog.pg_options_to_table(fs.srvoptions) o WHERE o.option_name = 'host') AS host,
       (SELECT o.option_value FROM pg_catalog.pg_options_to_table(fs.srvoptions) o WHERE o.option_name = 'port') AS port,
       (SELECT o.option_value FROM pg_catalog.pg_options_to_table(fs.srvoptions) o WHERE o.option_name = 'dbname')
         AS dbname,
       (SELECT o.option_value FROM pg_catalog.pg_options_to_table(ft.ftoptions) o WHERE o.option_name = 'schema_name')
         AS remote_schema,
       (SELECT o.option_value FROM pg_catalog.pg_options_to_table(ft.ftoptions) o WHERE o.option_name = 'table_name')
         AS remote_table,
       EXISTS (SELECT 1 FROM pg_catalog.pg_user_mappings um
                WHERE um.srvid = fs.oid
                  AND (um.umuser = 0 OR um.umuser = (SELECT r.oid FROM pg_catalog.pg_roles r
                                                      WHERE r.rolname = CURRENT_USER))) AS has_user_mapping
  FROM pg_catalog.pg_partition_tree(pg_catalog.to_regclass($1)) t
  JOIN pg_catalog.pg_class c ON c.oid = t.relid
  JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
  LEFT JOIN pg_catalog.pg_foreign_table ft ON ft.ftrelid = t.relid
  LEFT JOIN pg_catalog.pg_foreign_server fs ON fs.oid = ft.ftserver
 WHERE t.isleaf
 ORDER BY 1"""


def fdw_shard_map(session, relation: str) -> FdwShardMap:
    """The leaf partitions of a partitioned table, with the foreign server of each foreign one."""
    rel = _relation(session, relation, "fdw_shard_map")
    if rel["kind"] != "p":
        raise WrongObjectTypeError(
            f"{rel['name']} is not a partitioned table",
            hint="Name the partitioned parent table whose partitions are foreign tables.")
    key = session.query("SELECT pg_catalog.pg_get_partkeydef(pg_catalog.to_regclass($1)) AS k",
                        [rel["name"]], ["text"])[0]["k"]
    parts = []
    for r in session.query(_FDW_PARTITIONS, [rel["name"]], ["text"]):
        foreign = r["srvname"] is not None
        parts.append(ForeignPartition(
            partition=r["partition"], bound=r["bound"], server=r["srvname"], host=r["host"],
            port=int(r["port"]) if r["port"] else (5432 if foreign else None), dbname=r["dbname"],
            remote_schema=(r["remote_schema"] or r["local_schema"]) if foreign else None,
            remote_table=(r["remote_table"] or r["local_table"]) if foreign else None,
            has_user_mapping=bool(r["has_user_mapping"]) if foreign else False))
    return FdwShardMap(relation=rel["name"], partition_key=key, partitions=tuple(parts))
