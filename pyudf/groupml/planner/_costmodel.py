"""Time per data pass as a function of rows n, features d, batch size k (configs
trained together) and workers w -- TuPAQ's equation (1) with our terms -- calibrated
by non-negative least squares from measured runs.

    t(n, d, k, w) = c_fixed + c_worker * w + c_compute * n*d*k / w
                    + c_memory * n*d / w + c_network * d*k*(w - 1)

c_fixed and c_worker are framework overheads (TuPAQ's k0, k1); c_compute prices the
batched gradient (a n x d by d x k product); c_memory one read of the data, shared by
the k configs; c_network the exchange of k models of d values between workers.
"""

from __future__ import annotations

import math
from typing import Any, Dict, Iterable, List, Mapping, Optional

import numpy as np

from ..errors import InvalidParameterError
from ..validation import check_keys, check_number
from ._common import nnls

TERMS = ("fixed", "per_worker", "compute", "memory", "elementwise", "network")
_W_TERMS = ("per_worker", "network")  # identifiable only from runs on several worker counts
RUN_KEYS = ("n", "d", "k", "workers", "seconds")
OWNER = "cost model run"

#: Weight of the pull of every fitted coefficient towards its prior, against the runs'
#: relative squared errors: small enough that varied runs decide (a coefficient 10x its
#: prior costs what a 0.03% error on one run does), but it settles what the runs leave open.
#: Runs of one batch size k on one width d make n*d*k, n*d and n*k one column up to a
#: factor, and the unregularised fit put all of a run's time into the k term: k = 1 then
#: looked as good as any k, the planner took it, and estimates came out 3-7x low.
PRIOR_WEIGHT = 1e-9

#: Rough priors for one modern CPU core (seconds); used until runs are recorded.
DEFAULT_COEFFICIENTS = {"fixed": 1e-3, "per_worker": 5e-3, "compute": 1e-9, "memory": 1e-9,
                        "elementwise": 1e-8, "network": 1e-8}


def term_values(n: float, d: float, k: float, w: float) -> np.ndarray:
    """The feature values of one run, in ``TERMS`` order.

    ``elementwise`` (n·k/w) is the per-row, per-configuration work that batching cannot
    share: the loss and its derivative (exp/log for logistic) on every row of every config.
    """
    return np.array([1.0, w, n * d * k / w, n * d / w, n * k / w, d * k * (w - 1)], dtype=float)


def _check_shape(n, d, k, w, owner: str):
    n = check_number(n, "n", owner, ge=0, integer=True)
    d = check_number(d, "d", owner, ge=1, integer=True)
    k = check_number(k, "k", owner, ge=1, integer=True)
    w = check_number(w, "workers", owner, ge=1, integer=True)
    return n, d, k, w


def check_run(run: Mapping[str, Any]) -> Dict[str, Any]:
    """Validate one measured run ``{n, d, k, workers, seconds}`` (optional ``source`` text)."""
    if not isinstance(run, Mapping):
        raise InvalidParameterError(f"A cost model run must be a mapping; got {type(run).__name__}",
                                    hint="Record runs as {n, d, k, workers, seconds}.")
    check_keys(run, OWNER, RUN_KEYS + ("source",), cls=InvalidParameterError)
    for key in RUN_KEYS:
        if key not in run:
            raise InvalidParameterError(f"The '{key}' value of {OWNER} is missing",
                                        hint="Record runs as {n, d, k, workers, seconds}.")
    n, d, k, w = _check_shape(run["n"], run["d"], run["k"], run["workers"], OWNER)
    sec = check_number(run["seconds"], "seconds", OWNER, gt=0)
    out = {"n": n, "d": d, "k": k, "workers": w, "seconds": sec}
    if "source" in run:
        out["source"] = str(run["source"])
    return out


