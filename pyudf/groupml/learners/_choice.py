"""A search that also chooses the model family -- TuPAQ's ChoiceP over model families
(section 3.1: "a space over Random Forests or Logistic Regression models").

A search space with a ``model`` dimension draws each configuration's family with its other
parameters: ``{"model": {"choice": ["logistic", {"model": "lightgbm", "num_leaves": [7, 31]}]}}``.
A configuration without ``model`` belongs to the family the call names. Every family of one
search has the call's task (classification or regression) and is selected on one metric, so
the validation losses of all configurations compare.

:class:`FamilyChoiceTrainer` is an :class:`groupml.engine.Trainer` over one train/validation
split that keeps one trainer per family (each batching its own configurations as usual) and
routes every configuration to its family's. Pure Python: plain data in, decisions out.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Sequence

from ..errors import InvalidParameterError, SearchSpecError
from ..validation import shown

#: The search-space parameter that names a configuration's model family.
MODEL_KEY = "model"


def mentions_model(search: Any) -> bool:
    """True when a raw search spec has a ``model`` dimension (top level or in ``space``)."""
    if not isinstance(search, Mapping):
        return False
    space = search.get("space")
    return MODEL_KEY in search or (isinstance(space, Mapping) and MODEL_KEY in space)


def choice_param_names(default) -> List[str]:
    """Every parameter a configuration of a family search may name: those of every family of
    the default family's task, and ``model``."""
    from ._factory import LEARNER_FAMILIES

    names = {MODEL_KEY}
    for fam in LEARNER_FAMILIES.values():
        if fam.kind == default.kind:
            names.update(fam.param_names)
    return sorted(names)


def chosen_families(space, owner: str = "search") -> Optional[List[Any]]:
    """The family names a parsed space's ``model`` dimension names (plain items, or the
    ``model`` of each sub-space), in order; None without a ``model`` dimension."""
    from ..search import Categorical, Fixed, is_subspace

    for dim in space:
        if dim.name != MODEL_KEY:
            continue
        if isinstance(dim, Fixed):
            return [dim.value]
        if isinstance(dim, Categorical):
            names: List[Any] = []
            for item in dim.items:
                sub = chosen_families(item, owner) if is_subspace(item) else [item]
                if sub is None:
                    raise SearchSpecError(
                        f"Every sub-space of the '{MODEL_KEY}' dimension of {owner} must name its model; one does "
                        f"not", hint='Write it as {"model": "lightgbm", "num_leaves": [7, 31]}.')
                names += [n for n in sub if n not in names]
            return names
        raise SearchSpecError(f"The '{MODEL_KEY}' dimension of {owner} must be a model family or a choice of them; "
                              f"got a range", hint='For example {"model": {"choice": ["logistic", "lightgbm"]}}.')
    return None


def check_family_choice(default, names: Sequence[Any], metric: Optional[str], owner: str = "search", *,
                        metric_checked: bool = True):
    """The families a search chooses among (the default family first), checked: known, of the
    default family's task, and (``metric_checked``) able to be selected on one metric: ``metric``
    or the default family's. Returns (families, metric)."""
    from ._factory import LEARNER_FAMILIES

    families = [default]
    for name in names:
        fam = LEARNER_FAMILIES.get(name) if isinstance(name, str) else None
        if fam is None:
            raise SearchSpecError(
                f"The '{MODEL_KEY}' dimension of {owner} must name model families; got {shown(name)}",
                hint=f"Known model families are {', '.join(sorted(LEARNER_FAMILIES))}.")
        if fam.kind != default.kind:
            raise SearchSpecError(
                f"The '{MODEL_KEY}' dimension of {owner} may only name {default.kind} families like "
                f"'{default.name}'; got '{name}' ({fam.kind})",
                hint="Search classifiers and regressors in separate calls.")
        if fam not in families:
            families.append(fam)
    chosen = metric or default.default_metric
    for fam in families if metric_checked else ():
        if chosen not in fam.metric_names:
            common = [m for m in default.metric_names if all(m in f.metric_names for f in families)]
            raise InvalidParameterError(
                f"The metric '{chosen}' cannot select model '{fam.name}' of this search; every family of a search "
                f"is selected on one metric", hint=f"Set options' metric to one they share: {', '.join(common)}.")
    return families, chosen


