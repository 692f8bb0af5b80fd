"""TPE through Optuna's ask/tell interface (Optuna is imported only when TPE is used).

Determinism: every ``ask`` installs a fresh ``TPESampler`` whose seed is derived from
(spec seed, trial id), so a proposal depends only on the seed, the trial id and the
completed history -- never on how many random numbers earlier samplers consumed.
Resume replays every known trial into a fresh in-memory study in proposal order
(enqueue its parameters, ask, tell the result when it has one), which rebuilds the
exact history the uninterrupted study had.
"""

from __future__ import annotations

from typing import Any, Dict

from . import _space
from ._basic import FixedBudgetProcedure
from ._base import register
from ._spec import SearchSpec


def _optuna():
    try:
        import optuna
    except ImportError:
        from ..errors import FeatureNotSupportedError
        raise FeatureNotSupportedError(
            "The 'tpe' search method needs Optuna, which is not installed in groupml's Python environment",
            hint="Install groupml again (python3 installer/groupml_installer.py install), which installs Optuna; "
                 "or use method 'random' or 'hyperband'.") from None

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "Trial n finished" chatter
    return optuna


def _suggest(trial, space, prefix: str = "") -> Dict[str, Any]:
    """Define-by-run mirror of the space; nested names are prefixed so they stay unique."""
    params: Dict[str, Any] = {}
    for dim in space:
        key = prefix + dim.name
        if isinstance(dim, _space.Fixed):
            params[dim.name] = dim.value
        elif isinstance(dim, _space.Uniform):
            params[dim.name] = float(trial.suggest_float(key, dim.low, dim.high))
        elif isinstance(dim, _space.LogUniform):
            params[dim.name] = float(trial.suggest_float(key, dim.low, dim.high, log=True))
        elif isinstance(dim, _space.IntRange):
            params[dim.name] = int(trial.suggest_int(key, dim.low, dim.high))
        else:
            idx = int(trial.suggest_categorical(key, list(range(len(dim.items)))))
            item = dim.items[idx]
            if _space.is_subspace(item):
                params.update(_suggest(trial, item, f"{key}[{idx}]."))
            else:
                params[dim.name] = item
    return params


@register("tpe")
class TPESearch(FixedBudgetProcedure):
    """Tree-structured Parzen Estimator proposals (Optuna), one full-budget trial each."""

    def __init__(self, spec: SearchSpec):
        super().__init__(spec, spec.n_trials)
        self._optuna = _optuna()
        self._study = self._optuna.create_study(direction="minimize")
        self._live: Dict[int, Any] = {}       # trial id -> optuna trial still running
        self._internal: Dict[int, Dict[str, Any]] = {}  # trial id -> optuna param names/values

    def _sampler(self, trial_id: int):
        seed = (self.spec.seed * 1_000_003 + trial_id) % (2 ** 32)
        return self._optuna.samplers.TPESampler(seed=seed)

    def _propose(self, trial_id):
        self._study.sampler = self._sampler(trial_id)
        ot = self._study.ask()
        params = _suggest(ot, self.spec.space)
        self._live[trial_id] = ot
        self._internal[trial_id] = dict(ot.params)
        return params

    def _complete(self, trial_id, score):
        ot = self._live.pop(trial_id, None)
        if ot is None:
            return
        if score is None:
            self._study.tell(ot, state=self._optuna.trial.TrialState.FAIL)
        else:
            self._study.tell(ot, float(score))

    def _extra_state(self):
        return {"internal": [[tid, p] for tid, p in sorted(self._internal.items())]}

    def _restore_extra(self, state):
        for tid, internal in state["internal"]:
            tid = int(tid)
            self._study.sampler = self._sampler(tid)
            self._study.enqueue_trial(internal)
            ot = self._study.ask()
            _suggest(ot, self.spec.space)
            self._internal[tid] = dict(ot.params)
            rec = self._trials[tid]
            self._live[tid] = ot
            if rec["state"] != "running":
                self._complete(tid, rec["score"])
