"""learn_over_groups over a partitioned table whose partitions are postgres_fdw foreign tables on
three other local servers, each with groupml."""

import re

import numpy as np
import psycopg
import pytest
from psycopg import sql

from groupml.datagen import create_table, grouped_classification
from groupml.errors import WrongObjectTypeError
from groupml.shards import fdw_shard_map

from multinode import ClientSession, assert_same_fits, group_fits, shard_map_in_backend

pytestmark = pytest.mark.integration

COLUMNS = "id bigint, country text, f1 float8, f2 float8, f3 float8, f4 float8, clicked boolean"


@pytest.fixture(scope="module")
def clicks(fdw_shards):
    """``clicks`` partitioned by country over the shard servers (two countries each), and
    ``clicks_local`` the same rows in one table on the coordinator (the one-server run)."""
    data = grouped_classification(3000, 6, 4, seed=5, exponent=0.6)
    countries = sorted(set(data["grp"]))
    with fdw_shards.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS clicks, clicks_local CASCADE")
        create_table(conn, "clicks_local", data)
        conn.execute(f"CREATE TABLE clicks ({COLUMNS}) PARTITION BY LIST (country)")
        for i, (shard, server) in enumerate(zip(fdw_shards.shards, fdw_shards.servers)):
            mine = countries[2 * i: 2 * i + 2]
            part = {k: v[np.isin(data["grp"], mine)] for k, v in data.items()}
            with psycopg.connect(shard.dsn(), autocommit=True) as node:
                node.execute("DROP TABLE IF EXISTS clicks_part")
                create_table(node, "clicks_part", part)
                node.execute("ANALYZE clicks_part")
            conn.execute(sql.SQL("CREATE FOREIGN TABLE {} PARTITION OF clicks FOR VALUES IN ({}) SERVER {} "
                                 "OPTIONS (table_name 'clicks_part')").format(
                sql.Identifier(f"clicks_{server}"), sql.SQL(", ").join(map(sql.Literal, mine)),
                sql.Identifier(server)))
        # the planner's group counts come from these statistics (sampled through the servers):
        # without them it guesses 200 groups a partition and may aggregate on the coordinator
        conn.execute("ANALYZE clicks")
    return data


def pushdown_session(conn):
    conn.execute("SET enable_partitionwise_aggregate = on")
    return conn


def test_grouped_by_the_partition_key_runs_on_the_shard_servers(fdw_shards, clicks):
    with pushdown_session(fdw_shards.connect()) as conn:
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN (VERBOSE) SELECT country, groupml.learn_over_groups(ARRAY[f1, f2, f3, f4], clicked, "
            "'logistic', '{\"l2\": [0.001, 0.1]}') FROM clicks GROUP BY country").fetchall())
        remote = [line.strip() for line in plan.splitlines() if "Remote SQL:" in line]
        assert len(remote) == 3, plan
        for line in remote:
            assert "groupml.learn_over_groups(ARRAY[f1, f2, f3, f4], clicked, 'logistic'::groupml.model_family" \
                in line and "GROUP BY 1" in line, plan
        assert plan.count("Async Foreign Scan") == 3, plan          # the servers work at once
        assert "HashAggregate" not in plan and "GroupAggregate" not in plan, plan
        assert_same_fits(group_fits(conn, "clicks", "country"), group_fits(conn, "clicks_local", "country"))


def test_only_the_fits_come_back_from_the_shard_servers(fdw_shards, clicks):
    with pushdown_session(fdw_shards.connect()) as conn:
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN (ANALYZE, VERBOSE) SELECT country, groupml.learn_over_groups(ARRAY[f1, f2, f3, f4], clicked, "
            "'logistic', '{}') FROM clicks GROUP BY country").fetchall())
    returned = [int(n) for n in re.findall(r"Async Foreign Scan .*actual time=\S+ rows=(\d+)", plan)]
    assert returned == [2, 2, 2], plan             # one row (a fit) per group, two groups a server


