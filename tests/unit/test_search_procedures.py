"""Search procedures: hand-computed decisions, determinism, resume, and the driver loop."""

import json
import math

import numpy as np
import pytest

from groupml.engine import Decision, Trainer
from groupml.search import (ASHA, BanditStopping, GridSearch, Hyperband, RandomSearch, Report,
                            SearchProcedure, SuccessiveHalving, TPESearch, bandit_keeps,
                            halving_rungs, hyperband_brackets, make_procedure, parse_search,
                            run_search)

C, S = Decision.CONTINUE, Decision.STOP


# ----------------------------------------------------------------------------- fakes
def quad_loss(params, epoch):
    """Synthetic learning curve: final loss (x-3)^2 + 1 (or from 'lr'), approached as 1/epoch."""
    if "x" in params:
        final = (params["x"] - 3.0) ** 2 + 1.0
    else:
        final = (math.log10(params.get("lr", 1.0)) + 1.0) ** 2 + params.get("l2", 0.0) + 1.0
    return final + 2.0 / epoch


class FakeTrainer:
    """Deterministic test double of the Trainer protocol with synthetic learning curves.

    A config converges after ``params['converge_iters']`` solver iterations when given.
    """

    def __init__(self, curve=quad_loss):
        self.curve = curve
        self.passes = 0
        self._params, self._iters = {}, {}
        self.log = []          # ('add'|'remove', tid) and ('run', sorted active)
        self.max_active = 0

    def add(self, trial_id, params):
        assert trial_id not in self._params
        self._params[trial_id], self._iters[trial_id] = dict(params), 0
        self.log.append(("add", trial_id))

    def remove(self, trial_id):
        del self._params[trial_id], self._iters[trial_id]
        self.log.append(("remove", trial_id))

    def active(self):
        return sorted(self._params)

    def run(self, iterations):
        self.log.append(("run", tuple(self.active())))
        self.max_active = max(self.max_active, len(self._params))
        for tid, params in self._params.items():
            cap = params.get("converge_iters")
            self._iters[tid] = self._iters[tid] + iterations if cap is None else \
                min(cap, self._iters[tid] + iterations)
        self.passes += iterations

    def converged(self, trial_id):
        cap = self._params[trial_id].get("converge_iters")
        return cap is not None and self._iters[trial_id] >= cap

    def status(self, trial_id):
        # a config may say how it finishes ('max_iter', 'stalled'); tol otherwise
        return self._params[trial_id].get("finish", "converged") if self.converged(trial_id) else "running"

    def score(self, trial_id):
        return self.curve(self._params[trial_id], self._iters[trial_id] / 10.0)

    def metrics(self, trial_id):
        return {"loss": self.score(trial_id)}

    def model(self, trial_id):
        raise NotImplementedError


def simulate(proc, *, slots, curve=quad_loss, swap_at=(), max_blocks=10_000):
    """Mirror of the driver that can swap the procedure for one restored from JSON state.

    Returns the full log of proposals and decisions.
    """
    trainer, epochs, active, log = FakeTrainer(curve), {}, [], []
    block = 0
    while True:
        for t in proc.ask(slots - len(active)):
            trainer.add(t.trial_id, t.params)
            epochs[t.trial_id] = 0
            active.append(t.trial_id)
            log.append(("ask", t.trial_id, json.dumps(t.params, sort_keys=True)))
        if not active:
            assert proc.finished()
            return log, proc
        trainer.run(10)
        block += 1
        reports = []
        for tid in sorted(active):
            epochs[tid] += 1
            reports.append(Report(tid, epochs[tid], trainer.score(tid), trainer.converged(tid)))
        for tid, dec in sorted(proc.tell_block(reports).items()):
            log.append(("tell", block, tid, dec.value, proc.reason(tid)))
            if dec is S or trainer.converged(tid):
                trainer.remove(tid)
                active.remove(tid)
        if block in swap_at:
            state = json.loads(json.dumps(proc.state_dict(), allow_nan=False))
            proc = SearchProcedure.from_state(state)
        assert block < max_blocks


# ------------------------------------------------------------------ hyperband / SH
def test_hyperband_bracket_table_r81_eta3():
    # Li et al., Hyperband, Table 1 (R = 81, eta = 3): (n_i, r_i) per bracket s = 4..0
    assert hyperband_brackets(81, 3) == [
        [(81, 1), (27, 3), (9, 9), (3, 27), (1, 81)],
        [(34, 3), (11, 9), (3, 27), (1, 81)],
        [(15, 9), (5, 27), (1, 81)],
        [(8, 27), (2, 81)],
        [(5, 81)],
    ]
    proc = Hyperband(parse_search({"method": "hyperband", "x": {"uniform": [0, 6]}, "max_epochs": 81}))
    assert proc.brackets == hyperband_brackets(81, 3)
    assert hyperband_brackets(9, 3) == [[(9, 1), (3, 3), (1, 9)], [(5, 3), (1, 9)], [(3, 9)]]
    assert halving_rungs(20, 9, 3) == [(20, 1), (6, 3), (2, 9)]
    assert halving_rungs(9, 10, 3) == [(9, 1), (3, 3), (1, 10)]


