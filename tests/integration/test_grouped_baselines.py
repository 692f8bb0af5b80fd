"""The baselines as strategies for the MLP and LightGBM: MTP (both) and per-step DP (MLP),
end to end with 2 loopback workers; invariants re-checked from groupml.run_schedule and the
results compared with GTP / single-node training."""

import json
import math

import numpy as np
import pytest

from groupml.executor.invariants import schedule_violations
from groupml.learners import load_model, train_lightgbm

pytestmark = pytest.mark.integration

FEATS = "ARRAY['f1', 'f2', 'f3']"
SIZES = {"a": 500, "b": 300, "c": 200}


@pytest.fixture
def shop(db):
    db.execute("CREATE TABLE shop (country text, f1 float8, f2 float8, f3 float8, clicked int)")
    rng = np.random.default_rng(7)
    with db.cursor() as cur, cur.copy("COPY shop FROM STDIN") as cp:
        for g, n in SIZES.items():
            X = rng.normal(size=(n, 3))
            z = 1.5 * X[:, 0] - X[:, 1] + 0.5 * X[:, 0] * X[:, 2] + rng.normal(scale=0.5, size=n)
            for x, v in zip(X, z):
                cp.write_row((g, *map(float, x), int(v > 0)))


def call(db, model, spec, strategy):
    return db.execute(f"CALL groupml.train_groups('shop', ARRAY['country'], {FEATS}, 'clicked', %s, %s::jsonb, "
                      f"'{{\"keep_snapshot\": true}}', NULL, workers => 2, strategy => %s)",
                      [model, json.dumps(spec), strategy]).fetchone()[0]


def schedule(db, run_id):
    names = ["group_key", "pass", "worker", "shard", "row_start", "n_rows", "trials", "started", "finished", "kind"]
    return [dict(zip(names, r)) for r in db.execute(
        f"SELECT group_key::text, {', '.join(names[1:])} FROM groupml.run_schedule WHERE run_id = %s "
        f"ORDER BY started", [run_id])]


