"""Population based training: exploit/explore decisions with a seeded RNG, the procedure in
the driver (lineage, forks from the parent's state), resume, and the spec's rules."""

import json

import numpy as np
import pytest

from groupml.engine import Decision
from groupml.errors import FeatureNotSupportedError, SearchSpecError
from groupml.search import (PopulationBasedTraining, Report, SearchProcedure, exploit, explore, make_procedure,
                            parse_search, run_search, search_budget, search_state)
from groupml.search._pbt import quantile_size
from groupml.search._space import Categorical, Fixed, IntRange, LogUniform, Uniform

SPACE = {"lr": {"loguniform": [0.001, 1.0]}, "batch_size": [16, 32, 64], "momentum": 0.5}


def pbt_spec(**kw):
    spec = dict({"method": "pbt", "population": 4, "perturbation_interval": 2, "max_epochs": 6, "seed": 3,
                 "space": SPACE}, **kw)
    return parse_search(spec)


# ----------------------------------------------------------------------------- the pure steps
def test_quantile_size_is_ceil_and_at_most_half():
    assert [quantile_size(n, 0.25) for n in (0, 1, 2, 3, 4, 5, 8, 9)] == [0, 0, 1, 1, 1, 2, 2, 3]
    assert quantile_size(4, 0.5) == 2 and quantile_size(5, 0.5) == 2


def test_exploit_replaces_the_bottom_quantile_by_top_members():
    scores = {0: 0.5, 1: 0.1, 2: 0.9, 3: 0.3, 4: 0.2, 5: 0.7, 6: 0.4, 7: 0.8}
    pairs = exploit(scores, 0.25, np.random.default_rng(0))
    assert [loser for loser, _ in pairs] == [2, 7]            # worst first
    assert all(parent in (1, 4) for _, parent in pairs)       # the two best
    again = exploit(scores, 0.25, np.random.default_rng(0))
    assert pairs == again                                      # seeded
    # ties go to the lower trial id
    assert exploit({3: 1.0, 1: 1.0, 2: 0.0}, 0.25, np.random.default_rng(0)) == [(3, 2)]
    assert exploit({0: 1.0}, 0.25, np.random.default_rng(0)) == []


def test_explore_perturbs_by_the_factors_or_resamples():
    space = (LogUniform("lr", 0.001, 1.0), IntRange("units", 1, 100), Uniform("wd", 0.0, 0.1),
             Categorical("batch_size", (16, 32, 64)), Fixed("momentum", 0.5))
    parent = {"lr": 0.1, "units": 10, "wd": 0.1, "batch_size": 32, "momentum": 0.5, "other": "kept"}
    seen = {"lr": set(), "units": set(), "wd": set(), "batch_size": set()}
    for seed in range(40):
        child = explore(parent, space, np.random.default_rng(seed), 0.0)
        assert child["momentum"] == 0.5 and child["other"] == "kept"
        for k in seen:
            seen[k].add(child[k])
    assert sorted(seen["lr"]) == pytest.approx([0.08, 0.12])
    assert seen["units"] == {8, 12}
    assert sorted(seen["wd"]) == pytest.approx([0.08, 0.1])   # 0.12 is clipped to the range's end
    assert seen["batch_size"] == {16, 64}                      # a neighbouring item
    # resample_probability 1: every dimension is a fresh draw from its range
    drawn = [explore(parent, space, np.random.default_rng(s), 1.0) for s in range(20)]
    assert all(0.001 <= c["lr"] <= 1.0 and 1 <= c["units"] <= 100 for c in drawn)
    assert len({c["lr"] for c in drawn}) == 20
    assert explore(parent, space, np.random.default_rng(7), 0.25) == explore(parent, space,
                                                                             np.random.default_rng(7), 0.25)


