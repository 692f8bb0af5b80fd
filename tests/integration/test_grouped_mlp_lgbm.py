"""train_groups with workers for the sequential (MLP) and sampling (LightGBM) patterns."""

import json

import numpy as np
import pytest

from groupml.executor.invariants import schedule_violations
from groupml.learners import load_model, replay
from groupml.learners._sharded import state_weights
from pg_helpers import sql_error

pytestmark = pytest.mark.integration

FEATS = "ARRAY['f1', 'f2', 'f3']"
# group sizes chosen so that, with p = 2, wrap-around (Alg. 1, MLP) cuts group 'b' over both
# workers and constrained wrap-around (Alg. 2, LightGBM) splits 'a' (a group is cut into
# round(rows * p / n) shards)
MLP_SIZES = {"a": 600, "b": 600, "c": 400}
LGBM_SIZES = {"a": 1200, "b": 200, "c": 100}


@pytest.fixture
def shop(db, request):
    sizes = getattr(request, "param", MLP_SIZES)
    db.execute("CREATE TABLE shop (country text, f1 float8, f2 float8, f3 float8, clicked int)")
    rng = np.random.default_rng(5)
    rows = []
    for g, n in sizes.items():
        X = rng.normal(size=(n, 3))
        z = 1.5 * X[:, 0] - X[:, 1] + 0.5 * X[:, 0] * X[:, 2] + rng.normal(scale=0.5, size=n)
        rows += [(g, *map(float, x), int(v > 0)) for x, v in zip(X, z)]
    with db.cursor() as cur:
        with cur.copy("COPY shop FROM STDIN") as cp:
            for r in rows:
                cp.write_row(r)
    return rows


def call(db, model, spec, workers=2, strategy="grouped", options='{"keep_snapshot": true, "placement": "wrap_around"}',
         run_id="NULL"):
    return db.execute(f"CALL groupml.train_groups('shop', ARRAY['country'], {FEATS}, 'clicked', %s, "
                      f"%s::jsonb, %s::jsonb, {run_id}, workers => {workers}, strategy => %s)",
                      [model, spec, options, strategy]).fetchone()[0]


def schedule(db, run_id):
    rows = db.execute("SELECT group_key::text, pass, worker, shard, row_start, n_rows, trials, started, finished, "
                      "kind FROM groupml.run_schedule WHERE run_id = %s ORDER BY started", [run_id]).fetchall()
    names = ["group_key", "pass", "worker", "shard", "row_start", "n_rows", "trials", "started", "finished", "kind"]
    return [dict(zip(names, r)) for r in rows]


def snapshot_rows(db, run_id):
    """group_key -> (n_train, the group's training rows in snapshot order as an (n, 4) array)."""
    sid = db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()[0]
    out = {}
    for gno, gkey, n_train in db.execute("SELECT group_no, group_key::text, n_train FROM groupml.snapshot_groups "
                                         "WHERE snapshot_id = %s", [sid]).fetchall():
        parts = []
        for n_val, data in db.execute("SELECT n_val, data FROM groupml.snapshot_blocks WHERE snapshot_id = %s "
                                      "AND group_no = %s ORDER BY block_no", [sid, gno]).fetchall():
            a = np.frombuffer(bytes(data), dtype=">f8").astype(np.float64).reshape(-1, 4)
            parts.append(a[n_val:])
        out[gkey] = (n_train, np.concatenate(parts))
    return out


def check_invariants(db, run_id):
    log = schedule(db, run_id)
    sizes = {k: n for k, (n, _) in snapshot_rows(db, run_id).items()}
    assert schedule_violations(log, sizes, {}) == []
    return log


