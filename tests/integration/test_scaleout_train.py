"""train_groups on a Citus distributed table: every node trains from its own shard tables."""

import json
import os
import time

import numpy as np
import psycopg
import pytest

from groupml.datagen import grouped_classification
from groupml.learners import load_model
from multinode import create_segmented, halted_after_first_group, log_connections
from pg_helpers import sql_error

pytestmark = [pytest.mark.integration, pytest.mark.citus]

FEATS = "ARRAY['f1', 'f2', 'f3', 'f4']"
GRID = '{"l2": [0.001, 0.1]}'


@pytest.fixture(scope="module")
def events(citus_cluster):
    """``events`` distributed by country over 4 shards, ``events_local`` the same rows in one
    plain table (the one-server run); ``segment`` a column the distribution does not follow."""
    data = grouped_classification(3000, 6, 4, seed=11, exponent=0.6)
    with citus_cluster.connect() as conn:
        for table in ("events", "events_local"):
            create_segmented(conn, table, data)
        conn.execute("SELECT create_distributed_table('events', 'country', shard_count := 4)")
    return data


def train(conn, source, key="country", run_id="NULL", spec=GRID):
    return conn.execute(f"CALL groupml.train_groups({source!r}, ARRAY['{key}'], {FEATS}, 'clicked', 'logistic', "
                        f"%s::jsonb, '{{}}'::jsonb, {run_id})", [spec]).fetchone()[0]


def models(conn, run_id, key="country"):
    out = {}
    for k, params, score, model in conn.execute(
            f"SELECT group_key->>'{key}', (fit).params, (fit).score, (fit).model FROM groupml.models "
            "WHERE run_id = %s", [run_id]).fetchall():
        m = load_model(bytes(model))
        out[k] = (params, score, np.append(m.coef, m.intercept))
    return out


def assert_same(a, b, tol=1e-6):
    assert set(a) == set(b) and a
    for k in a:
        assert a[k][0] == b[k][0], k
        assert a[k][1] == pytest.approx(b[k][1], abs=tol), k
        np.testing.assert_allclose(a[k][2], b[k][2], atol=tol, rtol=0)


def shard_reads(citus_cluster, conn, table):
    """{worker port: rows read from the shard tables of ``table`` on that worker} (the node's
    own statistics, read by shard table name: Citus hides shards from pg_class listings)."""
    shards = conn.execute("SELECT shard_name, nodeport FROM citus_shards WHERE table_name = %s::regclass",
                          [table]).fetchall()
    out = {}
    for worker in citus_cluster.workers:
        with psycopg.connect(worker.dsn(), autocommit=True) as node:
            node.execute("SELECT pg_stat_force_next_flush()")
            out[worker.port] = sum(node.execute("SELECT pg_stat_get_tuples_returned(%s::regclass)", [name]
                                                ).fetchone()[0] for name, port in shards if port == worker.port)
    return out


def settled_reads(citus_cluster, conn, table, before, at_least):
    """Shard reads once the worker backends' statistics are flushed (they flush at exit)."""
    for _ in range(50):
        after = shard_reads(citus_cluster, conn, table)
        if all(after[p] - before[p] >= at_least[p] for p in after):
            return after
        time.sleep(0.2)
    return after


def reads_before(citus_cluster, conn, table):
    """Before a run on ``table`` (distributed by country): ({worker port: its rows}, the
    workers' shard reads, the coordinator's reads of its shell table)."""
    rows_on = dict(conn.execute(
        "SELECT nodeport, sum(n)::bigint FROM (SELECT get_shard_id_for_distribution_column(%s, country) "
        f"AS shardid, count(*) AS n FROM {table} GROUP BY country) g JOIN citus_shards s USING (shardid) "
        "GROUP BY nodeport", [table]).fetchall())
    coordinator = conn.execute("SELECT pg_stat_get_tuples_returned(%s::regclass)", [table]).fetchone()[0]
    return rows_on, shard_reads(citus_cluster, conn, table), coordinator