# ----------------------------------------------------------------------------- in the driver
class ForkingTrainer:
    """A trainer whose 'model' is a number: every epoch adds lr; the loss is |w - 1|, so an
    lr near 1/6 reaches the best loss at 6 epochs. fork copies the parent's w."""

    def __init__(self):
        self.passes = 0
        self.w, self.params, self.done = {}, {}, {}
        self.forks = []

    def add(self, tid, params):
        self.w[tid], self.params[tid], self.done[tid] = 0.0, dict(params), 0

    def fork(self, tid, params, parent, epochs):
        assert self.done[parent] == epochs            # the parent has not trained past the fork
        self.forks.append((tid, parent, epochs, self.w[parent]))
        self.w[tid], self.params[tid], self.done[tid] = self.w[parent], dict(params), epochs

    def remove(self, tid):
        del self.params[tid]

    def active(self):
        return sorted(self.params)

    def run(self, iterations):
        for tid in self.params:
            self.w[tid] += self.params[tid]["lr"] * iterations
            self.done[tid] += iterations
        self.passes += iterations

    def converged(self, tid):
        return False

    def status(self, tid):
        return "max_iter"

    def score(self, tid):
        return abs(self.w[tid] - 1.0)


def drive(spec, trainer=None):
    trainer = trainer or ForkingTrainer()
    events = []
    res = run_search(make_procedure(spec), trainer, slots=spec.population, epoch_iters=1,
                     on_epoch=lambda e: events.append(search_state(e)))
    return res, trainer, events


def test_pbt_in_the_driver_forks_children_from_their_parents_state():
    spec = pbt_spec()
    res, trainer, _ = drive(spec)
    by_id = {t.trial_id: t for t in res.trials}
    children = [t for t in res.trials if t.parent_id is not None]
    # two perturbation epochs (2 and 4) before max_epochs 6, one member replaced at each
    assert [t.forked_at for t in children] == [2, 4]
    for child in children:
        parent = by_id[child.parent_id]
        assert child.trial_id >= spec.population
        assert child.epochs == spec.max_epochs                # continued to the budget from the fork
        assert child.scores[:child.forked_at] == parent.scores[:child.forked_at]
        changed = {k for k in child.params if child.params[k] != parent.params[k]}
        assert changed <= {"lr", "batch_size"} and child.params["momentum"] == 0.5
    # each replaced member stopped at the fork epoch and names its replacement
    losers = [t for t in res.trials if (t.stop_reason or "").startswith("exploited")]
    assert len(losers) == 2
    for loser, child in zip(losers, children):
        assert loser.epochs == child.forked_at and f"trial {child.trial_id}" in loser.stop_reason
    # the trainer copied the parent's state at the fork
    assert [(t, p, e) for t, p, e, _ in trainer.forks] == [(c.trial_id, c.parent_id, c.forked_at) for c in children]
    # the same seed makes the same decisions
    again, _, _ = drive(spec)
    assert [(t.trial_id, t.params, t.parent_id, t.forked_at, t.scores) for t in again.trials] == \
        [(t.trial_id, t.params, t.parent_id, t.forked_at, t.scores) for t in res.trials]


def test_pbt_resumes_from_any_block_with_the_same_decisions():
    spec = pbt_spec(population=5, perturbation_interval=1, quantile=0.4)
    full, _, events = drive(spec)
    want = [(t.trial_id, t.params, t.parent_id, t.forked_at, t.scores, t.stop_reason) for t in full.trials]
    for cut in (1, 3):
        state = json.loads(json.dumps(events[cut - 1]))
        trainer = ForkingTrainer()
        # rebuild the trainer at that block by replaying the blocks before it
        drive_until(spec, trainer, cut)
        proc = SearchProcedure.from_state(state["procedure"])
        res = run_search(proc, trainer, slots=spec.population, epoch_iters=1, resume=state)
        assert [(t.trial_id, t.params, t.parent_id, t.forked_at, t.scores, t.stop_reason)
                for t in res.trials] == want


class _Stop(Exception):
    pass


def drive_until(spec, trainer, blocks):
    def stop(e):
        if e.block == blocks:
            raise _Stop
    with pytest.raises(_Stop):
        run_search(make_procedure(spec), trainer, slots=spec.population, epoch_iters=1, on_epoch=stop)