def test_mlp_hops_and_replay_is_bit_for_bit(db, shop):
    spec = json.dumps({"method": "grid", "epoch_iters": 1,
                       "space": {"lr": [0.01, 0.003], "layers": ["8"], "epochs": [3], "batch_size": [64],
                                 "dropout": [0.1]}})
    run_id = call(db, "mlp", spec)
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == "done"
    log = check_invariants(db, run_id)
    visits = [e for e in log if e["kind"] == "visit"]
    split = {e["group_key"] for e in visits}
    assert split, "wrap-around should cut one group over both workers"
    unsplit = {e["group_key"] for e in log if e["kind"] == "fit"}
    assert unsplit and not unsplit & split
    assert all(e["kind"] != "pass" for e in log)
    data = snapshot_rows(db, run_id)
    for gkey in split:
        gv = [e for e in visits if e["group_key"] == gkey]
        assert len({e["worker"] for e in gv}) == 2        # the config hopped between workers
        fit_trials, model = db.execute(
            "SELECT (fit).trials, (fit).model FROM groupml.models WHERE run_id = %s AND group_key = %s::jsonb",
            [run_id, gkey]).fetchone()
        best = [t for t in fit_trials if t["is_best"]][0]
        n_train, M = data[gkey]
        assert M.shape[0] == n_train
        bounds = sorted({(e["shard"], e["row_start"], e["n_rows"]) for e in gv})
        shards = [(np.ascontiguousarray(M[s:s + n, :3]), np.ascontiguousarray(M[s:s + n, 3]))
                  for _, s, n in bounds]
        mine = [(e["pass"], e["shard"], e["worker"]) for e in gv if e["trials"] == [best["trial_id"]]]
        assert len(mine) == 3 * len(shards)               # 3 epochs x every shard once
        state = replay(mine, shards, best["params"], family="mlp")
        want = state_weights(state)
        got = load_model(bytes(model)).net.state_dict()
        assert set(want) <= set(got)
        for k, v in want.items():
            assert np.array_equal(v, got[k].detach().numpy()), k
    # every trial's per-epoch losses were written
    assert db.execute("SELECT count(*) FROM groupml.run_epochs WHERE run_id = %s", [run_id]).fetchone()[0] == 3 * 2 * 3


@pytest.mark.parametrize("shop", [LGBM_SIZES], indirect=True)
def test_lightgbm_distributed_matches_single_node(db, shop):
    from groupml.learners import train_lightgbm
    from groupml.learners._lgbm import LightGBMModel
    from groupml.learners._metrics import METRICS

    params = {"num_leaves": 7, "num_boost_round": 15, "min_data_in_leaf": 10, "learning_rate": 0.2}
    spec = json.dumps({"method": "grid", "epoch_iters": 5, "space": {k: [v] for k, v in params.items()}})
    run_id = call(db, "lightgbm", spec)
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == "done"
    log = check_invariants(db, run_id)
    ranks = [e for e in log if e["kind"] == "rank"]
    split = {e["group_key"] for e in ranks}
    assert split == {'{"country": "a"}'}
    assert {e["worker"] for e in ranks} == {0, 1}
    # each rank's worker chose its listen port first (one 'ports' task per worker and job batch)
    ports = [e for e in log if e["kind"] == "ports"]
    assert {e["worker"] for e in ports} == {0, 1} and {e["group_key"] for e in ports} == split
    assert all(p["finished"] <= min(r["started"] for r in ranks if r["pass"] == p["pass"]) for p in ports)
    assert {e["group_key"] for e in log if e["kind"] == "fit"} == {'{"country": "b"}', '{"country": "c"}'}
    data = snapshot_rows(db, run_id)
    sid = db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()[0]
    for gkey in split:
        n_train, M = data[gkey]
        model = db.execute("SELECT (fit).model FROM groupml.models WHERE run_id = %s AND group_key = %s::jsonb",
                           [run_id, gkey]).fetchone()[0]
        ours = load_model(bytes(model))
        assert ours.num_trees == 15
        single = LightGBMModel("lightgbm", params, train_lightgbm("lightgbm", M[:, :3], M[:, 3], params))
        gno = db.execute("SELECT group_no FROM groupml.snapshot_groups WHERE snapshot_id = %s AND "
                         "group_key = %s::jsonb", [sid, gkey]).fetchone()[0]
        val = [np.frombuffer(bytes(d), dtype=">f8").astype(np.float64).reshape(-1, 4)[:nv] for nv, d in db.execute(
            "SELECT n_val, data FROM groupml.snapshot_blocks WHERE snapshot_id = %s AND group_no = %s "
            "ORDER BY block_no", [sid, gno]).fetchall()]
        V = np.concatenate(val)
        auc_ours = METRICS["auc"](V[:, 3], ours.decision_function(V[:, :3]))
        auc_single = METRICS["auc"](V[:, 3], single.decision_function(V[:, :3]))
        assert auc_single > 0.8
        assert abs(auc_ours - auc_single) < 0.03
    stored = db.execute("SELECT (fit).score, (fit).metric FROM groupml.models WHERE run_id = %s", [run_id]).fetchall()
    assert all(m == "logloss" and s is not None for s, m in stored)


