"""Epoch-level resume of planner-driven train_groups: a group interrupted mid-search continues
after its last committed epoch block (groupml.run_checkpoints) and ends with the models of an
uninterrupted run."""

import json
import threading
import time

import numpy as np
import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification
from groupml.executor.invariants import schedule_violations
from groupml.learners import load_model, replay
from groupml.learners._sharded import state_weights
from groupml.devcluster import TempCluster
from pg_helpers import sql_error

pytestmark = pytest.mark.integration

STMT = ("CALL groupml.train_groups(%s, ARRAY['country'], {feats}, 'clicked', %s, %s::jsonb, %s::jsonb, {run}, "
        "workers => 2, strategy => %s)")


def train(conn, table, feats, model, spec, options, strategy="grouped", run_id=None):
    # every finished epoch block commits at once (checkpoint_every_s 0): a watcher sees each
    # checkpoint, so the cancels below land at a fixed point however fast the machine is
    options = json.dumps({**json.loads(options), "checkpoint_every_s": 0})
    sql = STMT.format(feats=feats, run="NULL" if run_id is None else int(run_id))
    return conn.execute(sql, [table, model, spec, options, strategy]).fetchone()[0]


def freeze_and_cancel(dsn, pid, condition, timeout=120.0):
    """A thread that, once ``condition`` holds, locks groupml.run_checkpoints against writes --
    the run then cannot commit another epoch block or group (each writes or deletes a checkpoint
    row), which pins where it stops -- and cancels backend ``pid``. Set ``release`` after the
    cancelled call has returned; (thread, fired, release)."""
    fired, release = threading.Event(), threading.Event()

    def watch():
        with psycopg.connect(dsn, autocommit=True) as watcher:
            deadline = time.time() + timeout
            while time.time() < deadline and not release.is_set():
                if watcher.execute(condition).fetchone()[0]:
                    with watcher.transaction():
                        watcher.execute("LOCK TABLE groupml.run_checkpoints IN SHARE MODE")
                        watcher.execute("SELECT pg_cancel_backend(%s)", [pid])
                        fired.set()
                        release.wait(timeout)
                    return
                time.sleep(0.01)

    thread = threading.Thread(target=watch)
    thread.start()
    return thread, fired, release


def cancel_after(dsn, condition, table, feats, model, spec, options, strategy="grouped", attempts=4):
    """Start a run and cancel its coordinator as soon as ``condition`` holds; the run's id.

    The condition is a committed checkpoint, and for a short run the last one is committed just
    before the group ends (which deletes it): the watcher may miss that window or cancel a call
    that has just returned. Such an attempt is a harness miss, not a result: the scenario starts
    again as a new run (up to ``attempts`` times) and the test fails if no attempt was cancelled."""
    misses = []
    for _ in range(attempts):
        with psycopg.connect(dsn, autocommit=True) as conn:
            thread, fired, release = freeze_and_cancel(dsn, conn.info.backend_pid, condition)
            try:
                train(conn, table, feats, model, spec, options, strategy)
            except psycopg.errors.QueryCanceled:
                cancelled = True
            else:
                cancelled = False
                misses.append(f"watcher fired: {fired.is_set()}")
            finally:
                release.set()
                thread.join()
            if cancelled:
                assert fired.is_set()
                return conn.execute("SELECT max(run_id) FROM groupml.runs").fetchone()[0]
    pytest.fail(f"no attempt was cancelled at the checkpoint ({'; '.join(misses)})")


def resume(dsn, table, feats, model, spec, options, run_id, strategy="grouped"):
    """Call again with the run's id; (run id, NOTICE messages)."""
    notices = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.add_notice_handler(lambda d: notices.append(d.message_primary))
        got = train(conn, table, feats, model, spec, options, strategy, run_id)
    return got, notices


def schedule(db, run_id):
    names = ["group_key", "pass", "worker", "shard", "row_start", "n_rows", "trials", "started", "finished", "kind"]
    rows = db.execute("SELECT group_key::text, pass, worker, shard, row_start, n_rows, trials, started, finished, "
                      "kind FROM groupml.run_schedule WHERE run_id = %s ORDER BY started", [run_id]).fetchall()
    return [dict(zip(names, r)) for r in rows]