def test_halving_rungs_round_budgets_to_the_nearest_block():
    # rung budgets r_i = R * eta^(i - s) are rounded to whole blocks, not truncated:
    # R = 100, eta = 3 gives s = 4 and 100/81 = 1.23, 100/27 = 3.70, 100/9 = 11.1, 100/3 = 33.3
    assert halving_rungs(27, 100, 3) == [(27, 1), (9, 4), (3, 11), (1, 33), (1, 100)]
    assert [r for _, r in hyperband_brackets(100, 3)[1]] == [4, 11, 33, 100]


def sh(n=9, R=9, **kw):
    return SuccessiveHalving(parse_search(dict({"method": "successive_halving", "x": {"uniform": [0, 6]},
                                                "n_trials": n, "max_epochs": R}, **kw)))


def test_successive_halving_keeps_best_third_each_rung():
    proc = sh()
    trials = proc.ask(100)
    assert [t.trial_id for t in trials] == list(range(9))
    assert all(proc.budget(t) == 1 for t in range(9))
    losses = {t: float((t * 5) % 9) for t in range(9)}   # ranks: 0,2,4,6,8,1,3,5,7 -> 0, 2, 4 best? no:
    # (t*5)%9 = 0,5,1,6,2,7,3,8,4 -> best three are trials 0 (0), 2 (1), 4 (2)
    dec = proc.tell_block([Report(t, 1, losses[t]) for t in range(9)])
    assert [t for t in range(9) if dec[t] is C] == [0, 2, 4]
    assert proc.reason(1) == "not promoted at rung 0 (1 epochs) of bracket 0"
    assert proc.budget(0) == 3 and not proc.finished()
    assert proc.tell_block([Report(t, 2, 1.0) for t in (0, 2, 4)]) == {0: C, 2: C, 4: C}
    dec = proc.tell_block([Report(0, 3, 0.9), Report(2, 3, 0.5), Report(4, 3, 0.7)])
    assert dec == {0: S, 2: C, 4: S}
    assert proc.budget(2) == 9
    for e in range(4, 9):
        assert proc.tell(2, e, 0.4) is C
    assert proc.tell(2, 9, 0.3) is S and proc.reason(2) == "budget"
    assert proc.finished() and proc.ask(5) == []


def test_successive_halving_pauses_and_retrains_when_slots_are_short():
    proc = sh()
    first = proc.ask(3)
    assert [t.trial_id for t in first] == [0, 1, 2]
    # rung 0 incomplete: trials reaching it are paused to free their slots
    assert proc.tell_block([Report(t, 1, float(t)) for t in range(3)]) == {0: S, 1: S, 2: S}
    assert proc.reason(0) == "paused at rung 0 (1 epochs) of bracket 0"
    assert [t.trial_id for t in proc.ask(3)] == [3, 4, 5]
    proc.tell_block([Report(t, 1, 10.0 + t) for t in (3, 4, 5)])
    assert [t.trial_id for t in proc.ask(3)] == [6, 7, 8]
    # last wave completes the rung: best three are 0, 1 (paused) and 8 (active, warm)
    dec = proc.tell_block([Report(6, 1, 20.0), Report(7, 1, 30.0), Report(8, 1, 0.5)])
    assert dec == {6: S, 7: S, 8: C}
    again = proc.ask(5)
    assert [(t.trial_id, t.params) for t in again] == [(9, first[0].params), (10, first[1].params)]
    assert proc.budget(9) == 3 and proc.budget(8) == 3
    assert proc.reason(0) == "paused at rung 0 (1 epochs) of bracket 0; promoted, retrained as trial 9"
    assert proc.reason(2) == "not promoted at rung 0 (1 epochs) of bracket 0"


def test_successive_halving_promotes_converged_trial_without_training():
    proc = sh(n=3, R=3)       # rungs (3, 1), (1, 3)
    proc.ask(3)
    dec = proc.tell_block([Report(0, 1, 0.1, converged=True), Report(1, 1, 0.5), Report(2, 1, 0.9)])
    # trial 0 is best and converged: its score stands for rung 1, which is then complete
    assert dec == {0: S, 1: S, 2: S}
    assert proc.finished()
    assert proc.reason(0) == "converged" and proc.reason(1).startswith("not promoted at rung 0")


def test_successive_halving_breaks_ties_by_numeric_trial_id():
    # equal scores rank by trial id as a number: 2 comes before 10
    proc = sh(n=12)              # rungs (12, 1), (4, 3), (1, 9)
    proc.ask(12)
    dec = proc.tell_block([Report(t, 1, 1.0) for t in range(12)])
    assert [t for t in range(12) if dec[t] is C] == [0, 1, 2, 3]


