"""MLP groups spread over the nodes of a Citus cluster or of postgres_fdw partitions train by
model hopping: the rows stay on their node, the configurations' states hop between the nodes
(Cerebro's randomized scheduler), and strategy => 'mop' takes the shards as its partitions."""

import json

import psycopg
import pytest

from groupml.datagen import grouped_classification
from groupml.executor.invariants import schedule_violations
from groupml.learners import visit_log_violations
from multinode import create_segmented, node_halted_when, log_connections, partition_over_servers
from pg_helpers import sql_error
from test_scaleout_train import FEATS, settled_reads, shard_reads

pytestmark = pytest.mark.integration

SPEC = {"method": "grid", "epoch_iters": 1,
        "space": {"lr": [0.01, 0.003], "layers": ["8"], "epochs": [3], "batch_size": [32], "dropout": [0.0]}}
# long enough that a node stopped after the first committed epoch stops it mid-run on any host
FAULT_EPOCHS = 60
FAULT_SPEC = dict(SPEC, space=dict(SPEC["space"], layers=["8", "6"], epochs=[FAULT_EPOCHS]))
AFTER_FIRST_EPOCH = "SELECT coalesce(max(epochs_done), 0) >= 1 FROM groupml.grouped_runs WHERE run_id > %s"


def train_mlp(conn, source, group_by="ARRAY[]::text[]", spec=SPEC, strategy="auto", run_id="NULL", options=None):
    opts = dict({"keep_snapshot": True}, **(options or {}))
    return conn.execute(f"CALL groupml.train_groups(%s, {group_by}, {FEATS}, 'clicked', 'mlp', %s::jsonb, %s::jsonb, "
                        f"{run_id}, strategy => %s)", [source, json.dumps(spec), json.dumps(opts), strategy]
                        ).fetchone()[0]


def schedule(conn, run_id):
    names = ["group_key", "pass", "worker", "shard", "row_start", "n_rows", "trials", "started", "finished", "kind"]
    rows = conn.execute(f"SELECT group_key::text, {', '.join(names[1:])} FROM groupml.run_schedule "
                        "WHERE run_id = %s ORDER BY started", [run_id]).fetchall()
    return [dict(zip(names, r)) for r in rows]


def plan_of(conn, run_id):
    strategy, plan = conn.execute("SELECT strategy, plan::text FROM groupml.grouped_runs WHERE run_id = %s",
                                  [run_id]).fetchone()
    return strategy, json.loads(plan)


def check_hops(conn, run_id, n_parts, strategy, epochs=3, n_trials=2):
    """The run is done with ``strategy``; every group's visit log keeps MOP's rules over its
    ``n_parts`` partitions; returns (schedule, plan)."""
    assert conn.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == "done"
    got, plan = plan_of(conn, run_id)
    assert got == strategy
    log = schedule(conn, run_id)
    sizes = dict(conn.execute("SELECT g.group_key::text, g.n_train FROM groupml.snapshot_groups g JOIN "
                              "groupml.grouped_runs r USING (snapshot_id) WHERE r.run_id = %s", [run_id]).fetchall())
    assert schedule_violations(log, sizes, {}) == []
    for gkey in sizes:
        mine = [e for e in log if e["group_key"] == gkey]
        v = [{"trial": e["trials"][0], "epoch": e["pass"], "shard": e["shard"], "worker": e["worker"],
              "start": e["started"], "end": e["finished"]} for e in mine if e["kind"] == "visit"]
        trials = {x["trial"] for x in v}
        assert len(trials) == n_trials, gkey
        assert visit_log_violations(v, n_parts, {t: epochs for t in trials}) == [], gkey
    return log, plan


def node_of(plan):
    """Pool worker -> the node its snapshot is on."""
    return {s["worker"]: s["node"] for s in plan["nodes"]["snapshots"]}


def best_replays(conn, run_id):
    """Each group's best trial replayed (groupml.replay) == its stored model, bit for bit."""
    rows = conn.execute("SELECT group_key::text, (fit).trials, (fit).model FROM groupml.models WHERE run_id = %s",
                        [run_id]).fetchall()
    assert rows
    for gkey, trials, model in rows:
        tid = [t for t in trials if t["is_best"]][0]["trial_id"]
        again = conn.execute("SELECT groupml.replay(%s, %s, %s::jsonb)", [run_id, tid, gkey]).fetchone()[0]
        assert bytes(again) == bytes(model), gkey