def check_invariants(db, run_id):
    sizes = dict(db.execute("SELECT group_key::text, (fit).n_train FROM groupml.models WHERE run_id = %s",
                            [run_id]).fetchall())
    log = schedule(db, run_id)
    assert schedule_violations(log, sizes, {}) == []
    return log


def epochs(db, run_id, gkey=None):
    """(group, block, trial) -> (epoch, score, decision, at)."""
    rows = db.execute("SELECT group_key::text, block, trial_id, epoch, score, decision, at FROM groupml.run_epochs "
                      "WHERE run_id = %s AND (%s::text IS NULL OR group_key = %s::jsonb)",
                      [run_id, gkey, gkey]).fetchall()
    return {(g, b, t): rest for g, b, t, *rest in rows}


def trials(db, run_id):
    """Every stored trial without its measured seconds."""
    out = {}
    for g, tid, params, status, reason, score, scores, metrics in db.execute(
            "SELECT group_key::text, trial_id, params, status, stop_reason, score, epoch_scores, metrics "
            "FROM groupml.trials WHERE run_id = %s", [run_id]).fetchall():
        metrics.pop("seconds", None)
        out[(g, tid)] = (params, status, reason, score, scores, metrics)
    return out


def _model_part(m):
    """Model bytes to compare; for LightGBM the trees only -- not the parameters section, which
    names the ports of the distributed ranks, nor the header's checksum of the whole text."""
    m = bytes(m)
    if b"tree\nversion" in m:
        return m[m.index(b"tree\nversion"):].split(b"end of trees")[0]
    return m


def fits(db, run_id):
    """group -> (params, score, model bytes as _model_part compares them)."""
    return {g: (p, s, _model_part(m) if m is not None else None) for g, p, s, m in db.execute(
        "SELECT group_key::text, (fit).params, (fit).score, (fit).model FROM groupml.models WHERE run_id = %s",
        [run_id]).fetchall()}


def interrupted_state(db, run_id):
    """The one group with a checkpoint after the cancel: (group, block, passes)."""
    rows = db.execute("SELECT group_key::text, block, passes FROM groupml.run_checkpoints WHERE run_id = %s",
                      [run_id]).fetchall()
    assert rows, "the cancel came after a checkpointed group had committed epoch blocks"
    done = {r[0] for r in db.execute("SELECT group_key::text FROM groupml.models WHERE run_id = %s", [run_id])}
    assert not {r[0] for r in rows} & done
    return rows


def assert_resumed_equals_fresh(db, run_id, fresh):
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == "done"
    assert db.execute("SELECT count(*) FROM groupml.run_checkpoints").fetchone()[0] == 0
    a, b = fits(db, run_id), fits(db, fresh)
    assert set(a) == set(b)
    for g in a:
        assert a[g] == b[g], g                              # same params, same score, same model bytes
    assert trials(db, run_id) == trials(db, fresh)
    ea, eb = epochs(db, run_id), epochs(db, fresh)
    assert set(ea) == set(eb)
    assert all(ea[k][:3] == eb[k][:3] for k in ea)           # epoch, score, decision of every block


# ---------------------------------------------------------------------------------------------- GLM
# L-BFGS (history restored) and gradient descent; GD never stops before max_iter (tol 1e-300), so a
# group lasts 300 passes and is still running when the cancel comes
SLOW_GLM = {"solver": ["lbfgs", "gd"], "lr": [0.5], "l2": [1e-1, 1e-3], "max_iter": 300, "tol": 1e-300,
            "epoch_iters": 5}