def test_hyperband_runs_brackets_concurrently():
    proc = Hyperband(parse_search({"method": "hyperband", "x": {"uniform": [0, 6]}, "max_epochs": 9}))
    got = proc.ask(12)
    # bracket 0 has 9 rung-0 configs; the remaining slots go to bracket 1 at once
    assert [proc.budget(t.trial_id) for t in got] == [1] * 9 + [3] * 3
    assert len(proc.ask(100)) == 2 + 3


def test_hyperband_full_run_trains_each_rung_to_its_budget():
    spec = parse_search({"method": "hyperband", "x": {"uniform": [0, 6]}, "max_epochs": 9, "seed": 4})
    result = run_search(make_procedure(spec), FakeTrainer(), slots=50, epoch_iters=10)
    assert len(result.trials) == 9 + 5 + 3                # everything fits: nothing paused
    epochs = sorted(t.epochs for t in result.trials)
    # bracket 0: 6 x 1, 2 x 3, 1 x 9; bracket 1: 4 x 3, 1 x 9; bracket 2: 3 x 9
    assert epochs == [1] * 6 + [3] * 6 + [9] * 5
    assert result.passes == 9 * 10                        # the longest trial sets the pace
    assert result.best.scores[-1] == min(t.scores[-1] for t in result.trials)


# ------------------------------------------------------------------------------ ASHA
def asha(**kw):
    return ASHA(parse_search(dict({"method": "asha", "x": {"uniform": [0, 6]}, "n_trials": 8,
                                   "max_epochs": 9}, **kw)))


def test_asha_promotes_on_arrival():
    proc = asha()
    assert proc.rungs == [1, 3, 9]
    proc.ask(8)
    seq = [(0, 5.0, C),   # m=1: top max(1, 0)=1 -> rank 1 promoted
           (1, 3.0, C),   # m=2: keep 1, rank 1
           (2, 4.0, S),   # m=3: keep 1, rank 2
           (3, 1.0, C),   # m=4: keep 1, rank 1
           (4, 2.0, S),   # m=5: keep 1, rank 2
           (5, 0.5, C),   # m=6: keep 2, rank 1
           (6, 1.5, S)]   # m=7: keep 2, rank 3 (0.5, 1.0, 1.5)
    for tid, loss, want in seq:
        assert proc.tell(tid, 1, loss) is want, tid
    assert proc.reason(6) == "not promoted at rung 0 (1 epochs): rank 3 of 7"
    assert proc.budget(0) == 3
    assert proc.tell(0, 2, 4.5) is C                # between rungs
    assert proc.tell(0, 3, 4.0) is C                # first at rung 1
    assert proc.tell(1, 3, 4.2) is S                # m=2, keep 1, rank 2
    assert proc.tell(0, 9, 3.0) is S and proc.reason(0) == "budget"


def test_asha_same_block_arrivals_are_ranked_together():
    proc = asha()
    proc.ask(3)
    dec = proc.tell_block([Report(0, 1, 5.0), Report(1, 1, 3.0), Report(2, 1, 4.0)])
    assert dec == {0: S, 1: C, 2: S}


def test_asha_counts_trials_a_wrapper_stopped_ranked_last():
    # the bandit eliminates 3, 4 and 5 before rung 0 (1 epoch); they count there, ranked
    # last, as in SH and Hyperband: m = 6 keeps 2, so 0 and 1 are promoted, 2 is not
    proc = asha()
    proc.ask(6)
    for tid, loss in ((3, 5.0), (4, 6.0), (5, 7.0)):
        proc.stopped(tid, 1, loss, "bandit")
    dec = proc.tell_block([Report(0, 1, 1.0), Report(1, 1, 1.1), Report(2, 1, 1.2)])
    assert dec == {0: C, 1: C, 2: S}
    assert proc.reason(2) == "not promoted at rung 0 (1 epochs): rank 3 of 6"
    assert type(proc).from_state(json.loads(json.dumps(proc.state_dict()))).state_dict() == proc.state_dict()


# ---------------------------------------------------------------------------- bandit
def test_bandit_rule_forms():
    # TuPAQ Alg. 3: keep iff quality(m) * (1 + eps) > quality(best), quality = 1 / loss
    assert bandit_keeps(1.49, 1.0, 0.5) and not bandit_keeps(1.5, 1.0, 0.5)
    for loss in (0.2, 0.9, 1.0, 1.49, 1.5, 1.6, 7.0):
        assert bandit_keeps(loss, 1.0, 0.5) == ((1 / loss) * 1.5 > 1 / 1.0)
    # a config tied with the best is never eliminated, also with eps = 0 or best = 0
    assert bandit_keeps(1.0, 1.0, 0.0) and not bandit_keeps(1.0001, 1.0, 0.0)
    assert bandit_keeps(0.0, 0.0, 0.5) and not bandit_keeps(0.01, 0.0, 0.5)
    # negative losses (e.g. -AUC): within eps * |best| above the best
    assert bandit_keeps(-0.6, -1.0, 0.5) and not bandit_keeps(-0.5, -1.0, 0.5)
    assert not bandit_keeps(-0.4, -1.0, 0.5)