def test_groups_train_on_the_nodes_holding_their_shard_and_equal_one_server(citus_cluster, events):
    with citus_cluster.connect() as conn:
        rows_on, before, coordinator_reads = reads_before(citus_cluster, conn, "events")
        run = train(conn, "events")
        after = settled_reads(citus_cluster, conn, "events", before, rows_on)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        assert conn.execute("SELECT pg_stat_get_tuples_returned('events'::regclass)").fetchone()[0] \
            == coordinator_reads                      # the coordinator's shell table: nothing read there
        # each worker read its shards' rows (the snapshot its holders built there)
        assert all(after[p] - before[p] >= rows_on[p] for p in rows_on), (before, after, rows_on)
        local = train(conn, "events_local")
        assert_same(models(conn, run), models(conn, local))

        plan = json.loads(conn.execute("SELECT plan::text FROM groupml.grouped_runs WHERE run_id = %s",
                                       [run]).fetchone()[0])
        holders = plan["nodes"]["holders"]
        assert {h["node"] for h in holders} == {f"127.0.0.1:{w.port}" for w in citus_cluster.workers}
        assert all(len(shards) == 1 for shards in plan["nodes"]["groups"].values())   # whole on one node
        # the schedule: each group's task ran on the holder of its shard
        where = dict(conn.execute(
            "SELECT country, s.shard_name FROM (SELECT DISTINCT country FROM events_local) c, citus_shards s "
            "WHERE s.shardid = get_shard_id_for_distribution_column('events', c.country)").fetchall())
        for key, worker in conn.execute("SELECT group_key->>'country', worker FROM groupml.run_schedule "
                                        "WHERE run_id = %s", [run]).fetchall():
            assert holders[worker]["name"].endswith("." + where[key]), (key, holders[worker], where[key])
        moved = sum(m["sent"] + m["received"] for m in plan["moved"].values())
        row_bytes = 3000 * (4 + 1) * 8
        assert 0 < moved < row_bytes / 2, (moved, row_bytes)
        # the nodes' snapshots are gone with the run
        for worker in citus_cluster.workers:
            with psycopg.connect(worker.dsn(), autocommit=True) as node:
                assert node.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0


def test_groups_spread_over_nodes_train_by_partial_sums_and_equal_one_server(citus_cluster, events):
    with citus_cluster.connect() as conn:
        run = train(conn, "events", key="segment")
        local = train(conn, "events_local", key="segment")
        assert_same(models(conn, run, "segment"), models(conn, local, "segment"))
        plan = json.loads(conn.execute("SELECT plan::text FROM groupml.grouped_runs WHERE run_id = %s",
                                       [run]).fetchone()[0])
        assert all(len(shards) == 4 for shards in plan["nodes"]["groups"].values())   # every shard has both
        passes = conn.execute("SELECT count(DISTINCT worker), count(*) FROM groupml.run_schedule WHERE run_id = %s",
                              [run]).fetchone()
        assert passes[0] == 4 and passes[1] > 8          # partial sums on every holder, pass after pass


def test_explain_shows_nodes_shards_and_the_bytes_each_way_moves(citus_cluster, events):
    with citus_cluster.connect() as conn:
        rows = conn.execute(f"SELECT strategy, chosen, worker, shards, explanation FROM groupml.explain_train_groups("
                            f"'events', ARRAY['country'], {FEATS}, 'clicked', 'logistic', %s::jsonb)",
                            [GRID]).fetchall()
        where = dict(conn.execute("SELECT shard_name, nodeport FROM citus_shards WHERE table_name = "
                                  "'events'::regclass").fetchall())
        nodes = [r for r in rows if r[0] == "nodes"]
        assert len(nodes) == 4 and all(r[1] for r in nodes)
        assert sum(g["rows"] for r in nodes for g in r[3]["groups"]) == 3000
        for r in nodes:                      # each holder is the shard's node
            assert r[3]["node"] == f"127.0.0.1:{where[r[3]['table'].split('.', 1)[1]]}"
        gather = next(r for r in rows if r[0] == "gather")
        assert not gather[1] and f"{3000 * 5 * 8} bytes" in gather[4]
        moved = int(nodes[0][4].split("moves about ", 1)[1].split(" ", 1)[0])
        assert 0 < moved < 3000 * 5 * 8 / 4 and "no training rows" in nodes[0][4]
        spread = conn.execute(f"SELECT explanation FROM groupml.explain_train_groups('events', ARRAY['segment'], "
                              f"{FEATS}, 'clicked', 'logistic', %s::jsonb) WHERE strategy = 'nodes' LIMIT 1",
                              [GRID]).fetchone()[0]
        assert "2 spread over nodes" in spread and "partial sums 0" not in spread


