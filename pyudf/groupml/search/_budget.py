"""How much work a search spec asks for, before anything runs (for the planner and explain_search).

Pure arithmetic on a :class:`SearchSpec`: number of configurations, the most that can be
in flight at once (an upper bound on the useful batch size k), and the epoch budget
(blocks of ``epoch_iters`` solver iterations, summed over configurations).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Dict, Optional

from . import _space
from ._brackets import halving_rungs, hyperband_brackets
from ._spec import SearchSpec


TPE_ROUNDS = 4
TPE_MIN_BATCH = 4


@dataclass(frozen=True)
class SearchBudget:
    method: str
    n_configs: int          # most configurations the procedure will propose (retrains of promoted ones included)
    in_flight: int          # most configurations that can be trained at the same time
    epochs: int             # upper bound on epoch blocks summed over configurations
    epochs_per_config: int  # most blocks one configuration may train
    early_stopping: Optional[str]
    note: str

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def search_budget(spec: SearchSpec, *, max_iter: int = 100) -> SearchBudget:
    """The work of ``spec``. ``max_iter`` (the learner's iteration cap) bounds the epochs of
    methods without an epoch cap: ceil(max_iter / epoch_iters) blocks per configuration."""
    cap = max(1, -(-max_iter // spec.epoch_iters))    # blocks until the learner's max_iter (exact for huge ones)
    per_config = min(spec.max_epochs, cap)
    es = None
    if spec.early_stopping is not None:
        es = (f"bandit (epsilon {spec.early_stopping.epsilon:g}, check every "
              f"{spec.partial_epochs} epoch block(s) = {spec.partial_epochs * spec.epoch_iters} iterations)")
    m = spec.method
    if m in ("grid", "random", "tpe"):
        n = (_space.grid_size(spec.space) if spec.space else 1) if m == "grid" else spec.n_trials
        in_flight = n
        epochs = n * per_config
        note = f"{n} configurations, each trained up to {per_config} epoch blocks"
        if m == "tpe":
            # TPE proposes from finished trials: with every trial in flight at once it would
            # be random search. Batches of about a quarter of the trials (at least 4) give it
            # four rounds of feedback while each pass still serves several configurations.
            in_flight = min(n, max(TPE_MIN_BATCH, math.ceil(n / TPE_ROUNDS)))
            note += (f"; TPE proposes from the results so far, so at most {in_flight} are in flight "
                     f"(about 1/{TPE_ROUNDS} of them, at least {TPE_MIN_BATCH})")
    elif m in ("successive_halving", "hyperband"):
        brackets = ([halving_rungs(spec.n_trials, spec.max_epochs, spec.eta, spec.min_epochs)]
                    if m == "successive_halving" else
                    hyperband_brackets(spec.max_epochs, spec.eta, spec.min_epochs))
        n = sum(ni for rungs in brackets for ni, _ in rungs)
        in_flight = sum(rungs[0][0] for rungs in brackets)
        # a configuration stops at its learner's max_iter whatever rung it is promoted to
        epochs = sum(ni * min(ri, cap) for rungs in brackets for ni, ri in rungs)
        per_config = min(spec.max_epochs, cap)
        note = (f"{len(brackets)} bracket(s), rungs (configs, epochs) "
                + " | ".join(", ".join(f"({ni}, {ri})" for ni, ri in rungs) for rungs in brackets)
                + "; counts retrained promotions, so both are upper bounds (a promoted configuration still "
                "in its slot continues training)")
    elif m == "pbt":
        # the population trains together; each exploit stops one member and starts a child
        # at the member's epoch, so the epoch total stays population * max_epochs
        n = spec.population
        in_flight = n
        epochs = n * per_config
        rounds = max(0, (per_config - 1) // spec.perturbation_interval)
        note = (f"a population of {n} configurations trained together up to {per_config} epoch blocks; every "
                f"{spec.perturbation_interval} block(s) (up to {rounds} times) the bottom {spec.quantile:g} copy "
                f"the state of the top {spec.quantile:g} and perturb its parameters (new trials)")
    else:  # asha
        n = spec.n_trials
        in_flight = n
        per_config = min(spec.max_epochs, cap)
        epochs = n * per_config
        note = (f"{n} configurations; rungs at {spec.min_epochs}*{spec.eta}^i epoch blocks up to "
                f"{spec.max_epochs}; epochs is the upper bound (no promotion stopped)")
    if m in ("successive_halving", "hyperband", "asha") and cap < spec.max_epochs:
        note += f"; the learner's max_iter stops every configuration after {cap} epoch blocks"
    if es is not None:
        note += "; the bandit stops weak configurations early, so the budget is an upper bound"
    return SearchBudget(method=m, n_configs=n, in_flight=max(1, in_flight), epochs=epochs,
                        epochs_per_config=per_config, early_stopping=es, note=note)
