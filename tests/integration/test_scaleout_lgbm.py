"""LightGBM groups spread over the nodes of a Citus cluster or over postgres_fdw servers: one
rank per node, reading that node's rows, and the model LightGBM's data-parallel mode gives
on that partitioning."""

import json
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification
from groupml.learners import free_ports, load_model, mask_of_hash, row_hash_and_order
from groupml.learners._lgbm import train_lightgbm_rank
from multinode import halted_after_first_group, partition_over_servers
from test_scaleout_train import reads_before, settled_reads

pytestmark = [pytest.mark.integration, pytest.mark.citus]

FEATS = "ARRAY['f1', 'f2', 'f3', 'f4']"
COLS = "f1, f2, f3, f4, clicked::int::float8"
SEED = 3
PARAMS = {"num_leaves": 7, "num_boost_round": 5, "min_data_in_leaf": 10, "learning_rate": 0.3}
SPEC = json.dumps({"method": "grid", "epoch_iters": 5, "space": {k: [v] for k, v in PARAMS.items()}})
N_ROWS = 3000


def add_parts(conn, table):
    """``part``: 3 groups and ``part8``: 8 groups that every shard (partition) holds rows of."""
    conn.execute(f"ALTER TABLE {table} ADD COLUMN part int, ADD COLUMN part8 int")
    conn.execute(f"UPDATE {table} SET part = id % 3, part8 = id % 8")


@pytest.fixture(scope="module")
def clicks(citus_cluster):
    """``lgbm_clicks`` distributed by country over 4 shards on the 2 workers."""
    data = grouped_classification(N_ROWS, 6, 4, seed=21, exponent=0.6)
    with citus_cluster.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS lgbm_clicks")
        create_table(conn, "lgbm_clicks", data)
        add_parts(conn, "lgbm_clicks")
        conn.execute("SELECT create_distributed_table('lgbm_clicks', 'country', shard_count := 4)")
    return data


@pytest.fixture(scope="module")
def sales(fdw_shards):
    """``lgbm_sales`` partitioned by country over the three servers (two countries each)."""
    data = grouped_classification(N_ROWS, 6, 4, seed=23, exponent=0.6)
    keys = sorted({str(k) for k in data["grp"]})
    parts = [keys[0:2], keys[2:4], keys[4:6]]
    with fdw_shards.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS lgbm_sales, lgbm_sales_local CASCADE")
        create_table(conn, "lgbm_sales_local", data)
        add_parts(conn, "lgbm_sales_local")
        partition_over_servers(fdw_shards, conn, "lgbm_sales", data, parts,
                               prepare=lambda remote: add_parts(remote, "lgbm_sales"))
    return parts


def train(conn, source, key, run_id="NULL", spec=SPEC):
    return conn.execute(f"CALL groupml.train_groups({source!r}, ARRAY['{key}'], {FEATS}, 'clicked', 'lightgbm', "
                        f"%s::jsonb, %s::jsonb, {run_id})", [spec, json.dumps({"seed": SEED})]).fetchone()[0]


def stored_models(conn, run_id, key):
    return {k: load_model(bytes(m)) for k, m in conn.execute(
        f"SELECT group_key->>'{key}', (fit).model FROM groupml.models WHERE run_id = %s", [run_id]).fetchall()}


def plan_of(conn, run_id):
    return json.loads(conn.execute("SELECT plan::text FROM groupml.grouped_runs WHERE run_id = %s",
                                   [run_id]).fetchone()[0])


def rank_nodes(conn, run_id, key):
    """{group: [node of rank 0, node of rank 1, ...]} from the run's schedule, per LightGBM job."""
    holders = plan_of(conn, run_id)["nodes"]["holders"]
    jobs = {}
    for g, job, shard, worker in conn.execute(
            f"SELECT group_key->>'{key}', pass, shard, worker FROM groupml.run_schedule "
            "WHERE run_id = %s AND kind = 'rank' ORDER BY 1, 2, 3", [run_id]).fetchall():
        jobs.setdefault((g, job), []).append(holders[worker]["node"])
    return jobs


def reference_model(node_rows, params):
    """LightGBM's data-parallel model with rank r holding the training rows of ``node_rows[r]``
    (the same holdout and row order as the snapshots: content hash, seeded order): the
    one-server ranks path's training function, one process per rank on loopback."""
    shards = []
    for M in node_rows:
        X, y = M[:, :4], M[:, 4]
        h, order = row_hash_and_order(X, y, SEED)
        keep = order[~mask_of_hash(h, 0.2)[order]]
        shards.append((np.ascontiguousarray(X[keep]), np.ascontiguousarray(y[keep])))
    machines = [f"127.0.0.1:{p}" for p in free_ports(len(shards))]
    with ProcessPoolExecutor(len(shards), mp_context=multiprocessing.get_context("spawn")) as ex:
        futs = [ex.submit(train_lightgbm_rank, "lightgbm", X, y, params, int(params["num_boost_round"]), machines, r,
                          timeout_minutes=1) for r, (X, y) in enumerate(shards)]
        texts = [f.result(timeout=180) for f in futs]
    return texts[0]