def test_other_strategies_are_refused_on_a_distributed_table(citus_cluster, events):
    with citus_cluster.connect() as conn:
        state, msg, hint = sql_error(
            conn, f"CALL groupml.train_groups('events', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                  f"'{{}}'::jsonb, '{{}}'::jsonb, NULL, workers => 2, strategy => 'mtp')")
        assert state == "0A000" and "'mtp'" in msg and "distributed table" in msg and hint


def test_a_node_down_names_it_and_the_run_resumes_when_it_is_back(citus_cluster, events):
    down = citus_cluster.workers[1]
    with citus_cluster.connect() as conn:
        down.halt()
        try:
            with pytest.raises(psycopg.Error) as info:
                train(conn, "events")
        finally:
            down.resume()
        err = info.value
        assert err.sqlstate.startswith("08"), err.sqlstate
        assert f"127.0.0.1:{down.port}" in err.diag.message_primary, err.diag.message_primary
        assert "run_id" in (err.diag.message_hint or "")
        run = conn.execute("SELECT max(run_id) FROM groupml.runs").fetchone()[0]
        assert conn.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run]).fetchone()[0] == "failed"
        assert train(conn, "events", run_id=run) == run
        assert conn.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run]).fetchone()[0] == "done"
        assert_same(models(conn, run), models(conn, train(conn, "events_local")))


ROLE = "gml_node_trainer"


@pytest.fixture
def trainer(citus_cluster, events):
    """A non-superuser with rights on groupml and events (granted on the coordinator; Citus
    sends the grants to the workers), and the workers logging their connections."""
    with citus_cluster.connect() as admin:
        admin.execute(f"DROP ROLE IF EXISTS {ROLE}")
        admin.execute(f"CREATE ROLE {ROLE} LOGIN PASSWORD 'node-secret'")
        admin.execute(f"GRANT USAGE ON SCHEMA groupml TO {ROLE}")
        admin.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA groupml TO {ROLE}")
        admin.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA groupml TO {ROLE}")
        admin.execute(f"GRANT SELECT ON events TO {ROLE}")
        log_connections(citus_cluster.workers)
        try:
            yield ROLE
        finally:
            for worker in citus_cluster.workers:
                with psycopg.connect(worker.dsn(), autocommit=True) as node:
                    node.execute("SET citus.enable_ddl_propagation = off")
                    node.execute(f"DROP OWNED BY {ROLE}")
            admin.execute(f"DROP OWNED BY {ROLE}")
            admin.execute(f"DROP ROLE {ROLE}")


def grant_on_nodes(citus_cluster, role):
    """groupml's tables on a worker are the node's own (an extension's tables are not
    distributed): the node's administrator grants them."""
    for worker in citus_cluster.workers:
        with psycopg.connect(worker.dsn(), autocommit=True) as node:
            node.execute("SET citus.enable_ddl_propagation = off")
            node.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA groupml TO {role}")
            node.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA groupml TO {role}")


def test_a_node_lost_mid_run_keeps_what_was_committed_and_resumes(citus_cluster, events):
    """The node stops after the run's first committed group; the run fails naming a node,
    keeps its groups, and resumes with its run_id once the node is back."""
    down = citus_cluster.workers[0]
    spec = '{"l2": [0.0001, 0.0003, 0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1, 3, 10, 30]}'
    with citus_cluster.connect() as conn:
        # one group at a time (drivers 1): the groups after the first committed one are handed
        # out only once the node is down (halted_after_first_group holds off the next store)
        with halted_after_first_group(citus_cluster, down) as halted, pytest.raises(psycopg.Error) as info:
            conn.execute("CALL groupml.train_groups('events', ARRAY['country'], " + FEATS + ", 'clicked', 'logistic', "
                         "%s::jsonb, '{\"drivers\": 1}'::jsonb)", [spec])
        assert halted.is_set()
        err = info.value
        assert err.sqlstate[:2] in ("08", "XX", "57"), (err.sqlstate, err.diag.message_primary)
        assert "127.0.0.1:" in err.diag.message_primary and "run_id" in (err.diag.message_hint or "")
        run = conn.execute("SELECT max(run_id) FROM groupml.runs").fetchone()[0]
        kept = conn.execute("SELECT count(*) FROM groupml.models WHERE run_id = %s", [run]).fetchone()[0]
        assert kept >= 1
        assert train(conn, "events", run_id=run, spec=spec) == run
        assert conn.execute("SELECT status, groups_done FROM groupml.runs WHERE run_id = %s",
                            [run]).fetchone() == ("done", 6)
        assert_same(models(conn, run), models(conn, train(conn, "events_local", spec=spec)))
        for worker in citus_cluster.workers:     # no node snapshot is left behind
            with psycopg.connect(worker.dsn(), autocommit=True) as node:
                assert node.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0