class CostModel:
    """Calibrated estimator of seconds per data pass.

    Runs accumulate (at most ``max_runs``, oldest dropped) and every ``add_runs`` refits.
    The fit minimises *relative* squared error with non-negative coefficients
    (``scipy.optimize.nnls`` on columns scaled to unit norm), each coefficient pulled
    slightly towards its prior (:data:`PRIOR_WEIGHT`), which decides what the runs cannot
    tell apart.  When all runs share one worker count, the worker-dependent terms cannot be
    told apart from the fixed cost: they keep their current values (priors) and the rest is
    fitted to what remains.
    """

    def __init__(self, coefficients: Optional[Mapping[str, float]] = None, *, max_runs: int = 1000):
        self.max_runs = check_number(max_runs, "max_runs", "cost model", ge=1, integer=True)
        coef = dict(DEFAULT_COEFFICIENTS)
        if coefficients is not None:
            check_keys(coefficients, "cost model coefficients", TERMS, cls=InvalidParameterError)
            for name, value in coefficients.items():
                coef[name] = check_number(value, name, "cost model coefficients", ge=0)
        self.coefficients: Dict[str, float] = coef
        self.prior: Dict[str, float] = dict(coef)      # what the fit is pulled towards
        self.runs: List[Dict[str, Any]] = []
        self.fitted_terms: List[str] = []

    # ---- calibration -------------------------------------------------------------------
    def add_runs(self, runs: Iterable[Mapping[str, Any]]) -> "CostModel":
        checked = [check_run(r) for r in runs]
        self.runs = (self.runs + checked)[-self.max_runs:]
        self.fit()
        return self

    def add_run(self, **run) -> "CostModel":
        return self.add_runs([run])

    def fit(self) -> Dict[str, float]:
        """Refit the coefficients on the stored runs; returns them."""
        if not self.runs:
            return dict(self.coefficients)
        X = np.array([term_values(r["n"], r["d"], r["k"], r["workers"]) for r in self.runs])
        y = np.array([r["seconds"] for r in self.runs], dtype=float)
        several_w = len({r["workers"] for r in self.runs}) > 1
        fit_idx = [i for i, t in enumerate(TERMS) if several_w or t not in _W_TERMS]
        fixed_idx = [i for i in range(len(TERMS)) if i not in fit_idx]
        target = y - X[:, fixed_idx] @ np.array([self.coefficients[TERMS[i]] for i in fixed_idx])
        A = X[:, fit_idx] / y[:, None]
        b = target / y
        anchored = [j for j, i in enumerate(fit_idx) if self.prior[TERMS[i]] > 0]
        if anchored:                    # rows pulling each coefficient towards its prior
            R = np.zeros((len(anchored), len(fit_idx)))
            for r, j in enumerate(anchored):
                R[r, j] = math.sqrt(PRIOR_WEIGHT) / self.prior[TERMS[fit_idx[j]]]
            A = np.vstack([A, R])
            b = np.concatenate([b, np.full(len(anchored), math.sqrt(PRIOR_WEIGHT))])
        scale = np.linalg.norm(A, axis=0)
        scale[scale == 0] = 1.0
        sol, _ = nnls(A / scale, b)
        for j, i in enumerate(fit_idx):
            self.coefficients[TERMS[i]] = float(sol[j] / scale[j])
        self.fitted_terms = [TERMS[i] for i in fit_idx]
        return dict(self.coefficients)

    # ---- estimates ---------------------------------------------------------------------
    def predict(self, n: int, d: int, k: int = 1, workers: int = 1) -> float:
        """Estimated seconds for one pass over n rows of d features for k configs on w workers."""
        n, d, k, w = _check_shape(n, d, k, workers, "cost model")
        c = np.array([self.coefficients[t] for t in TERMS])
        return float(term_values(n, d, k, w) @ c)

    def terms(self, n: int, d: int, k: int = 1, workers: int = 1) -> Dict[str, float]:
        """The estimate split by term (seconds)."""
        n, d, k, w = _check_shape(n, d, k, workers, "cost model")
        vals = term_values(n, d, k, w)
        return {t: float(v * self.coefficients[t]) for t, v in zip(TERMS, vals)}

    def search_seconds(self, n: int, d: int, n_configs: int, k: int, workers: int = 1) -> float:
        """One pass for every one of ``n_configs`` configs, trained ``k`` at a time."""
        n_configs = check_number(n_configs, "n_configs", "cost model", ge=1, integer=True)
        k = check_number(k, "k", "cost model", ge=1, integer=True)
        full, rest = divmod(n_configs, k)
        total = full * self.predict(n, d, k, workers) if full else 0.0
        if rest:
            total += self.predict(n, d, rest, workers)
        return total

    def continuous_optimal_workers(self, n: int, d: int, k: int = 1) -> float:
        """TuPAQ eq. (2) for this model: t(w) = A + B*w + C/w is least at sqrt(C / B), with C
        every term divided by w (compute, memory and elementwise)."""
        c = self.coefficients
        B = c["per_worker"] + c["network"] * d * k
        C = c["compute"] * n * d * k + c["memory"] * n * d + c["elementwise"] * n * k
        return math.inf if B == 0 else math.sqrt(C / B)

    # ---- state -------------------------------------------------------------------------
    def state_dict(self) -> Dict[str, Any]:
        return {"version": 2, "terms": list(TERMS), "coefficients": dict(self.coefficients),
                "prior": dict(self.prior),
                "fitted_terms": list(self.fitted_terms), "max_runs": self.max_runs,
                "runs": [dict(r) for r in self.runs]}

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "CostModel":
        if state.get("version") != 2 or list(state.get("terms", [])) != list(TERMS):
            raise InvalidParameterError(
                f"The 'version' value of cost model state must be 2 with terms {', '.join(TERMS)}; "
                f"got {state.get('version')}", hint="Recalibrate from the recorded runs.")
        model = cls(state["coefficients"], max_runs=state.get("max_runs", 1000))
        if isinstance(state.get("prior"), Mapping):
            model.prior = dict(cls(state["prior"]).coefficients)
        model.runs = [check_run(r) for r in state.get("runs", [])]
        model.fitted_terms = list(state.get("fitted_terms", []))
        return model