def test_bandit_checks_at_every_partial_iters_checkpoint():
    spec = parse_search({"x": [0, 1, 2, 3, 4], "max_epochs": 8,
                         "early_stopping": {"epsilon": 0.5, "partial_iters": 20}})
    proc = make_procedure(spec)
    assert isinstance(proc, BanditStopping) and proc.check_epoch == 2
    proc.ask(5)
    # epoch 1 is not a checkpoint (10 of 20 iterations): nobody is eliminated even if bad
    assert set(proc.tell_block([Report(t, 1, 9.0 + t) for t in range(5)]).values()) == {C}
    losses = [1.0, 1.4, 1.6, 3.0, 1.5]       # best 1.0 -> keep loss < 1.5
    dec = proc.tell_block([Report(t, 2, losses[t]) for t in range(5)])
    assert dec == {0: C, 1: C, 2: S, 3: S, 4: S}
    assert proc.reason(3) == ("bandit: loss 3 after 2 epochs is not within epsilon=0.5 of the best "
                              "loss so far 1")
    assert proc.running() == [0, 1]
    # epoch 3 is not a checkpoint: trial 1 continues although 50 is far behind 0.25
    assert proc.tell_block([Report(0, 3, 0.25), Report(1, 3, 50.0)]) == {0: C, 1: C}
    # epoch 4 is: best is 0.25 (reported at epoch 3), so 0.375 (= 1.5 * 0.25) goes, 0.3 stays
    assert proc.tell_block([Report(0, 4, 0.3), Report(1, 4, 0.375)]) == {0: C, 1: S}
    assert proc.best == 0.25
    # the best is the lowest loss ever reported: trial 0 is checked against its own 0.25
    assert proc.tell_block([Report(0, 5, 0.5)]) == {0: C}          # not a checkpoint
    assert proc.tell_block([Report(0, 6, 0.375)]) == {0: S}        # checkpoint, 0.375 = 1.5 * 0.25
    assert proc.reason(0).startswith("bandit: loss 0.375 after 6 epochs")
    assert proc.checked == 5 + 2 + 1 and proc.stopped_count == 5
    assert proc.finished()


def test_bandit_best_includes_converged_trials_and_never_stops_them():
    proc = make_procedure(parse_search({"x": [0, 1, 2], "max_epochs": 9,
                                        "early_stopping": {"epsilon": 0.5, "partial_iters": 10}}))
    assert proc.check_epoch == 1
    proc.ask(3)
    # trial 2 converges with 0.2; trial 1 (0.31 >= 1.5 * 0.2) goes; trial 0 (0.29) stays
    dec = proc.tell_block([Report(0, 1, 0.29), Report(1, 1, 0.31), Report(2, 1, 0.2, converged=True)])
    assert dec[0] is C and dec[1] is S and proc.best == 0.2
    # a converged ("fully trained") model far behind the best is not eliminated
    proc.tell_block([Report(0, 2, 0.9, converged=True)])
    assert proc.stopped_count == 1 and proc.checked == 2 and proc.reason(0) == "converged"


def test_bandit_in_the_driver_hand_computed():
    """quad_loss for lr 0.1 / 1 / 10 after e blocks: 1 + 2/e, 2 + 2/e, 5 + 2/e."""
    es = {"epsilon": 0.5, "partial_iters": 10}
    # one slot: lr 0.1 trains its 3 blocks (3, 2, 1.667); then lr 1 (4 >= 1.5 * 1.667 = 2.5)
    # and lr 10 (7) are eliminated by the finished trial after their first block.
    one = run_search(make_procedure(parse_search({"lr": [0.1, 1, 10], "max_epochs": 3,
                                                  "early_stopping": es})),
                     FakeTrainer(), slots=1, epoch_iters=10)
    assert [t.epochs for t in one.trials] == [3, 1, 1]
    assert [t.status for t in one.trials] == ["stopped"] * 3
    assert one.trials[0].stop_reason == "budget"
    assert one.trials[1].stop_reason.startswith("bandit: loss 4 after 1 epochs")
    assert one.passes == 5 * 10 and one.best.params == {"lr": 0.1}
    # two slots: lr 0.1 and lr 1 run together; block 1: 3 vs 4 (< 4.5, kept); block 2: 2 vs 3
    # (= 1.5 * 2, eliminated at the second checkpoint); lr 10 then fails its first check.
    two = run_search(make_procedure(parse_search({"lr": [0.1, 1, 10], "max_epochs": 3,
                                                  "early_stopping": es})),
                     FakeTrainer(), slots=2, epoch_iters=10)
    assert [t.epochs for t in two.trials] == [3, 2, 1]
    assert two.trials[1].stop_reason.startswith("bandit: loss 3 after 2 epochs")
    assert two.passes == 3 * 10 and two.best.params == {"lr": 0.1}