def trees(text):
    return text[text.index("Tree=0"):text.index("end of trees")]


def assert_equals_reference(model, ref_text, rows):
    """The stored model is the reference's trees exactly (and so scores every row alike)."""
    from groupml.learners._lgbm import LightGBMModel

    ref = LightGBMModel("lightgbm", model.params, ref_text)
    assert model.num_trees == ref.num_trees == PARAMS["num_boost_round"]
    assert trees(model.model_text) == trees(ref_text)
    assert np.array_equal(model.decision_function(rows[:, :4]), ref.decision_function(rows[:, :4]))


def citus_node_rows(conn, table, key, group, port):
    shards = [r[0] for r in conn.execute("SELECT shardid FROM citus_shards WHERE table_name = %s::regclass AND "
                                         "nodeport = %s", [table, port]).fetchall()]
    return np.array(conn.execute(
        f"SELECT {COLS} FROM {table} WHERE {key} = %s AND get_shard_id_for_distribution_column(%s, country) "
        "= ANY(%s) ORDER BY id", [int(group), table, shards]).fetchall(), dtype=np.float64)


def test_a_group_spread_over_citus_nodes_trains_one_rank_per_node(citus_cluster, clicks):
    ports = [w.port for w in citus_cluster.workers]
    with citus_cluster.connect() as conn:
        rows_on, before, coordinator_reads = reads_before(citus_cluster, conn, "lgbm_clicks")
        run = train(conn, "lgbm_clicks", "part")
        assert conn.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run]).fetchone()[0] == "done"
        after = settled_reads(citus_cluster, conn, "lgbm_clicks", before, rows_on)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        # the coordinator's shell table read nothing; each worker read its shards' rows
        assert conn.execute("SELECT pg_stat_get_tuples_returned('lgbm_clicks'::regclass)").fetchone()[0] \
            == coordinator_reads
        assert all(after[p] - before[p] >= rows_on[p] for p in rows_on), (before, after, rows_on)
        plan = plan_of(conn, run)
        assert all(len(s) == 4 for s in plan["nodes"]["groups"].values())       # every shard holds every group
        assert "LightGBM data-parallel, one rank per node" in plan["explanation"]
        jobs = rank_nodes(conn, run, "part")
        assert {g for g, _ in jobs} == {"0", "1", "2"}
        for nodes in jobs.values():              # one rank per node, never two on one node
            assert sorted(nodes) == sorted(f"127.0.0.1:{p}" for p in ports), nodes
        # the ports each rank listens on were found on its own node first
        assert conn.execute("SELECT count(*) FROM groupml.run_schedule WHERE run_id = %s AND kind = 'ports'",
                            [run]).fetchone()[0] == 2 * 3
        # requests, the validation rows of the spread groups and one model text per job: less
        # than the training rows alone weigh
        moved = sum(m["sent"] + m["received"] for m in plan["moved"].values())
        assert 0 < moved < N_ROWS * 0.8 * 5 * 8, moved
        for worker in citus_cluster.workers:
            with psycopg.connect(worker.dsn(), autocommit=True) as node:
                assert node.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0

        models = stored_models(conn, run, "part")
        all_rows = np.array(conn.execute(f"SELECT {COLS} FROM lgbm_clicks").fetchall(), dtype=np.float64)
        for (g, _), nodes in jobs.items():
            node_rows = [citus_node_rows(conn, "lgbm_clicks", "part", g, int(n.rsplit(":", 1)[1])) for n in nodes]
            assert sum(len(m) for m in node_rows) == N_ROWS // 3
            assert_equals_reference(models[g], reference_model(node_rows, models[g].params), all_rows)


def test_a_group_spread_over_fdw_servers_trains_one_rank_per_server(fdw_shards, sales):
    with fdw_shards.connect() as conn:
        conn.execute("SET enable_partitionwise_aggregate = on")
        run = train(conn, "lgbm_sales", "part")
        assert conn.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run]).fetchone()[0] == "done"
        plan = plan_of(conn, run)
        servers = [h["name"].split(" ")[0] for h in plan["nodes"]["holders"]]
        assert servers == fdw_shards.servers
        jobs = rank_nodes(conn, run, "part")
        nodes = {f"127.0.0.1:{s.port}": i for i, s in enumerate(fdw_shards.shards, 1)}
        assert all(sorted(ns) == sorted(nodes) for ns in jobs.values()), jobs      # a rank on each server
        moved = sum(m["sent"] + m["received"] for m in plan["moved"].values())
        assert 0 < moved < N_ROWS * 0.8 * 5 * 8, moved
        models = stored_models(conn, run, "part")
        all_rows = np.array(conn.execute(f"SELECT {COLS} FROM lgbm_sales_local").fetchall(), dtype=np.float64)
        for (g, _), ns in jobs.items():
            node_rows = [np.array(conn.execute(f"SELECT {COLS} FROM lgbm_sales_{nodes[n]} WHERE part = %s",
                                               [int(g)]).fetchall(), dtype=np.float64) for n in ns]
            assert_equals_reference(models[g], reference_model(node_rows, models[g].params), all_rows)


