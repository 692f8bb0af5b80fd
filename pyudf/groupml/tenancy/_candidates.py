"""A job's candidates: the candidates jsonb of submit_job expanded into configurations.

Pure Python: the jsonb value in, ``(task, [{family, params, key}])`` out, every entry
validated. A candidate's key is ``"<family>:<canonical JSON params>"``: one configuration
has one key in every job, however its params were written, which is what lets the GP prior
of one job be estimated from the qualities other jobs observed for the same keys.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Tuple

from ..errors import InvalidParameterError, SearchSpecError
from ..fitting import plan_search
from ..learners import LEARNER_FAMILIES, get_learner_family, model_identity
from ..search import make_procedure
from ..validation import check_keys

#: Validation metric per task: the job's quality, higher is better.
TASK_METRIC = {"classification": "accuracy", "regression": "r2"}
#: Most configurations one job's candidates may expand into.
MAX_CANDIDATES = 1000


def canonical_params(family: str, params: Dict[str, Any]) -> Dict[str, Any]:
    """The params that differ from the family's defaults, validated and normalised (``1`` and
    ``1.0`` alike, ``"64,32"`` and ``[64, 32]`` alike, a parameter training does not read
    dropped: :func:`groupml.learners.model_identity`), so one configuration has one form."""
    fam = get_learner_family(family)
    full, defaults = model_identity(fam, fam.validate_params(params)), fam.validate_params({})
    return {k: full[k] for k in sorted(full) if k not in defaults or full[k] != defaults[k]}


def candidate_key(family: str, params: Dict[str, Any]) -> str:
    """Stable key of a candidate: one configuration gives the same key in every job, however
    its params were written (:func:`canonical_params`)."""
    return f"{family}:{json.dumps(canonical_params(family, params), sort_keys=True, separators=(',', ':'))}"


def _family_names(kind: str) -> List[str]:
    return [name for name, fam in LEARNER_FAMILIES.items() if fam.kind == kind]


def expand_candidates(raw: Any, owner: str = "submit_job") -> Tuple[str, List[Dict[str, Any]]]:
    """Turn the candidates jsonb into (task, [{family, params, key}]), validating everything.

    Each entry is a family name (its defaults), ``{"model": f, "params": {...}}`` (one
    candidate) or ``{"model": f, "search": <grid or random search spec>}`` (one candidate
    per configuration of the search).
    """
    hint = ('Pass a JSON array such as \'[{"model": "logistic", "search": {"l2": [0, 0.01, 0.1]}}, '
            '{"model": "svm", "params": {"l2": 0.1}}]\'.')
    if not isinstance(raw, list):
        raise InvalidParameterError(f"The 'candidates' value of {owner} must be a JSON array; got {json.dumps(raw)}",
                                    hint=hint)
    if not raw:
        raise InvalidParameterError(f"The 'candidates' value of {owner} must list at least one model; got []",
                                    hint=hint)
    out: List[Dict[str, Any]] = []
    tasks = set()
    for i, entry in enumerate(raw):
        where = f"{owner} candidates[{i}]"
        if isinstance(entry, str):
            entry = {"model": entry}
        if not isinstance(entry, dict):
            raise InvalidParameterError(f"The 'candidates[{i}]' value of {owner} must be a model name or an "
                                        f"object; got {json.dumps(entry)}", hint=hint)
        check_keys(entry, where, ["model", "params", "search"], cls=InvalidParameterError, hint=hint)
        if "model" not in entry:
            raise InvalidParameterError(f"The 'model' value of {where} is missing", hint=hint)
        if "params" in entry and "search" in entry:
            raise InvalidParameterError(f"{where} gives both 'params' and 'search'; give one of them",
                                        hint="'params' is one configuration, 'search' expands into many.")
        family = get_learner_family(entry["model"], where)
        tasks.add(family.kind)
        if "search" in entry:
            search = entry["search"]
            if not isinstance(search, dict):
                raise SearchSpecError(f"The 'search' value of {where} must be a JSON object; got {json.dumps(search)}",
                                      hint=hint)
            spec = plan_search(family, search)
            if spec.method not in ("grid", "random"):
                raise SearchSpecError(
                    f"The 'method' value of {where} search must be 'grid' or 'random'; got {spec.method!r}",
                    hint="Candidates are fixed configurations; the scheduler's GP decides which to train. "
                         "Use a grid or a random sample of the space.")
            configs = [t.params for t in make_procedure(spec).ask(MAX_CANDIDATES + 1)]
        else:
            params = entry.get("params")
            params = {} if params is None else params       # null as if omitted; [] or 0 are not objects
            if not isinstance(params, dict):
                raise InvalidParameterError(f"The 'params' value of {where} must be a JSON object; got "
                                            f"{json.dumps(params)}", hint=hint)
            family.validate_params(params)
            configs = [params]
        drawn = set()
        for params in configs:
            params = canonical_params(family.name, params)
            key = candidate_key(family.name, params)
            if key in drawn:        # a random search may draw one configuration of a discrete space twice
                continue
            drawn.add(key)
            out.append({"family": family.name, "params": params, "key": key})
        if len(out) > MAX_CANDIDATES:
            raise InvalidParameterError(f"The 'candidates' value of {owner} must expand into at most "
                                        f"{MAX_CANDIDATES} configurations; got more",
                                        hint="Submit a smaller grid, or a random search with fewer n_trials.")
    if len(tasks) > 1:
        raise InvalidParameterError(
            f"The 'candidates' value of {owner} must be all classifiers ({', '.join(_family_names('classification'))}) "
            f"or all regressors ({', '.join(_family_names('regression'))}); got a mix", hint="Submit one job per task.")
    seen = set()
    for c in out:
        if c["key"] in seen:
            raise InvalidParameterError(f"The 'candidates' value of {owner} lists the configuration "
                                        f"{c['key']} twice", hint="Give each configuration once.")
        seen.add(c["key"])
    return tasks.pop(), out