def test_bandit_saves_passes_in_the_driver():
    raw = {"lr": [1e-3, 1e-2, 0.1, 1, 10, 100], "max_epochs": 10}
    off = run_search(make_procedure(parse_search(raw)), FakeTrainer(), slots=2, epoch_iters=10)
    on = run_search(make_procedure(parse_search(dict(raw, early_stopping={"partial_iters": 10}))),
                    FakeTrainer(), slots=2, epoch_iters=10)
    assert on.best.params == off.best.params == {"lr": 0.1}
    assert on.passes < off.passes
    assert sum(t.epochs for t in on.trials) < sum(t.epochs for t in off.trials)
    assert any((t.stop_reason or "").startswith("bandit:") for t in on.trials)


# ------------------------------------------------------------------ grid / random
def test_grid_order_and_budget():
    proc = GridSearch(parse_search({"lr": [0.1, 1], "l2": [0, 1, 2], "max_epochs": 2}))
    assert [t.params for t in proc.ask(4)] == [{"lr": 0.1, "l2": 0}, {"lr": 0.1, "l2": 1},
                                               {"lr": 0.1, "l2": 2}, {"lr": 1, "l2": 0}]
    assert proc.tell(0, 1, 1.0) is C and proc.tell(0, 2, 1.0) is S and proc.reason(0) == "budget"
    assert [t.trial_id for t in proc.ask(9)] == [4, 5]


def random_params(seed, n=10):
    spec = parse_search({"lr": {"loguniform": [1e-3, 10]}, "k": {"int": [1, 4]}, "p": ["a", "b"],
                         "n_trials": n, "seed": seed})
    return [t.params for t in RandomSearch(spec).ask(n)]


def test_random_is_deterministic_under_seed():
    a, b, c = random_params(7), random_params(7), random_params(8)
    assert a == b and a != c
    for p in a:
        assert 1e-3 <= p["lr"] <= 10 and p["k"] in (1, 2, 3, 4) and p["p"] in ("a", "b")


def test_nested_choice_sampling():
    spec = parse_search({"family": {"choice": [
        {"family": "logistic", "lr": {"loguniform": [1e-3, 1]}},
        {"family": "svm", "c": {"int": [1, 100]}, "kernel": "linear"},
        "ridge"]}, "n_trials": 300, "seed": 1})
    params = [t.params for t in RandomSearch(spec).ask(300)]
    counts = {}
    for p in params:
        fam = p["family"]
        counts[fam] = counts.get(fam, 0) + 1
        keys = {"logistic": {"family", "lr"}, "svm": {"family", "c", "kernel"}, "ridge": {"family"}}[fam]
        assert set(p) == keys
    assert set(counts) == {"logistic", "svm", "ridge"}
    assert all(70 <= v <= 130 for v in counts.values())   # uniform over the three alternatives


def test_int_range_draws_include_both_ends():
    # {"int": [low, high]} is inclusive at both ends
    spec = parse_search({"k": {"int": [1, 3]}, "n_trials": 60, "seed": 0})
    assert {t.params["k"] for t in RandomSearch(spec).ask(60)} == {1, 2, 3}


def test_loguniform_draws_are_uniform_in_log_space():
    # log(x) is uniform on [log 1e-4, log 1]: the median is the geometric mean 1e-2 and half
    # the draws fall below it (a uniform draw on [1e-4, 1] would be below 1e-2 only 1% of the time)
    spec = parse_search({"lr": {"loguniform": [1e-4, 1]}, "n_trials": 400, "seed": 0})
    xs = np.array([t.params["lr"] for t in RandomSearch(spec).ask(400)])
    assert np.all((xs >= 1e-4) & (xs <= 1))
    assert 10 ** -2.5 < np.median(xs) < 10 ** -1.5
    assert 0.35 < np.mean(xs < 1e-2) < 0.65


# ------------------------------------------------------------------------------ TPE
def tpe_run(seed, n=30):
    spec = parse_search({"method": "tpe", "x": {"uniform": [-10, 10]}, "n_trials": n, "seed": seed,
                         "max_epochs": 1})
    log, proc = simulate(TPESearch(spec), slots=1)
    return [json.loads(entry[2])["x"] for entry in log if entry[0] == "ask"]


def test_tpe_deterministic_under_seed():
    a = tpe_run(3, n=14)
    assert a == tpe_run(3, n=14) and a != tpe_run(4, n=14)


def test_tpe_startup_proposals_are_distinct():
    # each proposal's sampler is seeded by (seed, trial id): with no finished trial yet the
    # first proposals still differ from one another
    spec = parse_search({"method": "tpe", "x": {"uniform": [-10, 10]}, "n_trials": 6, "seed": 3,
                         "max_epochs": 1})
    xs = [t.params["x"] for t in TPESearch(spec).ask(4)]
    assert len(set(xs)) == 4