def test_gtp_trains_every_group_on_one_worker(db, shop):
    spec = json.dumps({"method": "grid", "epoch_iters": 5,
                       "space": {"num_leaves": [4, 8], "num_boost_round": [10], "min_data_in_leaf": [10]}})
    run_id = call(db, "lightgbm", spec, strategy="gtp")
    log = check_invariants(db, run_id)
    assert sorted(e["kind"] for e in log) == ["fit"] * 3
    assert db.execute("SELECT count(*) FROM groupml.models WHERE run_id = %s AND (fit).status = 'ok'",
                      [run_id]).fetchone()[0] == 3
    assert db.execute("SELECT count(*) FROM groupml.trials WHERE run_id = %s", [run_id]).fetchone()[0] == 6


#: an option only worker backends take (its default value): 'auto' chooses among the worker
#: strategies, never one backend
ON_WORKERS = '{"keep_snapshot": false}'


def test_explain_shows_the_pattern(db, shop):
    rows = db.execute(f"SELECT strategy, explanation FROM groupml.explain_train_groups('shop', ARRAY['country'], "
                      f"{FEATS}, 'clicked', 'mlp', '{{}}', '{ON_WORKERS}', 2, 'auto') WHERE chosen").fetchall()
    assert rows and rows[0][1].startswith("sequential pattern")
    assert {r[0] for r in db.execute(f"SELECT strategy FROM groupml.explain_train_groups('shop', ARRAY['country'], "
                                     f"{FEATS}, 'clicked', 'mlp', '{{}}', '{ON_WORKERS}', 2, 'auto')")} == \
        {"grouped", "gtp", "mtp", "dp"}
    rows = db.execute(f"SELECT explanation FROM groupml.explain_train_groups('shop', ARRAY['country'], "
                      f"{FEATS}, 'clicked', 'lightgbm', '{{}}', '{{}}', 2, 'grouped') WHERE chosen").fetchall()
    assert rows[0][0].startswith("sampling pattern")
    rows = db.execute(f"SELECT explanation FROM groupml.explain_train_groups('shop', ARRAY['country'], "
                      f"{FEATS}, 'clicked', 'logistic', '{{}}', '{ON_WORKERS}', 2, 'auto') WHERE chosen").fetchall()
    assert rows[0][0].startswith("algebraic pattern")