def test_glm_group_continues_after_its_last_committed_epoch_block(dsn, db):
    create_table(db, "big", grouped_classification(6000, 3, 4, seed=45, exponent=2.5))
    feats = "ARRAY['f1', 'f2', 'f3', 'f4']"
    spec = json.dumps(SLOW_GLM)
    opts = json.dumps({"drivers": 1, "block_rows": 256})
    args = ("big", feats, "logistic", spec, opts)
    run_id = cancel_after(dsn, "SELECT EXISTS (SELECT 1 FROM groupml.run_checkpoints WHERE block >= 4)", *args)
    [(gkey, block, passes)] = interrupted_state(db, run_id)
    before = epochs(db, run_id, gkey)
    assert {b for _, b, _ in before} == set(range(1, block + 1))   # the blocks committed with the checkpoint
    log = [e for e in schedule(db, run_id) if e["group_key"] == gkey]
    assert sorted({e["pass"] for e in log}) == list(range(passes))
    assert max(e["shard"] for e in log) >= 1                       # the group is split over both workers

    plan = db.execute("SELECT strategy, plan FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()
    # the cancelled call's time up to its last commit is the run's (it was charged only by a
    # call that finished, so a resumed run's seconds and train_seconds were the last call's)
    first = db.execute("SELECT seconds, train_seconds FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()
    assert first[0] > first[1] > 0
    again, notices = resume(dsn, *args, run_id)
    assert again == run_id
    both = db.execute("SELECT seconds, train_seconds FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()
    assert both[0] > first[0] and both[1] > first[1] and both[0] > both[1]
    assert any(f"group {gkey} resumes after its committed epoch block {block}" in n for n in notices), notices
    # the first attempt's plan (unit costs measured since, its own tasks included, do not re-plan it)
    assert any(f"resumes with the plan of its first attempt: {plan[0]}" in n for n in notices), notices
    assert db.execute("SELECT strategy, plan FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone() == plan
    after = epochs(db, run_id, gkey)
    for k, v in before.items():
        assert after[k] == v                                 # not redone: same rows, same commit times
    check_invariants(db, run_id)                             # passes 0, 1, ... once each, over both attempts
    fresh = train(db, *args)
    assert_resumed_equals_fresh(db, run_id, fresh)
    count = "SELECT count(*) FROM groupml.run_schedule WHERE run_id = %s AND group_key = %s::jsonb"
    assert db.execute(count, [run_id, gkey]).fetchone()[0] == db.execute(count, [fresh, gkey]).fetchone()[0]


def test_a_crash_restart_empties_the_snapshot_and_the_resumed_run_rebuilds_it(cluster):
    # groupml.snapshot_blocks is UNLOGGED: a real crash restart (immediate stop, recovery) of a
    # server of its own empties it while groupml.snapshots still says 'ready'
    feats = "ARRAY['f1', 'f2', 'f3', 'f4']"
    args = ("big", feats, "logistic", json.dumps(SLOW_GLM), json.dumps({"drivers": 1, "block_rows": 256}))
    # synchronous commits: an immediate stop must not lose the committed checkpoint (the
    # dev cluster's default, off, may drop the last commits -- a server crash would not)
    with TempCluster(settings={"synchronous_commit": "on"}) as own:
        dsn = own.dsn()
        with psycopg.connect(dsn, autocommit=True) as db:
            db.execute("CREATE EXTENSION groupml CASCADE")
            create_table(db, "big", grouped_classification(6000, 3, 4, seed=47, exponent=2.5))
            kept = train(db, "big", feats, "logistic", '{"l2": [0.1]}', '{"keep_snapshot": true}')
            sid = db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [kept]).fetchone()[0]
        run_id = cancel_after(dsn, "SELECT EXISTS (SELECT 1 FROM groupml.run_checkpoints WHERE block >= 4)", *args)
        with psycopg.connect(dsn, autocommit=True) as db:
            [(gkey, block, _)] = interrupted_state(db, run_id)
            before = epochs(db, run_id, gkey)
        own.restart("immediate")
        with psycopg.connect(dsn, autocommit=True) as db:
            assert db.execute("SELECT count(*) FROM groupml.snapshot_blocks").fetchone()[0] == 0
            assert db.execute("SELECT count(*) FROM groupml.snapshots WHERE status = 'ready'").fetchone()[0] == 2
            n_runs = db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0]
            # reusing the emptied kept snapshot: a clear ERROR, and no run is created
            got = sql_error(db, STMT.format(feats=feats, run="NULL"),
                            ["big", "logistic", '{"l2": [0.1]}', json.dumps({"snapshot": sid}), "grouped"])
            assert got[0] == "55000", got
            assert got[1] == (f"groupml: Snapshot {sid} has lost its blocks: snapshot blocks are unlogged, and a "
                              f"crash restart of the server empties them"), got
            assert "Omit the 'snapshot' option" in got[2] and f"drop_snapshot({sid})" in got[2]
            assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == n_runs
            # the interrupted run rebuilds its snapshot (same rows, same shards) and its group
            # still continues after its committed epoch block
            again, notices = resume(dsn, *args, run_id)
            assert again == run_id
            assert any("lost its blocks (a crash restart empties them, and a restore without unlogged data leaves "
                       "them out); rebuilding it" in n for n in notices), notices
            assert any(f"group {gkey} resumes after its committed epoch block {block}" in n for n in notices), notices
            after = epochs(db, run_id, gkey)
            for k, v in before.items():
                assert after[k] == v
            check_invariants(db, run_id)
            fresh = train(db, *args)
            assert_resumed_equals_fresh(db, run_id, fresh)
            assert db.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 1     # the kept one


def test_a_damaged_checkpoint_restarts_its_group(dsn, db):
    create_table(db, "big", grouped_classification(6000, 3, 4, seed=46, exponent=2.5))
    feats = "ARRAY['f1', 'f2', 'f3', 'f4']"
    args = ("big", feats, "logistic", json.dumps(SLOW_GLM), json.dumps({"drivers": 1}))
    run_id = cancel_after(dsn, "SELECT EXISTS (SELECT 1 FROM groupml.run_checkpoints WHERE block >= 3)", *args)
    [(gkey, block, _)] = interrupted_state(db, run_id)
    before = epochs(db, run_id, gkey)
    db.execute("UPDATE groupml.run_checkpoints SET state = '\\x00010203'::bytea WHERE run_id = %s", [run_id])
    again, notices = resume(dsn, *args, run_id)
    assert any(f"group {gkey} restarts" in n for n in notices), notices
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == "done"
    after = epochs(db, run_id, gkey)
    assert all(after[k][3] > v[3] for k, v in before.items())   # its blocks were trained (and written) again
    check_invariants(db, run_id)                                  # passes from 0, once each: the old rows went


# ---------------------------------------------------------------------------------------- MLP, LightGBM
def shop_table(db, sizes):
    db.execute("CREATE TABLE shop (country text, f1 float8, f2 float8, f3 float8, clicked int)")
    rng = np.random.default_rng(5)
    with db.cursor() as cur:
        with cur.copy("COPY shop FROM STDIN") as cp:
            for g, n in sizes.items():
                X = rng.normal(size=(n, 3))
                z = 1.5 * X[:, 0] - X[:, 1] + 0.5 * X[:, 0] * X[:, 2] + rng.normal(scale=0.5, size=n)
                for x, v in zip(X, z):
                    cp.write_row((g, *map(float, x), int(v > 0)))


FEATS3 = "ARRAY['f1', 'f2', 'f3']"


MLP_SPEC = json.dumps({"method": "grid", "epoch_iters": 1,
                       "space": {"lr": [0.01, 0.003], "layers": ["8"], "epochs": [16], "batch_size": [32]}})
#: The split group of cancelled_mlp_run must outlast a few of the coordinator's commits (every
#: 0.25 s at most; a group's checkpoint goes when it ends): 16 epochs of batch 32 over 1,200
#: rows take about 0.3 s, too short for a watcher to see a checkpoint reliably
MLP_SPEC_HOPS = json.dumps({"method": "grid", "epoch_iters": 1,
                            "space": {"lr": [0.01, 0.003], "layers": ["8"], "epochs": [40], "batch_size": [8]}})
HOPS_EPOCHS = 40


def cancelled_mlp_run(dsn, db):
    """(run id, call arguments, the split group's key) of an MLP run cancelled after 2 committed
    epoch blocks of its split group. Wrap-around (Alg. 1, group isolation; forced: at this size
    the planner would keep groups whole) with p = 2 cuts one of the 1,200-row groups over both
    workers; the others are one worker task each (no epoch checkpoints). drivers = 1: one group
    at a time. MLP_SPEC_HOPS makes the split group last over a second."""
    shop_table(db, {"a": 1200, "b": 1200, "c": 240})
    opts = json.dumps({"flexible_hops": False, "keep_snapshot": True, "drivers": 1, "placement": "wrap_around"})
    args = ("shop", FEATS3, "mlp", MLP_SPEC_HOPS, opts)
    run_id = cancel_after(dsn, "SELECT EXISTS (SELECT 1 FROM groupml.run_checkpoints WHERE block >= 2)", *args)
    [(split, _, _)] = interrupted_state(db, run_id)
    return run_id, args, split


def test_mlp_group_continues_its_hops_and_replays_bit_for_bit(dsn, db):
    run_id, args, split = cancelled_mlp_run(dsn, db)
    stats_before = [e for e in schedule(db, run_id) if e["group_key"] == split and e["kind"] == "stats"]
    assert len(stats_before) == 2

    assert resume(dsn, *args, run_id)[0] == run_id
    log = check_invariants(db, run_id)
    mine = [e for e in log if e["group_key"] == split]
    # the standardisation moments were not recomputed, no hop was redone
    assert [e for e in mine if e["kind"] == "stats"] == stats_before
    visits = [e for e in mine if e["kind"] == "visit"]
    for tid in (0, 1):
        assert sorted((e["pass"], e["shard"]) for e in visits if e["trials"] == [tid]) == \
            [(ep, s) for ep in range(HOPS_EPOCHS) for s in (0, 1)]
    # the visit log over both attempts replays to the stored model, bit for bit
    sid = db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()[0]
    gno = db.execute("SELECT group_no FROM groupml.snapshot_groups WHERE snapshot_id = %s AND group_key = %s::jsonb",
                     [sid, split]).fetchone()[0]
    M = np.concatenate([np.frombuffer(bytes(data), dtype=">f8").astype(np.float64).reshape(-1, 4)[n_val:]
                        for n_val, data in db.execute("SELECT n_val, data FROM groupml.snapshot_blocks WHERE "
                                                      "snapshot_id = %s AND group_no = %s ORDER BY block_no",
                                                      [sid, gno]).fetchall()])
    bounds = sorted({(e["shard"], e["row_start"], e["n_rows"]) for e in visits})
    shards = [(np.ascontiguousarray(M[s:s + n, :3]), np.ascontiguousarray(M[s:s + n, 3])) for _, s, n in bounds]
    fit_trials, model = db.execute("SELECT (fit).trials, (fit).model FROM groupml.models WHERE run_id = %s AND "
                                   "group_key = %s::jsonb", [run_id, split]).fetchone()
    best = [t for t in fit_trials if t["is_best"]][0]
    path = [(e["pass"], e["shard"], e["worker"]) for e in visits if e["trials"] == [best["trial_id"]]]
    want = state_weights(replay(path, shards, best["params"], family="mlp"))
    got = load_model(bytes(model)).net.state_dict()
    for k, v in want.items():
        assert np.array_equal(v, got[k].detach().numpy()), k
    db.execute("SELECT groupml.drop_snapshot(%s)", [sid])
    fresh = train(db, "shop", FEATS3, "mlp", MLP_SPEC_HOPS,
                  json.dumps({"flexible_hops": False, "drivers": 1, "placement": "wrap_around"}))
    assert_resumed_equals_fresh(db, run_id, fresh)


def test_a_forged_mlp_checkpoint_restarts_its_group_without_crashing_the_server(dsn, db):
    # a checkpoint's MLP training state altered by hand: Adam moments smaller than their
    # parameters, which torch's fused step would write past (a worker backend crashing restarts
    # the server). The resume refuses the state, restarts the group and finishes
    import io

    import torch
    from groupml.executor.checkpoint import decode, encode
    from groupml.learners import _container

    run_id, args, split = cancelled_mlp_run(dsn, db)
    state = decode(bytes(db.execute("SELECT state FROM groupml.run_checkpoints WHERE run_id = %s",
                                    [run_id]).fetchone()[0]))
    cfg = next(c for c in state["trainer"]["configs"] + state["trainer"]["retired"] if c["state"] is not None)
    header, body = _container.unpack(cfg["state"], "state")
    obj = torch.load(io.BytesIO(body), weights_only=True)
    for entry in obj["opt"]["state"].values():
        entry["exp_avg"] = torch.zeros(1)
    buf = io.BytesIO()
    torch.save(obj, buf)
    cfg["state"] = _container.pack(header, buf.getvalue())
    db.execute("UPDATE groupml.run_checkpoints SET state = %s WHERE run_id = %s", [encode(state), run_id])
    pid = db.execute("SELECT pg_backend_pid()").fetchone()[0]

    again, notices = resume(dsn, *args, run_id)
    assert again == run_id
    assert any(f"group {split} restarts: its checkpoint is damaged (The mlp training state is invalid: the "
               f"optimizer's exp_avg of parameter 0 does not fit it (shape (1,), torch.float32))" in n
               for n in notices), notices
    assert db.execute("SELECT pg_backend_pid()").fetchone()[0] == pid          # no backend crashed
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == "done"
    check_invariants(db, run_id)
    fresh = train(db, "shop", FEATS3, "mlp", MLP_SPEC_HOPS,
                  json.dumps({"flexible_hops": False, "drivers": 1, "placement": "wrap_around"}))
    a, b = fits(db, run_id), fits(db, fresh)
    assert a.keys() == b.keys() and all(a[g] == b[g] for g in a)    # the group was trained again, from scratch


LGBM_SLOTS1 = json.dumps({"method": "grid", "epoch_iters": 5, "slots": 1,
                          "space": {"num_leaves": [4, 7, 10, 13], "num_boost_round": [20], "min_data_in_leaf": [10],
                                    "learning_rate": [0.2]}})


LGBM_MTP = json.dumps({"method": "grid", "epoch_iters": 5, "slots": 1,
                       "space": {"num_leaves": [4, 7, 10, 13, 16, 19], "num_boost_round": [100],
                                 "min_data_in_leaf": [10], "learning_rate": [0.2]}})
MLP_SPEC_LONG = json.dumps({"method": "grid", "epoch_iters": 1,
                            "space": {"lr": [0.01, 0.003], "layers": ["8"], "epochs": [40], "batch_size": [8]}})


@pytest.mark.parametrize("model, strategy", [("mlp", "mtp"), ("mlp", "dp"), ("lightgbm", "mtp")])
def test_a_baseline_run_resumed_after_a_cancel_equals_an_uninterrupted_one(dsn, db, model, strategy):
    # the baselines' epoch checkpoints (MTP: a config's state bytes or model text; DP: the
    # coordinator's whole training state and round counter), through a real cancel and resume.
    # drivers = 1: one group at a time, so exactly one group is in flight when the cancel comes.
    # The coordinator commits blocks every 0.25 s at most and a group's checkpoint goes when the
    # group ends, so a group must outlast a few commits for the watcher to see its checkpoint:
    # MTP epoch blocks of one config over 1,200 rows took ~20 ms (16 blocks: the window was
    # under 0.1 s and fresh-clone CI missed it), so MTP trains one 3,000-row group for 40 epochs
    # of batch 8 (a window of about 1 s);
    # a DP block is a round trip per mini-batch and lasts; LightGBM trains a config's rounds in
    # one task, so its search takes one config at a time (slots 1), six configs of 100 rounds
    # over 20,000 rows (a window of about 0.6 s; 1,200 rows gave 0.17 s)
    if model == "lightgbm":
        sizes, spec, blocks = {"a": 20000}, LGBM_MTP, 4
    elif strategy == "mtp":
        sizes, spec, blocks = {"a": 3000}, MLP_SPEC_LONG, 2
    else:
        sizes, spec, blocks = {"a": 1200, "b": 1200, "c": 240}, MLP_SPEC, 2
    shop_table(db, sizes)
    args = ("shop", FEATS3, model, spec, json.dumps({"drivers": 1}))
    run_id = cancel_after(dsn, f"SELECT EXISTS (SELECT 1 FROM groupml.run_checkpoints WHERE block >= {blocks})",
                          *args, strategy=strategy)
    [(gkey, block, _)] = interrupted_state(db, run_id)
    kept = {g: m for g, m in db.execute("SELECT group_key::text, model_id FROM groupml.models WHERE run_id = %s",
                                        [run_id]).fetchall()}
    again, notices = resume(dsn, *args, run_id, strategy=strategy)
    assert again == run_id
    assert any(f"group {gkey} resumes after its committed epoch block {block}" in n for n in notices), notices
    assert all(db.execute("SELECT model_id FROM groupml.models WHERE run_id = %s AND group_key = %s::jsonb",
                          [run_id, g]).fetchone()[0] == m for g, m in kept.items())   # committed groups kept
    check_invariants(db, run_id)
    fresh = train(db, *args, strategy=strategy)
    assert_resumed_equals_fresh(db, run_id, fresh)


def cancelled_lightgbm_run(dsn, db):
    """(run id, call arguments) of a LightGBM run cancelled after 4 committed epoch blocks of
    its one group. Constrained wrap-around (Alg. 2, forced) with p = 2 splits the group; slots = 1
    trains one config at a time. One group only: no one-worker search delays a rank, so a cancel
    finds both ranks of a job running (a rank waiting for a peer that never comes would block
    until LightGBM's time_out)."""
    shop_table(db, {"a": 1200})
    args = ("shop", FEATS3, "lightgbm", LGBM_SLOTS1, '{"placement": "wrap_around"}')
    return cancel_after(dsn, "SELECT EXISTS (SELECT 1 FROM groupml.run_checkpoints WHERE block >= 4)", *args), args


def test_lightgbm_group_keeps_its_trained_configs(dsn, db):
    run_id, args = cancelled_lightgbm_run(dsn, db)
    split = '{"country": "a"}'
    [(gkey, block, _)] = interrupted_state(db, run_id)
    assert gkey == split
    jobs_before = {e["trials"][0] for e in schedule(db, run_id) if e["group_key"] == split and e["kind"] == "rank"}
    assert 0 in jobs_before

    assert resume(dsn, *args, run_id)[0] == run_id
    log = check_invariants(db, run_id)                       # among others: one LightGBM job per config
    ranks = [e for e in log if e["group_key"] == split and e["kind"] == "rank"]
    assert sorted({e["trials"][0] for e in ranks}) == [0, 1, 2, 3]
    assert len(ranks) == 4 * 2                               # one 2-rank job per config over both attempts
    fresh = train(db, *args)
    assert_resumed_equals_fresh(db, run_id, fresh)


def test_a_forged_lightgbm_checkpoint_restarts_its_group_without_crashing_the_server(dsn, db):
    # a checkpoint's LightGBM text altered by hand so that LightGBM's loader crashes on it: the
    # resumed run has it loaded by a throwaway child first, restarts the group and finishes
    from groupml.executor.checkpoint import decode, encode
    from groupml.learners._lgbm import check_in_child
    from groupml.errors import ModelFormatError

    run_id, args = cancelled_lightgbm_run(dsn, db)
    [(gkey, _, _)] = interrupted_state(db, run_id)
    state = decode(bytes(db.execute("SELECT state FROM groupml.run_checkpoints WHERE run_id = %s",
                                    [run_id]).fetchone()[0]))
    cfg = next(c for c in state["trainer"]["configs"] + state["trainer"]["retired"] if c["text"] is not None)
    text, crashing = cfg["text"], None
    for cut in range(len(text) // 10, len(text), len(text) // 40):
        bad = text[:cut] + bytes([text[cut] ^ 0x20]) + text[cut + 1:]
        try:
            check_in_child(bad, 3)
        except ModelFormatError as e:
            if "LightGBM crashed on it" in e.message:
                crashing = bad
                break
    assert crashing is not None, "no alteration crashed LightGBM"
    cfg["text"] = crashing
    db.execute("UPDATE groupml.run_checkpoints SET state = %s WHERE run_id = %s", [encode(state), run_id])
    pid = db.execute("SELECT pg_backend_pid()").fetchone()[0]

    again, notices = resume(dsn, *args, run_id)
    assert again == run_id
    assert any(f"group {gkey} restarts: its checkpoint is damaged (The lightgbm model is damaged: LightGBM "
               f"crashed on it (signal" in n for n in notices), notices
    assert db.execute("SELECT pg_backend_pid()").fetchone()[0] == pid          # no backend crashed
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == "done"
    fresh = train(db, *args)
    a, b = fits(db, run_id), fits(db, fresh)
    assert a.keys() == b.keys() and all(a[g] == b[g] for g in a)    # the group was trained again, from scratch


def test_bad_checkpoint_interval(db):
    from pg_helpers import sql_error

    shop_table(db, {"a": 200})
    state, msg, hint = sql_error(db, STMT.format(feats=FEATS3, run="NULL"),
                                 ["shop", "logistic", "{}", '{"checkpoint_every_s": -1}', "grouped"])
    assert (state, msg) == ("22023", "groupml: The 'checkpoint_every_s' value of train_groups options must be "
                                     ">= 0; got -1")
    assert "0 commits every block" in hint
    assert db.execute("SELECT count(*) FROM groupml.runs").fetchone()[0] == 0