def test_tpe_uses_history_on_a_quadratic():
    # loss (x - 3)^2 on x ~ U[-10, 10]: blind sampling has median |x - 3| = 5.
    for seed in (0, 1, 2):
        xs = tpe_run(seed, n=40)
        startup = sorted(abs(x - 3) for x in xs[:10])     # TPE's random start-up phase
        guided = sorted(abs(x - 3) for x in xs[-15:])     # proposals from the fitted model
        assert guided[7] < 3.5, (seed, guided)
        assert sum(guided) / 15 < sum(startup) / 10


def test_tpe_nested_choice():
    spec = parse_search({"method": "tpe", "n_trials": 12, "seed": 0, "max_epochs": 1, "m": {"choice": [
        {"m": "a", "x": {"uniform": [0, 6]}}, {"m": "b", "k": {"int": [1, 3]}}]}})
    log, _ = simulate(TPESearch(spec), slots=3)
    params = [json.loads(e[2]) for e in log if e[0] == "ask"]
    assert len(params) == 12
    assert all(set(p) in ({"m", "x"}, {"m", "k"}) for p in params)


# ------------------------------------------------------------------------- resume
RESUME_SPECS = [
    {"lr": [1e-3, 1e-2, 0.1, 1, 10], "l2": [0, 0.5], "max_epochs": 4},
    {"x": {"uniform": [0, 6]}, "n_trials": 9, "max_epochs": 4, "seed": 2},
    {"method": "tpe", "x": {"uniform": [0, 6]}, "n_trials": 14, "max_epochs": 2, "seed": 5},
    {"method": "successive_halving", "x": {"uniform": [0, 6]}, "n_trials": 9, "max_epochs": 9},
    {"method": "hyperband", "x": {"uniform": [0, 6]}, "max_epochs": 9, "seed": 1},
    {"method": "asha", "x": {"uniform": [0, 6]}, "n_trials": 12, "max_epochs": 9, "seed": 3},
    {"method": "hyperband", "x": {"uniform": [0, 6]}, "max_epochs": 9,
     "early_stopping": {"epsilon": 0.3, "partial_iters": 10}},
    {"method": "tpe", "x": {"uniform": [0, 6]}, "n_trials": 10, "max_epochs": 3,
     "early_stopping": {"epsilon": 0.2, "partial_iters": 10}},
    {"max_epochs": 4},       # no dimensions (the default search): one configuration
]


@pytest.mark.parametrize("raw", RESUME_SPECS, ids=lambda r: r.get("method", "grid/random")
                         + ("+bandit" if "early_stopping" in r else ""))
