"""Search over hyperparameter configurations, one epoch block at a time.

Public API (everything else in this package is private)::

    spec = parse_search({"lr": [0.01, 0.1, 1], "l2": [0, 0.001]}, param_names=[...])
    procedure = make_procedure(spec)          # grid, random, tpe, successive_halving,
                                              # hyperband, asha (+ bandit early stopping), pbt
    result = run_search(procedure, trainer, slots=10, epoch_iters=spec.epoch_iters)
    state = procedure.state_dict()            # JSON; SearchProcedure.from_state(state) resumes

Scores are validation losses: lower is better. See docs/search.md.
"""

from ._space import DISTRIBUTIONS, Categorical, Fixed, grid_size, is_subspace, iter_grid, sample
from ._spec import EarlyStopping, SearchSpec, METHODS, parse_search
from ._base import Report, SearchProcedure
from ._basic import FixedBudgetProcedure, GridSearch, RandomSearch
from ._tpe import TPESearch
from ._brackets import halving_rungs, hyperband_brackets
from ._halving import ASHA, Hyperband, SuccessiveHalving
from ._bandit import BanditStopping, bandit_keeps
from ._pbt import PopulationBasedTraining, exploit, explore
from ._driver import EpochEvent, SearchResult, best_trial, make_procedure, run_search, search_state
from ._budget import SearchBudget, search_budget

__all__ = [
    "parse_search", "SearchSpec", "EarlyStopping", "METHODS",
    "SearchProcedure", "Report", "FixedBudgetProcedure",
    "GridSearch", "RandomSearch", "TPESearch", "SuccessiveHalving", "Hyperband", "ASHA",
    "BanditStopping", "bandit_keeps", "PopulationBasedTraining", "exploit", "explore", "hyperband_brackets", "halving_rungs",
    "make_procedure", "run_search", "search_state", "SearchResult", "EpochEvent", "best_trial",
    "iter_grid", "sample", "grid_size", "SearchBudget", "search_budget",
    "DISTRIBUTIONS", "Categorical", "Fixed", "is_subspace",
]