def drop_kept_snapshots(nodes):
    """The kept node snapshots (keep_snapshot) stay on the nodes until dropped there."""
    for node in nodes:
        with psycopg.connect(node.dsn(), autocommit=True) as c:
            c.execute("DELETE FROM groupml.snapshots")


def halted_after_first_epoch(cluster, node, start):
    """``node`` stops once the run after ``start`` committed its first epoch (a context)."""
    return node_halted_when(cluster, node, AFTER_FIRST_EPOCH, [start], tries=12000, pause=0.005)


# ---------------------------------------------------------------- Citus
@pytest.fixture(scope="module")
def hops(citus_cluster):
    """``hops`` distributed by id over 4 shards (every group on every shard), ``hops_rep`` the
    same rows over 2 shards with two placements each (one on each worker)."""
    data = grouped_classification(3000, 6, 4, seed=17, exponent=0.6)
    with citus_cluster.connect() as conn:
        for table in ("hops", "hops_rep"):
            create_segmented(conn, table, data)
        conn.execute("SELECT create_distributed_table('hops', 'id', shard_count := 4)")
        conn.execute("SET citus.shard_replication_factor = 2")
        conn.execute("SELECT create_distributed_table('hops_rep', 'id', shard_count := 2)")
    try:
        yield data
    finally:
        drop_kept_snapshots(citus_cluster.workers)


@pytest.mark.citus
def test_an_mlp_group_spread_over_nodes_hops_between_them(citus_cluster, hops):
    with citus_cluster.connect() as conn:
        port_of = dict(conn.execute("SELECT shardid, nodeport FROM citus_shards WHERE table_name = "
                                    "'hops'::regclass").fetchall())
        rows_on = {}
        for shard, n in conn.execute("SELECT get_shard_id_for_distribution_column('hops', id), count(*) FROM hops "
                                     "GROUP BY 1").fetchall():
            rows_on[port_of[shard]] = rows_on.get(port_of[shard], 0) + n
        assert set(rows_on) == {w.port for w in citus_cluster.workers}
        before = shard_reads(citus_cluster, conn, "hops")
        coordinator_reads = conn.execute("SELECT pg_stat_get_tuples_returned('hops'::regclass)").fetchone()[0]
        run = train_mlp(conn, "hops", group_by="ARRAY['segment']")
        after = settled_reads(citus_cluster, conn, "hops", before, rows_on)
        conn.execute("SELECT pg_stat_clear_snapshot()")
        # the nodes read their shards' rows; the coordinator's shell table was not read
        assert all(after[p] - before[p] >= rows_on[p] for p in rows_on), (before, after, rows_on)
        assert conn.execute("SELECT pg_stat_get_tuples_returned('hops'::regclass)").fetchone()[0] == coordinator_reads
        # the coordinator's snapshot holds no training row of the spread groups (validation rows only)
        assert conn.execute("SELECT sum(b.n_rows - b.n_val) FROM groupml.snapshot_blocks b JOIN groupml.grouped_runs "
                            "r USING (snapshot_id) WHERE r.run_id = %s", [run]).fetchone()[0] == 0

        log, plan = check_hops(conn, run, 4, "grouped")
        assert "MLP model hopping" in plan["explanation"]
        assert all(len(s) == 4 for s in plan["nodes"]["groups"].values())      # both groups on every shard
        nodes = node_of(plan)
        for gkey in {e["group_key"] for e in log}:
            mine = [e for e in log if e["group_key"] == gkey]
            home = {e["shard"]: e["worker"] for e in mine if e["kind"] == "stats"}
            visits = [e for e in mine if e["kind"] == "visit"]
            # rows stay put: a partition is visited on the node holding it, and the states hop
            # between both nodes
            assert all(e["worker"] == home[e["shard"]] for e in visits)
            assert {nodes[e["worker"]] for e in visits} == {f"127.0.0.1:{w.port}" for w in citus_cluster.workers}
        moved = sum(m["sent"] + m["received"] for m in plan["moved"].values())
        assert moved > 0
        best_replays(conn, run)