def test_resume_from_state_makes_the_same_decisions(raw):
    spec = parse_search(raw)
    straight, _ = simulate(make_procedure(spec), slots=4)
    blocks = max(e[1] for e in straight if e[0] == "tell")
    assert blocks >= 3
    resumed, proc = simulate(make_procedure(spec), slots=4, swap_at=(1, blocks // 2, blocks - 1))
    assert resumed == straight
    assert proc.finished()


def test_state_saved_with_an_empty_space_still_resumes():
    """States written before the default search's spec dropped "space": {} resume; users
    still get the error for an explicit empty space."""
    proc = make_procedure(parse_search({"max_epochs": 4}))
    proc.ask(1)
    state = json.loads(json.dumps(proc.state_dict()))
    assert "space" not in state["spec"]
    old = dict(state, spec=dict(state["spec"], space={}))
    resumed = SearchProcedure.from_state(old)
    assert resumed.state_dict() == proc.state_dict()
    from groupml.errors import SearchSpecError

    with pytest.raises(SearchSpecError):
        parse_search({"method": "grid", "space": {}})


# ------------------------------------------------------------------------- driver
def test_driver_fills_and_refills_slots():
    spec = parse_search({"lr": [1e-3, 1e-2, 0.1, 1, 10], "max_epochs": 3})
    trainer = FakeTrainer()
    events = []
    result = run_search(make_procedure(spec), trainer, slots=2, epoch_iters=10, on_epoch=events.append)
    assert isinstance(trainer, Trainer)
    assert trainer.max_active == 2
    runs = [entry[1] for entry in trainer.log if entry[0] == "run"]
    assert runs == [(0, 1)] * 3 + [(2, 3)] * 3 + [(4,)] * 3
    assert result.passes == trainer.passes == 9 * 10 and result.blocks == 9
    assert [t.epochs for t in result.trials] == [3] * 5
    assert all(t.status == "stopped" and t.stop_reason == "budget" for t in result.trials)
    assert result.best.params == {"lr": 0.1} and result.best.trial_id == 2
    assert trainer.active() == []
    assert [e.block for e in events] == list(range(1, 10))
    assert events[2].reports == [(0, 3, result.trials[0].scores[2], "STOP"),
                                 (1, 3, result.trials[1].scores[2], "STOP")]
    assert events[2].active == [] and events[3].active == [2, 3]


def test_driver_honours_convergence_and_epoch_cap():
    spec = parse_search({"lr": [0.1], "converge_iters": [15, 1000], "max_epochs": 10})
    trainer = FakeTrainer()
    result = run_search(make_procedure(spec), trainer, slots=4, epoch_iters=10, max_epochs=5)
    fast, slow = result.trials
    assert (fast.status, fast.stop_reason, fast.epochs) == ("converged", "converged", 2)
    assert (slow.status, slow.stop_reason, slow.epochs) == ("stopped", "max_epochs", 5)
    assert ("remove", 0) in trainer.log and trainer.active() == []


def test_driver_reports_how_a_trainer_finished_a_config():
    # each finished config is reported as it finished: 'converged', 'max_iter' or 'stalled'
    spec = parse_search({"lr": [0.1], "converge_iters": [15], "finish": ["converged", "max_iter", "stalled"]})
    result = run_search(make_procedure(spec), FakeTrainer(), slots=3, epoch_iters=10)
    got = sorted((t.params["finish"], t.status, t.stop_reason) for t in result.trials)
    assert got == [("converged", "converged", "converged"),
                   ("max_iter", "max_iter", "max_iter: it ran all its iterations (max_iter, epochs or boosting "
                                            "rounds) without reaching tol"),
                   ("stalled", "stalled", "stalled: the line search found no decrease (the last weights are kept)")]


def test_a_glm_stopped_by_max_iter_is_not_reported_converged():
    from groupml.fitting import fit_group

    rng = np.random.default_rng(0)
    X = rng.standard_normal((400, 3))
    y = (X[:, 0] + 0.5 * rng.standard_normal(400) > 0).astype(float)
    short = fit_group(X, y, "logistic", {"max_iter": 3}, {})
    full = fit_group(X, y, "logistic", {}, {})
    assert [(t["iterations"], t["status"]) for t in short.trials] == [(3, "max_iter")]
    assert [t["status"] for t in full.trials] == ["converged"] and full.trials[0]["iterations"] < 100
    # the fit stays ok, with a warning in its message (scikit-learn's ConvergenceWarning)
    assert short.status == "ok" and short.message.startswith(
        "warning: the selected configuration stopped (max_iter) after 3 iterations without reaching tol")
    assert full.message is None
    # labels of scale 1e-6: the gradient at zero is below tol, nothing is learned -- said so
    tiny = fit_group(X, X @ np.array([3.0, -2.0, 1.0]) * 1e-6, "linear", {"l2": [0.0]}, {})
    assert tiny.trials[0]["iterations"] == 0 and tiny.message.startswith(
        "warning: the selected configuration met tol at zero weights (0 iterations)")
    # sgd never tests tol: it ends as max_iter by design, and "raise max_iter" would not help
    sgd = fit_group(X, y, "logistic", {"solver": ["sgd"], "max_iter": [20], "lr": [0.05]}, {})
    assert sgd.status == "ok" and sgd.trials[0]["status"] == "max_iter" and sgd.message is None


def test_driver_on_epoch_exception_propagates():
    class Cancelled(Exception):
        pass

    def cancel_at_two(event):
        if event.block == 2:
            raise Cancelled("canceling statement due to user request")

    spec = parse_search({"lr": [0.1, 1], "max_epochs": 5})
    trainer = FakeTrainer()
    with pytest.raises(Cancelled):
        run_search(make_procedure(spec), trainer, slots=2, epoch_iters=10, on_epoch=cancel_at_two)
    assert trainer.passes == 20


def test_best_trial_ties_go_to_lowest_id():
    spec = parse_search({"lr": [0.1], "tag": ["a", "b", "c"], "max_epochs": 2})      # tag: same curve
    result = run_search(make_procedure(spec), FakeTrainer(), slots=3, epoch_iters=10)
    assert result.best.trial_id == 0


def test_driver_rejects_bad_slots():
    from groupml.errors import InvalidParameterError
    spec = parse_search({"lr": [0.1]})
    with pytest.raises(InvalidParameterError, match="The 'slots' value of search must be >= 1; got 0"):
        run_search(make_procedure(spec), FakeTrainer(), slots=0, epoch_iters=10)


def test_driver_with_successive_halving_and_few_slots():
    spec = parse_search({"method": "successive_halving", "x": {"uniform": [0, 6]}, "n_trials": 9,
                         "max_epochs": 9, "seed": 11})
    trainer = FakeTrainer()
    result = run_search(make_procedure(spec), trainer, slots=3, epoch_iters=10)
    assert trainer.max_active <= 3
    finals = [t for t in result.trials if t.epochs == 9]
    assert len(finals) == 1
    xs = [t.params["x"] for t in result.trials[:9]]
    assert finals[0].params["x"] == min(xs, key=lambda x: abs(x - 3))   # true best survives


@pytest.mark.parametrize("raw, fail_at", [
    ({"lr": [0.1, 10], "max_epochs": 4}, 2),
    ({"method": "successive_halving", "lr": [0.1, 10], "n_trials": 9, "max_epochs": 3, "seed": 2}, 1)])
def test_driver_marks_diverged_trials_failed(raw, fail_at):
    def curve(params, epoch):
        return float("nan") if params["lr"] > 5 and epoch >= fail_at else quad_loss(params, epoch)

    result = run_search(make_procedure(parse_search(raw)), FakeTrainer(curve), slots=3, epoch_iters=10)
    bad = [t for t in result.trials if t.params["lr"] == 10]
    assert bad and all(t.status == "failed" for t in bad)
    assert all(t.stop_reason == f"diverged (validation loss nan) after {fail_at} epochs" for t in bad)
    assert all(math.isfinite(s) for t in result.trials for s in t.scores)
    assert result.best.params == {"lr": 0.1}
    json.dumps(result.procedure_state, allow_nan=False)



def test_best_trial_never_picks_a_failed_trial():
    # a diverged trial is out of the ranking even when its last finite score was the lowest
    from groupml.engine import Trial
    from groupml.search import best_trial

    ok = Trial(1, {"l2": 1.0}, 3, [0.30, 0.25, 0.20], "converged", "converged")
    bad = Trial(2, {"l2": 0.0}, 3, [0.10, 0.05], "failed", "diverged (validation loss nan) after 3 epochs")
    assert best_trial([ok, bad]) is ok
    assert best_trial([bad]) is None


def test_driver_counts_an_infinite_loss_as_diverged():
    # +inf is as non-finite as NaN: the trial fails, inf is never stored, the state stays strict JSON
    from groupml.search import search_state

    def curve(params, epoch):
        return math.inf if params["lr"] > 5 and epoch >= 2 else quad_loss(params, epoch)

    states = []
    result = run_search(make_procedure(parse_search({"lr": [0.1, 10], "max_epochs": 3})), FakeTrainer(curve),
                        slots=2, epoch_iters=10, on_epoch=lambda e: states.append(search_state(e)))
    good, bad = result.trials
    assert (bad.status, bad.stop_reason, bad.epochs) == ("failed", "diverged (validation loss inf) after 2 epochs", 2)
    assert bad.scores == [quad_loss({"lr": 10}, 1)]
    assert (good.status, good.epochs) == ("stopped", 3) and result.best is good
    assert states[1]["trials"][1]["status"] == "failed"
    json.dumps(states, allow_nan=False)


def test_driver_drops_a_diverged_trial_from_the_trainer():
    # once a trial diverges the trainer stops training it: no later block includes it
    def curve(params, epoch):
        return float("nan") if params["lr"] > 5 and epoch >= 2 else quad_loss(params, epoch)

    trainer = FakeTrainer(curve)
    run_search(make_procedure(parse_search({"lr": [0.1, 10], "max_epochs": 3})), trainer, slots=2, epoch_iters=10)
    assert [e[1] for e in trainer.log if e[0] == "run"] == [(0, 1), (0, 1), (0,)]
    assert trainer.log[:6] == [("add", 0), ("add", 1), ("run", (0, 1)), ("run", (0, 1)), ("remove", 1),
                               ("run", (0,))]
    assert trainer.active() == []


def test_resumed_search_continues_block_and_pass_numbering():
    # a search resumed from its saved state numbers blocks and counts passes from where it stopped
    from groupml.search import search_state

    class Stop(Exception):
        pass

    spec = parse_search({"x": [0, 1], "max_epochs": 3})
    trainer, saved = FakeTrainer(), []

    def stop_after_first(event):
        saved.append(search_state(event))
        if event.block == 1:
            raise Stop

    with pytest.raises(Stop):
        run_search(make_procedure(spec), trainer, slots=2, epoch_iters=5, on_epoch=stop_after_first)
    assert (saved[-1]["blocks"], saved[-1]["passes"], trainer.passes) == (1, 5, 5)
    events = []
    result = run_search(SearchProcedure.from_state(saved[-1]["procedure"]), trainer, slots=2, epoch_iters=5,
                        resume=saved[-1], on_epoch=lambda e: events.append((e.block, e.passes)))
    assert events == [(2, 10), (3, 15)]
    assert (result.blocks, result.passes) == (3, 15)
    assert [t.epochs for t in result.trials] == [3, 3]


def test_tpe_without_optuna_is_a_clear_error(monkeypatch):
    # it was a bare ModuleNotFoundError (PL/Python: no SQLSTATE of ours, no hint)
    import sys

    from groupml.errors import FeatureNotSupportedError
    monkeypatch.setitem(sys.modules, "optuna", None)
    with pytest.raises(FeatureNotSupportedError) as info:
        tpe_run(3, n=4)
    assert info.value.sqlstate == "0A000" and "needs Optuna" in info.value.message
    assert "method 'random'" in info.value.hint