def snapshot_rows(db, run_id, validation=False):
    """group_key -> the group's training (or validation) rows in snapshot order, (n, 4)."""
    sid = db.execute("SELECT snapshot_id FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()[0]
    out = {}
    for gno, gkey in db.execute("SELECT group_no, group_key::text FROM groupml.snapshot_groups WHERE snapshot_id = %s",
                                [sid]).fetchall():
        blocks = [(n_val, np.frombuffer(bytes(data), dtype=">f8").astype(np.float64).reshape(-1, 4))
                  for n_val, data in db.execute("SELECT n_val, data FROM groupml.snapshot_blocks WHERE snapshot_id = %s "
                                                "AND group_no = %s ORDER BY block_no", [sid, gno]).fetchall()]
        out[gkey] = np.concatenate([a[:n_val] if validation else a[n_val:] for n_val, a in blocks])
    return out


def training_rows(db, run_id):
    return snapshot_rows(db, run_id)


def checked(db, run_id):
    """The run's schedule, after checking the run finished and the schedule keeps the invariants."""
    assert db.execute("SELECT status FROM groupml.runs WHERE run_id = %s", [run_id]).fetchone()[0] == "done"
    log = schedule(db, run_id)
    sizes = {k: M.shape[0] for k, M in training_rows(db, run_id).items()}
    assert schedule_violations(log, sizes, {}) == []
    return log, sizes


def results(db, run_id):
    """group_key -> (trials by id, model)."""
    out = {}
    for gkey, trials, model in db.execute("SELECT group_key::text, (fit).trials, (fit).model FROM groupml.models "
                                          "WHERE run_id = %s", [run_id]).fetchall():
        out[gkey] = ({t["trial_id"]: t for t in trials}, load_model(bytes(model)))
    return out


def weights(model):
    return {k: v.detach().numpy() for k, v in model.net.state_dict().items()}


MLP = {"method": "grid", "epoch_iters": 1,
       "space": {"lr": [0.02, 0.005], "layers": ["8"], "epochs": [2], "batch_size": [64], "dropout": [0.1]}}


def gtp_results(db, run_id, spec):
    """What GTP stores for every group: the whole search of the group on one worker
    (patterns.local_fit, the worker's 'fit' task), run here on the run's snapshot rows."""
    from groupml.executor.core import unpack_fit
    from groupml.executor.patterns import local_fit

    val = snapshot_rows(db, run_id, validation=True)
    out = {}
    for g, M in snapshot_rows(db, run_id).items():
        req = {"model": "mlp", "search": spec, "fit_options": {}, "d": 3, "n_skipped": 0}
        res, _ = unpack_fit(local_fit(req, np.ascontiguousarray(M[:, :3]), M[:, 3].copy(), val[g]))
        out[g] = ({t["trial_id"]: t for t in res.trials}, load_model(res.model))
    return out


def test_mlp_mtp_is_gtp_bit_for_bit_and_dp_matches_it(db, shop):
    mtp_run = call(db, "mlp", MLP, "mtp")
    gtp = gtp_results(db, mtp_run, MLP)
    log, sizes = checked(db, mtp_run)
    assert db.execute("SELECT strategy FROM groupml.grouped_runs WHERE run_id = %s", [mtp_run]).fetchone()[0] == "mtp"
    blocks = [e for e in log if e["kind"] == "block"]
    assert {e["kind"] for e in log} == {"block", "eval"}          # eval: the best state serialised as a model
    assert len(blocks) == 3 * 2 * 2                               # groups x configs x epoch blocks
    assert all((e["row_start"], e["n_rows"]) == (0, sizes[e["group_key"]]) for e in blocks)   # whole copies
    assert {e["worker"] for e in blocks} == {0, 1}
    mtp = results(db, mtp_run)
    assert set(mtp) == set(gtp) == set(sizes)
    for g in gtp:
        assert {t: (r["score"], r["epoch_losses"]) for t, r in mtp[g][0].items()} == \
            {t: (r["score"], r["epoch_losses"]) for t, r in gtp[g][0].items()}
        a, b = weights(mtp[g][1]), weights(gtp[g][1])
        assert all(np.array_equal(a[k], b[k]) for k in b), g

    dp_run = call(db, "mlp", MLP, "dp")
    log, sizes = checked(db, dp_run)
    steps = [e for e in log if e["kind"] == "step"]
    assert {e["kind"] for e in log} == {"stats", "step"}
    for g, n in sizes.items():
        mine = [e for e in steps if e["group_key"] == g]
        # both configs share every round; 2 epochs of ceil(n / 64) steps, one task per worker
        assert len(mine) == 2 * 2 * math.ceil(n / 64)
        assert {e["worker"] for e in mine} == {0, 1} and all(e["trials"] == [0, 1] for e in mine)
    dp = results(db, dp_run)
    for g in gtp:
        for t, r in gtp[g][0].items():
            assert dp[g][0][t]["score"] == pytest.approx(r["score"], abs=1e-5)
        a, b = weights(dp[g][1]), weights(gtp[g][1])
        assert max(float(np.abs(a[k] - b[k]).max()) for k in b) < 1e-4, g
    # per-epoch losses of every trial were written, as for every other strategy
    assert db.execute("SELECT count(*) FROM groupml.run_epochs WHERE run_id = %s", [dp_run]).fetchone()[0] == 3 * 2 * 2


def test_lightgbm_mtp_equals_single_node_lightgbm(db, shop):
    spec = {"method": "grid", "epoch_iters": 5,
            "space": {"num_leaves": [4, 8], "num_boost_round": [15], "min_data_in_leaf": [10]}}
    run_id = call(db, "lightgbm", spec, "mtp")
    log, sizes = checked(db, run_id)
    assert {e["kind"] for e in log} == {"boost"}
    assert sorted((e["group_key"], e["trials"][0]) for e in log) == sorted((g, t) for g in sizes for t in (0, 1))
    assert {e["worker"] for e in log} == {0, 1}
    rows = training_rows(db, run_id)
    for g, (trials, model) in results(db, run_id).items():
        best = [t for t in trials.values() if t["is_best"]][0]
        single = train_lightgbm("lightgbm", rows[g][:, :3], rows[g][:, 3], best["params"])
        assert model.num_trees == 15
        assert model.model_text.split("end of trees")[0] == single.split("end of trees")[0], g


def test_explain_shows_the_baselines(db, shop):
    rows = db.execute(f"SELECT strategy, chosen, shards, explanation FROM groupml.explain_train_groups('shop', "
                      f"ARRAY['country'], {FEATS}, 'clicked', 'mlp', '{{}}', '{{}}', 2, 'dp')").fetchall()
    assert {r[0] for r in rows} == {"grouped", "gtp", "mtp", "dp"}
    chosen = [r for r in rows if r[1]]
    assert {r[0] for r in chosen} == {"dp"} and len(chosen) == 2
    assert chosen[0][3].startswith("sequential pattern") and "DP: every group split over all workers" in chosen[0][3]
    assert "dp was requested" in chosen[0][3]
    rows = db.execute(f"SELECT chosen, shards, explanation FROM groupml.explain_train_groups('shop', "
                      f"ARRAY['country'], {FEATS}, 'clicked', 'lightgbm', '{{}}', '{{}}', 2, 'mtp') WHERE chosen"
                      ).fetchall()
    assert "MTP: each config's whole boosting run is one task" in rows[0][2]
    assert all(len(r[1]) == 3 and all(s["copy"] for s in r[1]) for r in rows)   # every worker may copy every group