@pytest.mark.citus
def test_mop_over_a_replicated_citus_table_goes_on_when_a_node_stops(citus_cluster, hops):
    down, up = citus_cluster.workers[1], citus_cluster.workers[0]
    with citus_cluster.connect() as conn:
        start = conn.execute("SELECT coalesce(max(run_id), 0) FROM groupml.runs").fetchone()[0]
        with halted_after_first_epoch(citus_cluster, down, start) as halted:
            run = train_mlp(conn, "hops_rep", spec=FAULT_SPEC, strategy="mop", options={"checkpoint_every_s": 0})
        assert halted.is_set()
        log, plan = check_hops(conn, run, 2, "mop", epochs=FAULT_EPOCHS, n_trials=4)
        nodes = node_of(plan)
        # every shard has a placement on both nodes: 2 holders + 2 replicas
        assert sorted(nodes.values()) == sorted(2 * [f"127.0.0.1:{w.port}" for w in citus_cluster.workers])
        visits = [e for e in log if e["kind"] == "visit"]
        home = {e["shard"]: e["worker"] for e in log if e["kind"] == "stats"}
        lost = [s for s, w in home.items() if nodes[w] == f"127.0.0.1:{down.port}"]
        assert lost
        # the partition whose holder stopped went on on its other placement
        assert any(e["shard"] in lost and nodes[e["worker"]] == f"127.0.0.1:{up.port}" for e in visits)
        best_replays(conn, run)


@pytest.mark.citus
def test_a_node_lost_mid_hop_names_it_and_the_run_resumes(citus_cluster, hops):
    down = citus_cluster.workers[0]
    spec = dict(FAULT_SPEC, space=dict(FAULT_SPEC["space"], layers=["8"]))
    with citus_cluster.connect() as conn:
        start = conn.execute("SELECT coalesce(max(run_id), 0) FROM groupml.runs").fetchone()[0]
        with halted_after_first_epoch(citus_cluster, down, start) as halted, pytest.raises(psycopg.Error) as info:
            train_mlp(conn, "hops", spec=spec, strategy="mop", options={"checkpoint_every_s": 0})
        assert halted.is_set()
        err = info.value
        assert err.sqlstate == "08001", (err.sqlstate, err.diag.message_primary)
        assert f"127.0.0.1:{down.port}" in err.diag.message_primary and "no live node" in err.diag.message_primary
        assert "run_id =>" in (err.diag.message_hint or "") and "replication" in err.diag.message_hint
        run = conn.execute("SELECT max(run_id) FROM groupml.runs").fetchone()[0]
        assert conn.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run]).fetchone()[0] == "failed"
        assert train_mlp(conn, "hops", spec=spec, strategy="mop", run_id=run) == run
        check_hops(conn, run, 4, "mop", epochs=FAULT_EPOCHS)
        best_replays(conn, run)


@pytest.mark.citus
def test_explain_shows_the_hop_plan_across_the_nodes(citus_cluster, hops):
    with citus_cluster.connect() as conn:
        rows = conn.execute(f"SELECT strategy, chosen, explanation FROM groupml.explain_train_groups('hops', "
                            f"ARRAY['segment'], {FEATS}, 'clicked', 'mlp', %s::jsonb)", [json.dumps(SPEC)]).fetchall()
        nodes = [r for r in rows if r[0] == "nodes"]
        assert len(nodes) == 4 and all(r[1] for r in nodes)
        text = nodes[0][2]
        assert "2 spread over nodes with MLP model hopping" in text and "no training rows" in text
        # 2 configs x 3 epochs x 4 partitions per group, 2 groups
        assert "48 visits" in text and "hop plan of group" in text
        assert all(f"127.0.0.1:{w.port}" in text for w in citus_cluster.workers)
        mop = conn.execute(f"SELECT explanation FROM groupml.explain_train_groups('hops', ARRAY[]::text[], {FEATS}, "
                           f"'clicked', 'mlp', %s::jsonb, '{{}}', 2, 'mop') WHERE strategy = 'nodes' LIMIT 1",
                           [json.dumps(SPEC)]).fetchone()[0]
        assert "1 spread over nodes with MLP model hopping: 24 visits" in mop