def test_explain_on_fdw_partitions_shows_servers_partitions_and_bytes(fdw_shards, sales):
    with fdw_shards.connect() as conn:
        rows = conn.execute(f"SELECT strategy, chosen, worker, shards, explanation FROM groupml.explain_train_groups("
                            f"'lgbm_sales', ARRAY['part'], {FEATS}, 'clicked', 'lightgbm', %s::jsonb)",
                            [SPEC]).fetchall()
        nodes = [r for r in rows if r[0] == "nodes"]
        assert len(nodes) == 3 and all(r[1] for r in nodes)
        for r, server, shard, i in zip(nodes, fdw_shards.servers, fdw_shards.shards, (1, 2, 3)):
            assert r[3]["server"] == server and r[3]["partition"] in (f"lgbm_sales_{i}", f"public.lgbm_sales_{i}")
            assert r[3]["node"] == f"127.0.0.1:{shard.port}"
            want = dict(conn.execute(f"SELECT part, count(*) FROM lgbm_sales_{i} GROUP BY part").fetchall())
            assert {g["group"]["part"]: g["rows"] for g in r[3]["groups"]} == want
        assert sum(g["rows"] for r in nodes for g in r[3]["groups"]) == N_ROWS
        text = nodes[0][4]
        assert "3 partitions on 3 servers" in text and "3 spread over servers" in text, text
        assert "LightGBM data-parallel, one rank per node" in text and "no training rows" in text
        moved = int(text.split("moves about ", 1)[1].split(" ", 1)[0])
        gather = next(r for r in rows if r[0] == "gather")
        assert not gather[1] and f"{N_ROWS * 5 * 8} bytes" in gather[4]
        assert 0 < moved < N_ROWS * 5 * 8
        whole = conn.execute(f"SELECT explanation FROM groupml.explain_train_groups('lgbm_sales', ARRAY['country'], "
                             f"{FEATS}, 'clicked', 'logistic', '{{}}'::jsonb) WHERE strategy = 'nodes' LIMIT 1"
                             ).fetchone()[0]
        assert "6 groups whole on one server, 0 spread" in whole, whole


def test_explain_of_a_spread_lightgbm_group_on_citus(citus_cluster, clicks):
    with citus_cluster.connect() as conn:
        text = conn.execute(f"SELECT explanation FROM groupml.explain_train_groups('lgbm_clicks', ARRAY['part'], "
                            f"{FEATS}, 'clicked', 'lightgbm', %s::jsonb) WHERE strategy = 'nodes' LIMIT 1",
                            [SPEC]).fetchone()[0]
        assert "4 shards on 2 nodes" in text and "3 spread over nodes with LightGBM data-parallel" in text, text


def lose_a_node_mid_run(cluster, nodes, down, source):
    """``down`` stops after the run's first committed group: the run fails with 08001 naming
    that node, keeps its groups, and resumes with its run_id to the models of an uninterrupted
    run; no node snapshot is left behind (``nodes``: every node's cluster)."""
    spec = json.dumps({"method": "grid", "epoch_iters": 5,
                       "space": {"num_leaves": [3, 5, 7], "num_boost_round": [5], "min_data_in_leaf": [10]}})
    with cluster.connect() as conn:
        with halted_after_first_group(cluster, down) as halted:
            with pytest.raises(psycopg.Error) as info:
                train(conn, source, "part8", spec=spec)
        assert halted.is_set()
        err = info.value
        assert err.sqlstate == "08001", (err.sqlstate, err.diag.message_primary)
        assert f"node 127.0.0.1:{down.port} was lost" in err.diag.message_primary, err.diag.message_primary
        assert "run_id" in (err.diag.message_hint or "")
        run = conn.execute("SELECT max(run_id) FROM groupml.runs").fetchone()[0]
        assert conn.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run]).fetchone()[0] == "failed"
        kept = conn.execute("SELECT count(*) FROM groupml.models WHERE run_id = %s", [run]).fetchone()[0]
        assert 1 <= kept < 8
        assert train(conn, source, "part8", run_id=run, spec=spec) == run
        assert conn.execute("SELECT status, groups_done FROM groupml.runs WHERE run_id = %s",
                            [run]).fetchone() == ("done", 8)
        again = stored_models(conn, train(conn, source, "part8", spec=spec), "part8")
        resumed = stored_models(conn, run, "part8")
        assert set(resumed) == set(again) and len(again) == 8
        for g in again:
            assert resumed[g].params == again[g].params and trees(resumed[g].model_text) == trees(again[g].model_text)
    for node in nodes:
        with psycopg.connect(node.dsn(), autocommit=True) as c:
            assert c.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0


def test_a_citus_node_lost_mid_run_is_named_and_the_run_resumes(citus_cluster, clicks):
    lose_a_node_mid_run(citus_cluster, citus_cluster.workers, citus_cluster.workers[1], "lgbm_clicks")


def test_an_fdw_server_lost_mid_run_is_named_and_the_run_resumes(fdw_shards, sales):
    lose_a_node_mid_run(fdw_shards, fdw_shards.shards, fdw_shards.shards[2], "lgbm_sales")
