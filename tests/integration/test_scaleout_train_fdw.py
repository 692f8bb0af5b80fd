"""train_groups on a table partitioned over postgres_fdw servers: each server trains from its own table."""

import json

import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification
from multinode import partition_over_servers
from pg_helpers import sql_error
from test_scaleout_train import FEATS, GRID, assert_same, models, train

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sales(fdw_shards):
    """``sales`` partitioned by country over the three servers (two groups each),
    ``sales_local`` the same rows on the coordinator."""
    data = grouped_classification(3000, 6, 4, seed=13, exponent=0.6)
    keys = sorted({str(k) for k in data["grp"]})
    parts = [keys[0:2], keys[2:4], keys[4:6]]
    with fdw_shards.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS sales, sales_local CASCADE")
        create_table(conn, "sales_local", data)
        conn.execute("CREATE TABLE sales (LIKE sales_local) PARTITION BY LIST (country)")
        partition_over_servers(conn, fdw_shards, "sales", data, parts)
    return parts


def remote_reads(fdw_shards):
    out = []
    for shard in fdw_shards.shards:
        with psycopg.connect(shard.dsn(), autocommit=True) as c:
            c.execute("SELECT pg_stat_force_next_flush()")
            out.append(c.execute("SELECT pg_stat_get_tuples_returned('sales'::regclass)").fetchone()[0])
    return out


def test_each_server_trains_its_partition_and_equals_one_server(fdw_shards, sales):
    import time

    with fdw_shards.connect() as conn:
        before = remote_reads(fdw_shards)
        run = train(conn, "sales")
        for _ in range(50):
            after = remote_reads(fdw_shards)
            if all(a - b >= 400 for a, b in zip(after, before)):
                break
            time.sleep(0.2)
        assert all(a - b >= 400 for a, b in zip(after, before)), (before, after)   # each server read its rows
        assert_same(models(conn, run), models(conn, train(conn, "sales_local")))
        plan = json.loads(conn.execute("SELECT plan::text FROM groupml.grouped_runs WHERE run_id = %s",
                                       [run]).fetchone()[0])
        assert [h["name"].split(" ")[0] for h in plan["nodes"]["holders"]] == fdw_shards.servers
        assert all(len(s) == 1 for s in plan["nodes"]["groups"].values())
        moved = sum(m["sent"] + m["received"] for m in plan["moved"].values())
        assert 0 < moved < 3000 * 5 * 8 / 2
        for key, worker in conn.execute("SELECT group_key->>'country', worker FROM groupml.run_schedule "
                                        "WHERE run_id = %s", [run]).fetchall():
            assert key in sales[worker]


def test_a_role_without_a_user_mapping_or_password_is_refused(fdw_shards, sales):
    with fdw_shards.connect() as admin:
        admin.execute("DROP ROLE IF EXISTS fdw_trainer")
        admin.execute("CREATE ROLE fdw_trainer LOGIN")
        admin.execute("GRANT SELECT ON sales TO fdw_trainer")
        admin.execute("GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA groupml TO fdw_trainer")
        admin.execute("GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA groupml TO fdw_trainer")
        try:
            with psycopg.connect(fdw_shards.coordinator.dsn("postgres", "fdw_trainer"), autocommit=True) as conn:
                state, msg, hint = sql_error(
                    conn, f"CALL groupml.train_groups('sales', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                          f"'{GRID}'::jsonb, '{{}}'::jsonb, NULL)")
                # postgres_fdw's own refusal when the source is first read, else ours (28000)
                assert state in ("42704", "28000") and "user mapping" in msg, (state, msg, hint)
                # a mapping without a password: the server's trust or .pgpass is not lent to it
                admin.execute("CREATE USER MAPPING FOR fdw_trainer SERVER shard1 OPTIONS (user 'postgres')")
                admin.execute("CREATE USER MAPPING FOR fdw_trainer SERVER shard2 OPTIONS (user 'postgres')")
                admin.execute("CREATE USER MAPPING FOR fdw_trainer SERVER shard3 OPTIONS (user 'postgres')")
                state, msg, hint = sql_error(
                    conn, f"CALL groupml.train_groups('sales', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                          f"'{GRID}'::jsonb, '{{}}'::jsonb, NULL)")
                assert state in ("28000", "2F003") and "password" in msg, (state, msg, hint)
        finally:
            for i in (1, 2, 3):
                admin.execute(f"DROP USER MAPPING IF EXISTS FOR fdw_trainer SERVER shard{i}")
            admin.execute("DROP OWNED BY fdw_trainer")
            admin.execute("DROP ROLE fdw_trainer")