def choose_batch_size(model: CostModel, n: int, d: int, n_configs: int, *, workers: int = 1,
                      max_batch: Optional[int] = None, memory_bytes: Optional[int] = None,
                      bytes_per_value: int = 8) -> int:
    """The k (configs per pass) that minimises the estimated time to give every config
    one pass; smallest k on ties.  With ``memory_bytes``, k is limited so the pass's
    working set -- the data (n*d), the margins (n*k) and weights plus gradients (2*d*k)
    -- fits."""
    owner = "cost model"
    n, d, _, w = _check_shape(n, d, 1, workers, owner)
    s = check_number(n_configs, "n_configs", owner, ge=1, integer=True)
    top = s if max_batch is None else min(s, check_number(max_batch, "max_batch", owner, ge=1,
                                                          integer=True))
    if memory_bytes is not None:
        mem = check_number(memory_bytes, "memory_bytes", owner, gt=0)
        per_k = bytes_per_value * (n / w + 2 * d)
        fit = int((mem - bytes_per_value * n * d / w) // per_k) if per_k else top
        top = max(1, min(top, fit))
    best_k, best_t = 1, math.inf
    for k in range(1, top + 1):
        t = model.search_seconds(n, d, s, k, w)
        if t < best_t * (1 - 1e-12):
            best_k, best_t = k, t
    return best_k


def choose_workers(model: CostModel, n: int, d: int, k: int = 1, *, max_workers: int,
                   within: float = 1.1) -> int:
    """Right-sizing: the smallest worker count whose estimated pass time is within
    ``within`` times the best estimate over 1..max_workers."""
    owner = "cost model"
    top = check_number(max_workers, "max_workers", owner, ge=1, integer=True)
    return right_size({w: model.predict(n, d, k, w) for w in range(1, top + 1)}, within)


def right_size(times: Mapping[int, float], within: float = 1.1) -> int:
    """TuPAQ's right-sizing (section 3.4, eq. 2): of the worker counts with an estimated time,
    the smallest whose time is within ``within`` times the best -- more workers than that cost
    their connections and memory for at most ``within`` - 1 of the time."""
    within = check_number(within, "within", "cost model", ge=1)
    if not times:
        raise InvalidParameterError("right_size needs at least one worker count with an estimated time",
                                    hint="Estimate 1..max_workers first.")
    best = min(times.values())
    return min(w for w, t in times.items() if t <= within * best)