@pytest.mark.citus
def test_mop_requests_a_distributed_table_cannot_take_are_refused(citus_cluster, hops):
    with citus_cluster.connect() as conn:
        runs = conn.execute("SELECT count(*) FROM groupml.runs").fetchone()[0]
        state, msg, hint = sql_error(
            conn, f"CALL groupml.train_groups('hops', ARRAY[]::text[], {FEATS}, 'clicked', 'mlp', '{{}}'::jsonb, "
                  f"'{{\"replicas\": 2}}'::jsonb, NULL, strategy => 'mop')")
        assert state == "22023" and "'replicas'" in msg and "placements" in msg and "replication_factor" in hint
        state, msg, hint = sql_error(
            conn, f"CALL groupml.train_groups('hops', ARRAY[]::text[], {FEATS}, 'clicked', 'logistic', '{{}}'::jsonb, "
                  f"'{{}}'::jsonb, NULL, strategy => 'mop')")
        assert state == "0A000" and "strategy" in msg and "partial sums" in hint, msg
        assert conn.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == runs
        # a run on the nodes is not steered (its workers are the shards' holders)
        run = train_mlp(conn, "hops", strategy="mop", options={"keep_snapshot": False})
        for stmt, args in (("SELECT groupml.mop_add_trial(%s, %s::jsonb)", [run, '{"lr": 0.01, "epochs": 1}']),
                           ("SELECT groupml.mop_add_workers(%s, 1)", [run])):
            state, msg, hint = sql_error(conn, stmt, args)
            assert state == "0A000" and "nodes of a distributed table" in msg and hint, msg


# ---------------------------------------------------------------- postgres_fdw
@pytest.fixture(scope="module")
def fdw_hops(fdw_shards):
    """``fdw_hops`` partitioned by country over the three servers (two countries each)."""
    data = grouped_classification(3000, 6, 4, seed=19, exponent=0.6)
    keys = sorted({str(k) for k in data["grp"]})
    parts = [keys[0:2], keys[2:4], keys[4:6]]
    with fdw_shards.connect() as conn:
        conn.execute("DROP TABLE IF EXISTS fdw_hops CASCADE")
        create_segmented(conn, "fdw_hops_local", data)
        partition_over_servers(fdw_shards, conn, "fdw_hops", data, parts, segmented=True)
    log_connections(fdw_shards.shards)
    try:
        yield parts
    finally:
        drop_kept_snapshots(fdw_shards.shards)


def test_mlp_groups_hop_over_fdw_partitions_and_mop_takes_them_as_partitions(fdw_shards, fdw_hops):
    with fdw_shards.connect() as conn:
        run = train_mlp(conn, "fdw_hops", group_by="ARRAY['segment']")
        log, plan = check_hops(conn, run, 3, "grouped")
        nodes = node_of(plan)
        assert sorted(nodes.values()) == sorted(f"127.0.0.1:{s.port}" for s in fdw_shards.shards)
        home = {(e["group_key"], e["shard"]): e["worker"] for e in log if e["kind"] == "stats"}
        assert all(e["worker"] == home[(e["group_key"], e["shard"])] for e in log if e["kind"] == "visit")
        best_replays(conn, run)

        mop = train_mlp(conn, "fdw_hops", strategy="mop")
        log, plan = check_hops(conn, mop, 3, "mop")
        best_replays(conn, mop)
        # each server holds its partition's training rows in its own snapshot; the coordinator
        # kept only the validation rows
        n_train = conn.execute("SELECT n_train FROM groupml.snapshot_groups g JOIN groupml.grouped_runs r "
                               "USING (snapshot_id) WHERE r.run_id = %s", [mop]).fetchone()[0]
        on_servers = 0
        for shard, s in zip(fdw_shards.shards, sorted(plan["nodes"]["snapshots"], key=lambda s: s["worker"])):
            with psycopg.connect(shard.dsn(), autocommit=True) as remote:
                on_servers += remote.execute("SELECT n_train FROM groupml.snapshot_groups WHERE snapshot_id = %s",
                                             [s["snapshot"]]).fetchone()[0]
            with open(shard.logfile) as fh:          # the worker connected to the server itself
                assert f"application_name=groupml worker {s['worker']} run {mop}" in fh.read()
        assert on_servers == n_train
        assert conn.execute("SELECT sum(b.n_rows - b.n_val) FROM groupml.snapshot_blocks b JOIN groupml.grouped_runs "
                            "r USING (snapshot_id) WHERE r.run_id = %s", [mop]).fetchone()[0] == 0