def test_a_replicated_shard_is_read_from_its_other_placement(citus_cluster, events):
    with citus_cluster.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS events_rep")
        conn.execute("CREATE TABLE events_rep AS SELECT * FROM events_local")
        conn.execute("SET citus.shard_replication_factor = 2")
        conn.execute("SELECT create_distributed_table('events_rep', 'country', shard_count := 2)")
        conn.execute("RESET citus.shard_replication_factor")
        down = citus_cluster.workers[1]
        notices = []
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        down.halt()
        try:
            run = train(conn, "events_rep")
        finally:
            down.resume()
        assert any(f"node 127.0.0.1:{down.port} is unreachable" in n for n in notices), notices
        assert_same(models(conn, run), models(conn, train(conn, "events_local")))
        plan = json.loads(conn.execute("SELECT plan::text FROM groupml.grouped_runs WHERE run_id = %s",
                                       [run]).fetchone()[0])
        assert {s["node"] for s in plan["nodes"]["snapshots"]} == {f"127.0.0.1:{citus_cluster.workers[0].port}"}


def test_a_non_superuser_reaches_the_nodes_as_itself(citus_cluster, trainer):
    with citus_cluster.connect(trainer) as conn:
        # the node checks the caller's own rights there (not the server's)
        state, msg, hint = sql_error(
            conn, f"CALL groupml.train_groups('events', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                  f"'{GRID}'::jsonb, '{{}}'::jsonb, NULL)")
        assert state == "42501" and "permission denied for table groupml.snapshot" in msg, msg
        assert "127.0.0.1:" in msg and f"TO {trainer}" in hint
        grant_on_nodes(citus_cluster, trainer)
        run = train(conn, "events")
        assert conn.execute("SELECT count(*) FROM groupml.models WHERE run_id = %s", [run]).fetchone()[0] == 6
    for worker in citus_cluster.workers:        # each node's own log: our connections came as the caller
        with open(worker.logfile) as fh:
            log = fh.read()
        assert f"user={trainer} database=postgres application_name=groupml worker" in log
        assert f"user=postgres database=postgres application_name=groupml worker 0 run {run}" not in log


def test_a_non_superuser_never_borrows_the_servers_password_file(citus_cluster, trainer):
    """A node that asks this role for a password: the server's own .pgpass has it, and a
    connection made by the server as this role would find it there; groupml's does not."""
    import pwd

    node = citus_cluster.workers[0]
    grant_on_nodes(citus_cluster, trainer)
    home = pwd.getpwnam("postgres")
    passfile = os.path.join(home.pw_dir, ".pgpass")
    existed = os.path.exists(passfile)
    old = open(passfile).read() if existed else ""
    hba = os.path.join(node.datadir, "pg_hba.conf")
    old_hba = open(hba).read()
    try:
        with open(passfile, "w") as fh:
            fh.write(old + f"127.0.0.1:{node.port}:*:{trainer}:node-secret\n")
        os.chmod(passfile, 0o600)
        os.chown(passfile, home.pw_uid, home.pw_gid)
        with open(hba, "w") as fh:
            fh.write(f"host all {trainer} 127.0.0.1/32 scram-sha-256\n" + old_hba)
        with psycopg.connect(node.dsn(), autocommit=True) as c:
            c.execute("SELECT pg_reload_conf()")
        with citus_cluster.connect(trainer) as conn:
            state, msg, hint = sql_error(
                conn, f"CALL groupml.train_groups('events', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                      f"'{GRID}'::jsonb, '{{}}'::jsonb, NULL)")
        assert state == "08001", (state, msg)
        assert f"127.0.0.1:{node.port}" in msg and "password" in msg, msg
        assert "node-secret" not in msg and "node-secret" not in (hint or "")
    finally:
        with open(hba, "w") as fh:
            fh.write(old_hba)
        with psycopg.connect(node.dsn(), autocommit=True) as c:
            c.execute("SELECT pg_reload_conf()")
        if existed:
            with open(passfile, "w") as fh:
                fh.write(old)
        else:
            os.remove(passfile)