def test_pbt_procedure_decisions_by_hand():
    proc = PopulationBasedTraining(pbt_spec(population=4, perturbation_interval=1, max_epochs=3))
    first = proc.ask(10)
    assert [t.trial_id for t in first] == [0, 1, 2, 3] and all(t.parent_id is None for t in first)
    out = proc.tell_block([Report(0, 1, 0.4), Report(1, 1, 0.1), Report(2, 1, 0.3), Report(3, 1, 0.9)])
    assert out == {0: Decision.CONTINUE, 1: Decision.CONTINUE, 2: Decision.CONTINUE, 3: Decision.STOP}
    (child,) = proc.ask(10)
    assert (child.trial_id, child.parent_id, child.forked_at, child.epochs) == (4, 1, 1, 1)
    assert proc.lineage(4) == (1, 1)
    assert proc.reason(3) == "exploited at epoch 1: replaced by trial 4, forked from trial 1"
    out = proc.tell_block([Report(t, 2, s) for t, s in ((0, 0.5), (1, 0.2), (2, 0.1), (4, 0.05))])
    assert out[0] == Decision.STOP and sum(d is Decision.STOP for d in out.values()) == 1
    (child,) = proc.ask(10)
    assert child.parent_id == 4 and child.forked_at == 2
    out = proc.tell_block([Report(t, 3, 0.1) for t in (1, 2, 4, child.trial_id)])
    assert set(out.values()) == {Decision.STOP} and proc.ask(10) == [] and proc.finished()


def test_a_trainer_without_fork_is_refused_before_training():
    class Plain:
        passes = 0
    with pytest.raises(FeatureNotSupportedError, match="pbt"):
        run_search(make_procedure(pbt_spec()), Plain(), slots=4, epoch_iters=1)


def test_pbt_budget_keeps_the_population_in_flight():
    b = search_budget(pbt_spec(population=6, max_epochs=9, perturbation_interval=3))
    assert (b.n_configs, b.in_flight, b.epochs, b.epochs_per_config) == (6, 6, 54, 9)


# ----------------------------------------------------------------------------- the spec
def test_pbt_spec_round_trips_and_defaults():
    spec = parse_search({"method": "pbt", "space": {"lr": {"loguniform": [0.001, 0.1]}}})
    assert (spec.population, spec.perturbation_interval, spec.quantile, spec.resample_probability) == \
        (8, 1, 0.25, 0.25)
    assert spec.epoch_iters == 1
    assert parse_search(spec.to_dict()) == spec
    assert "population" not in parse_search({"method": "random", "space": SPACE}).to_dict()


@pytest.mark.parametrize("extra, key, text", [
    ({"population": 1}, "population", ">= 2"),
    ({"population": 257}, "population", "<= 256"),
    ({"population": 2.5}, "population", "an integer"),
    ({"perturbation_interval": 0}, "perturbation_interval", ">= 1"),
    ({"perturbation_interval": 6}, "perturbation_interval", "< max_epochs (6)"),
    ({"quantile": 0}, "quantile", "> 0"),
    ({"quantile": 0.6}, "quantile", "<= 0.5"),
    ({"resample_probability": 1.5}, "resample_probability", "<= 1"),
    ({"resample_probability": "often"}, "resample_probability", "a number"),
    ({"slots": 2}, "slots", ">= population (4)"),
    ({"epoch_iters": 10}, "epoch_iters", "1 for method 'pbt'"),
    ({"early_stopping": {"method": "bandit"}}, "early_stopping", "null for method 'pbt'"),
    ({"space": {"lr": [{"lr": 0.1}, {"lr": 0.2}]}}, "lr", "no sub-spaces"),
])
def test_bad_pbt_specs_state_the_value_and_the_rule(extra, key, text):
    base = {"method": "pbt", "population": 4, "max_epochs": 6, "space": SPACE}
    with pytest.raises(SearchSpecError) as ei:
        parse_search(dict(base, **extra))
    assert f"'{key}'" in str(ei.value) and text in str(ei.value) and ei.value.hint
    assert ei.value.sqlstate == "22023"


def test_pbt_keys_without_method_pbt_are_refused():
    with pytest.raises(SearchSpecError, match="'population' value of search must be given only with method 'pbt'"):
        parse_search({"method": "random", "population": 4, "space": SPACE})