def test_other_groupings_pull_the_rows_and_equal_one_server(fdw_shards, clicks):
    """Without partial-aggregate pushdown (PostgreSQL 15) another grouping reads the rows through
    the foreign scans and aggregates on the coordinator: correct, not pushed down."""
    with pushdown_session(fdw_shards.connect()) as conn:
        key = "(id % 3)"
        plan = "\n".join(r[0] for r in conn.execute(
            f"EXPLAIN (VERBOSE) SELECT {key}, groupml.learn_over_groups(ARRAY[f1, f2, f3, f4], clicked, 'logistic', "
            f"'{{}}') FROM clicks GROUP BY {key}").fetchall())
        remote = [line for line in plan.splitlines() if "Remote SQL:" in line]
        assert len(remote) == 3 and not any("learn_over_groups" in line for line in remote), plan
        assert_same_fits(group_fits(conn, "clicks", key), group_fits(conn, "clicks_local", key))


def test_shard_map_of_foreign_partitions(fdw_shards, clicks):
    with fdw_shards.connect() as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS clicks_rest PARTITION OF clicks DEFAULT")
        try:
            shard_map = fdw_shard_map(ClientSession(conn), "clicks")
        finally:
            conn.execute("DROP TABLE clicks_rest")
    assert shard_map.relation == "clicks" and shard_map.partition_key == "LIST (country)"
    assert shard_map.servers() == sorted(fdw_shards.servers)
    foreign = [p for p in shard_map.partitions if p.is_foreign]
    assert [(p.server, p.host, p.port, p.dbname) for p in foreign] == \
        [(s, "127.0.0.1", n.port, "postgres") for s, n in zip(fdw_shards.servers, fdw_shards.shards)]
    assert all(p.remote_table == "clicks_part" and p.remote_schema == "public" and p.has_user_mapping
               for p in foreign)
    assert "FOR VALUES IN" in foreign[0].bound
    local = [p for p in shard_map.partitions if not p.is_foreign]
    assert [(p.partition, p.bound, p.host, p.has_user_mapping) for p in local] == \
        [("clicks_rest", "DEFAULT", None, False)]
    with fdw_shards.connect() as conn:
        with pytest.raises(WrongObjectTypeError, match="clicks_local is not a partitioned table"):
            fdw_shard_map(ClientSession(conn), "clicks_local")


def test_shard_map_reads_the_same_inside_the_server(fdw_shards, clicks):
    with fdw_shards.connect() as conn:
        conn.execute("SELECT groupml.version()")          # groupml's sys.path in this backend
        assert shard_map_in_backend(conn, "fdw_shard_map", "public.clicks") == \
            repr(fdw_shard_map(ClientSession(conn), "public.clicks"))


def test_a_role_reaches_the_shards_only_with_its_own_mapping(fdw_shards, clicks):
    """The aggregate's rows (or its pushed-down call) reach the shard servers through the calling
    role's user mapping only: a role without one cannot use postgres's, a role whose mapping has no
    password cannot use the server's trust or .pgpass, and the shard map shows no mapping option."""
    with fdw_shards.connect() as conn:
        conn.execute("DROP ROLE IF EXISTS analyst")
        conn.execute("CREATE ROLE analyst LOGIN")
        conn.execute("GRANT SELECT ON clicks TO analyst")
        conn.execute("GRANT USAGE ON FOREIGN SERVER shard1, shard2, shard3 TO analyst")
        try:
            query = ("SELECT country, groupml.learn_over_groups(ARRAY[f1, f2, f3, f4], clicked, 'logistic', '{}') "
                     "FROM clicks GROUP BY country")
            with pushdown_session(fdw_shards.connect("analyst")) as mine:
                with pytest.raises(psycopg.errors.UndefinedObject, match='user mapping not found for "analyst"'):
                    mine.execute(query)
                assert not any(p.has_user_mapping for p in fdw_shard_map(ClientSession(mine), "clicks").partitions)
            conn.execute("CREATE USER MAPPING FOR analyst SERVER shard1 OPTIONS (user 'postgres', password 'sekrit')")
            conn.execute("CREATE USER MAPPING FOR analyst SERVER shard2 OPTIONS (user 'postgres')")
            with pushdown_session(fdw_shards.connect("analyst")) as mine:
                with pytest.raises(psycopg.errors.Error, match="password"):
                    mine.execute(query)
                shard_map = fdw_shard_map(ClientSession(mine), "clicks")
                assert [p.has_user_mapping for p in shard_map.partitions] == [True, True, False]
                assert "sekrit" not in repr(shard_map)
        finally:
            for server in fdw_shards.servers:
                conn.execute(sql.SQL("DROP USER MAPPING IF EXISTS FOR analyst SERVER {}").format(sql.Identifier(server)))
            conn.execute("DROP OWNED BY analyst")
            conn.execute("DROP ROLE analyst")