def test_unsupported_strategy_and_bad_params_write_nothing(db, shop):
    before = db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0]
    state, msg, hint = sql_error(db, f"CALL groupml.train_groups('shop', ARRAY['country'], {FEATS}, 'clicked', "
                                     f"'mlp', '{{}}', '{{}}', NULL, workers => 2, strategy => 'sp')")
    assert state == "22023"
    assert msg == ("groupml: The 'strategy' value of train_groups must be one of 'auto', 'grouped', 'gtp', 'mtp', "
                   "'dp', 'mop'; got 'sp'")
    assert "cheapest" in hint
    state, msg, _ = sql_error(db, f"CALL groupml.train_groups('shop', ARRAY['country'], {FEATS}, 'clicked', "
                                  f"'lightgbm', '{{\"space\": {{\"num_leaves\": [1]}}}}', '{{}}', NULL, "
                                  f"workers => 2)")
    assert msg.startswith("groupml: ") and "num_leaves" in msg
    for opt, value in (("flexible_hops", '"x"'), ("network_timeout_s", "0")):
        state, msg, _ = sql_error(db, f"CALL groupml.train_groups('shop', ARRAY['country'], {FEATS}, 'clicked', "
                                      f"'mlp', '{{}}', '{{\"{opt}\": {value}}}', NULL, workers => 2)")
        assert msg.startswith(f"groupml: The '{opt}' value of train_groups options must be"), msg
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == before


def weights(db, run_id):
    out = {}
    for gkey, model in db.execute("SELECT group_key::text, (fit).model FROM groupml.models WHERE run_id = %s",
                                  [run_id]).fetchall():
        sd = load_model(bytes(model)).net.state_dict()
        out[gkey] = {k: v.detach().numpy().copy() for k, v in sd.items()}
    return out


def test_mlp_resume_after_a_worker_is_terminated(cluster, dsn, db, shop):
    import threading
    import time

    import psycopg

    spec = json.dumps({"method": "grid", "epoch_iters": 1,
                       "space": {"lr": [0.01, 0.003], "layers": ["8"], "epochs": [8], "batch_size": [32]}})
    opts = '{"flexible_hops": false, "placement": "wrap_around"}'
    stmt = (f"CALL groupml.train_groups('shop', ARRAY['country'], {FEATS}, 'clicked', 'mlp', %s::jsonb, "
            f"%s::jsonb, RUN, workers => 2, strategy => 'grouped')")
    errors = []

    def killer():
        with psycopg.connect(dsn, autocommit=True) as conn:
            for _ in range(600):
                pids = [r[0] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name "
                                                   "LIKE 'groupml worker 1 run %'").fetchall()]
                ready = conn.execute("SELECT count(*) FROM groupml.snapshots WHERE status = 'ready'").fetchone()[0]
                if pids and ready:                     # workers build the snapshot first: kill during training
                    time.sleep(0.4)
                    conn.execute("SELECT pg_terminate_backend(%s)", [pids[0]])
                    return
                time.sleep(0.02)
            errors.append("no worker to terminate")

    t = threading.Thread(target=killer)
    t.start()
    with psycopg.connect(dsn, autocommit=True) as conn:
        state, msg, hint = sql_error(conn, stmt.replace("RUN", "NULL"), [spec, opts])
    t.join()
    assert not errors
    assert msg.startswith("groupml: run ") and "worker 1" in msg and "groups are committed" in msg
    run_id, status = db.execute("SELECT run_id, status FROM groupml.runs").fetchone()
    assert status == "failed"
    assert db.execute(stmt.replace("RUN", str(run_id)), [spec, opts]).fetchone()[0] == run_id
    assert db.execute("SELECT status, groups_done FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone() == \
        ("done", 3)
    fresh = db.execute(stmt.replace("RUN", "NULL"), [spec, opts]).fetchone()[0]
    a, b = weights(db, run_id), weights(db, fresh)
    assert set(a) == set(b) and len(a) == 3
    for g in a:
        for k in a[g]:
            assert np.array_equal(a[g][k], b[g][k]), (g, k)
    # the resumed run's visit log is complete: every config of the split group visited every shard 8 times
    visits = db.execute("SELECT trials[1], count(*) FROM groupml.run_schedule WHERE run_id = %s AND kind = 'visit' "
                        "GROUP BY 1", [run_id]).fetchall()
    assert visits and all(n == 8 * 2 for _, n in visits)