def split_params(params: Mapping[str, Any], default: str):
    """(family name, the configuration's own parameters) of one configuration."""
    rest = {k: v for k, v in params.items() if k != MODEL_KEY}
    return str(params.get(MODEL_KEY, default)), rest


class FamilyChoiceTrainer:
    """A Trainer whose configurations may be of several families: one trainer per family over
    the same split (made when its first configuration arrives), each configuration routed to
    its family's. ``passes`` counts every family's passes."""

    #: handed to every family's trainer that has one (the GLMs' sample warm start)
    warm_start = False

    def __init__(self, default_family: str, X_train, y_train, X_val=None, y_val=None, *, metric: str):
        self.default = default_family
        self.metric = metric
        self._data = (X_train, y_train, X_val, y_val)
        self._trainers: Dict[str, Any] = {}
        self._family_of: Dict[int, str] = {}
        self._interrupt_check = None

    @property
    def interrupt_check(self):
        return self._interrupt_check

    @interrupt_check.setter
    def interrupt_check(self, check) -> None:
        self._interrupt_check = check
        for t in self._trainers.values():
            t.interrupt_check = check

    @property
    def passes(self) -> int:
        return sum(t.passes for t in self._trainers.values())

    def _trainer_for(self, family: str):
        t = self._trainers.get(family)
        if t is None:
            from ._factory import make_trainer
            t = make_trainer(family, *self._data, metric=self.metric, interrupt_check=self._interrupt_check)
            if hasattr(t, "warm_start"):
                t.warm_start = self.warm_start
            self._trainers[family] = t
        return t

    def _of(self, trial_id: int):
        family = self._family_of.get(trial_id)
        if family is None:
            raise InvalidParameterError(f"Trial {trial_id} is not in this trainer",
                                        hint="Add it first (a search procedure's proposal).")
        return self._trainers[family]

    def family_of(self, trial_id: int) -> str:
        self._of(trial_id)
        return self._family_of[trial_id]

    def add(self, trial_id: int, params: Mapping[str, Any]) -> None:
        family, own = split_params(params, self.default)
        self._trainer_for(family).add(trial_id, own)
        self._family_of[trial_id] = family

    def remove(self, trial_id: int) -> None:
        self._of(trial_id).remove(trial_id)

    def active(self) -> List[int]:
        live = {tid for t in self._trainers.values() for tid in t.active()}
        return [tid for tid in self._family_of if tid in live]

    def parts(self) -> List[Any]:
        """The families' trainers that have configurations still training."""
        return [t for t in self._trainers.values() if any(not t.converged(tid) for tid in t.active())]

    def run(self, iterations: int) -> None:
        """One block for every family with configurations still training."""
        for t in self.parts():
            t.run(iterations)

    def converged(self, trial_id: int) -> bool:
        return self._of(trial_id).converged(trial_id)

    def status(self, trial_id: int) -> str:
        return self._of(trial_id).status(trial_id)

    def iterations(self, trial_id: int) -> int:
        return self._of(trial_id).iterations(trial_id)

    def params(self, trial_id: int) -> Dict[str, Any]:
        """The configuration's parameters as its family resolved them, with its family."""
        return {MODEL_KEY: self._family_of.get(trial_id, self.default), **self._of(trial_id).params(trial_id)}

    def score(self, trial_id: int) -> float:
        return self._of(trial_id).score(trial_id)

    def metrics(self, trial_id: int) -> Dict[str, float]:
        return self._of(trial_id).metrics(trial_id)

    def model(self, trial_id: int):
        return self._of(trial_id).model(trial_id)
