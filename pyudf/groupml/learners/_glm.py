"""Batched GLM trainer: many configurations share every pass over the data.

All configs evaluated in a pass are stacked into ``Theta`` ((d+1) x k; the last row
is the intercept), so one pass computes ``Z = X @ W + b`` and ``G = X.T @ R`` for all
of them with two BLAS-3 calls (TuPAQ section 3.4, eq. 4).  Every config keeps its own
solver state (L-BFGS history, line-search step, epoch counter) and its trajectory
depends only on its own function/gradient values, so training a config in a batch
gives the same result as training it alone (up to floating-point summation order).

The solvers work on standardized columns: every column is centred on its training mean
and divided by its training standard deviation (a constant column keeps scale 1), so a
feature measured in millions and one measured in thousandths take comparable steps and
lbfgs converges in a few dozen iterations whatever the units.  The data are never copied:
a pass evaluates the loss at the equivalent weights on the user's scale
(:meth:`GLMTrainer._evaluate`) and the chain rule brings the gradient back
(:meth:`GLMTrainer._objective`).  The penalties (l2, l1) apply to the standardized
weights, as glmnet's ``standardize=TRUE`` and a scikit-learn pipeline of StandardScaler and
a penalized model do, so rescaling a column never changes the fitted predictions; ``tol``
bounds the standardized gradient and ``lr`` steps on the standardized scale.  Models store
the weights on the user's scale.  The intercept is never penalized; a configuration
without an intercept is scaled but not centred.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import InvalidParameterError, PrerequisiteStateError
from ._data import check_iterations, choose_metric, train_val
from ._families import ColumnWeights, GLMFamily, get_family
from ._metrics import validation_loss, validation_metrics
from ._model import GLMModel
from ._trials import TrialAccessors, TrialRecord, find_trial

LBFGS_HISTORY = 10
ARMIJO_C1 = 1e-4
MAX_BACKTRACKS = 40
APPROX_EPS = 1e-10             # relative rounding level of f, float64 passes
APPROX_EPS_FLOAT32 = 1e-6      # float32 passes (Hager and Zhang's default)
APPROX_SLOPE = 0.8
CHUNK_ROWS = 8192          # rows per block (fewer when a block of X would exceed ~8 MB)
# The products of a pass use np.dot, not np.matmul / ``@``: both call the same BLAS routines,
# but numpy 2's matmul keeps the GIL when its output is small (X.T @ R is d x k, the
# intercept sums are k values), so groups trained in threads of one backend ran one at a
# time (measured: 1.08x from 2 threads on the demo workload); np.dot releases it.
# Up to this many configs, the two products of a pass run as one matrix-vector product
# per config (BLAS-2) instead of one skinny matrix-matrix product: OpenBLAS's dgemm with
# 2-4 right-hand columns costs 2-3x its dgemv, more than k separate dgemv calls
# (bench/bench_batching.py, docs/perf/search.md).
GEMV_MAX_K = 4
# Above GEMV_MAX_K the pass is compute-bound (two dgemm per block), and a block of X small
# enough to stay in a core's L2 cache between the two products is 10-25% faster per pass:
# the second product (and OpenBLAS's packing of the block) then reads it from cache instead
# of memory.  A matrix-vector pass streams X and prefers the big blocks (fewer calls).
GEMM_BLOCK_VALUES = 1 << 16    # 512 KiB of X per block (at least GEMM_MIN_ROWS rows)
GEMM_MIN_ROWS = 256
# For wide blocks the two dgemm of a block are called with the configs as the short *left*
# side (Z^T = W^T X_b^T, then G^T = R^T X_b), which OpenBLAS runs 1.4-1.7x faster than the
# same products with k right-hand columns (one thread, a whole pass of 20,000 x 1,000 rows:
# 36-40 ms against 60 ms at k = 10, 34 against 54 at k = 5; 50,000 x 300 at k = 20: 43
# against 60).  With few features or few configs the usual orientation is as fast or faster
# (50,000 x 300 at k = 10: 32.5 against 34-38 ms; 100,000 x 100 at k = 10: 24 against 25).
WIDE_FEATURES = 200
WIDE_WORK = 4000               # d * k from which a block is wide (d >= WIDE_FEATURES)

# warm start (GLMTrainer._presolve): a sample of about PRESOLVE_ROWS training rows, for
# groups with at least PRESOLVE_MIN_STEP times as many, and both labels PRESOLVE_MIN_CLASS times
PRESOLVE_ROWS = 10_000
PRESOLVE_MIN_STEP = 3
PRESOLVE_MIN_CLASS = 50

# status values of a config
RUNNING, CONVERGED, MAX_ITER = "running", "converged", "max_iter"
STALLED, DIVERGED = "stalled", "diverged"
FINISHED = (CONVERGED, MAX_ITER, STALLED, DIVERGED)
# version of state_dict / checkpoint_state: 2 holds the weights on the standardized scale
STATE_FORMAT = 2




def column_moments(X: np.ndarray) -> Dict[str, Any]:
    """Mergeable moments of the columns of ``X`` (row count, means, sums of squared
    deviations from the means), in two passes over blocks of rows: ``sum(x**2)/n - mean**2``
    cancels to nothing for a column like 1e8 + x.  The same dict as the MLP's shard moments
    (labels left out), so the moments of a group split over workers merge alike."""
    n, d = X.shape
    step = max(GEMM_MIN_ROWS, GEMM_BLOCK_VALUES // max(d, 1))     # blocks that stay in cache
    ones = np.ones(min(n, step))
    mx, m2x = np.zeros(d), np.zeros(d)
    for s in range(0, n, step):                     # column sums as BLAS-2 products
        Xb = X[s:s + step]
        mx += np.dot(ones[:Xb.shape[0]], Xb)
    if n:
        mx /= n
    for s in range(0, n, step):
        D = X[s:s + step] - mx
        np.square(D, out=D)
        m2x += np.dot(ones[:D.shape[0]], D)
    return {"n": int(n), "mx": mx, "m2x": m2x, "my": 0.0, "m2y": 0.0}


def standardization(parts: Sequence[Mapping[str, Any]], d: int) -> Tuple[np.ndarray, np.ndarray]:
    """(shift, scale) of the columns from the moments of a group's training rows (one part,
    or one per shard in shard order); a constant column gets scale 1."""
    from ._mlp import merge_stats       # numpy only: torch stays unloaded

    stats = merge_stats(list(parts), d)
    return np.array(stats["x_mean"], dtype=np.float64), np.array(stats["x_scale"], dtype=np.float64)


def standardized(X: np.ndarray, shift: np.ndarray, scale: np.ndarray, dtype) -> np.ndarray:
    """``[(X - shift) / scale, 1]``: the standardized columns and a column of ones, as a new
    C-contiguous ``dtype`` matrix, computed in float64 in cache-sized blocks of rows and
    rounded once."""
    n, d = X.shape
    out = np.empty((n, d + 1), dtype=dtype)
    out[:, d] = 1.0
    inv = 1.0 / scale
    step = max(GEMM_MIN_ROWS, GEMM_BLOCK_VALUES // max(d, 1))
    for s in range(0, n, step):
        block = X[s:s + step] - shift
        np.multiply(block, inv, out=out[s:s + step, :d])
    return out


class _Config:
    """Solver state of one configuration (plain numpy; no data)."""

    __slots__ = ("trial_id", "params", "solver", "theta", "f", "g", "iters", "status",
                 "S", "Y", "rho", "p", "t", "gp", "backtracks", "epoch", "version", "evaluated")

    def __init__(self, trial_id: int, params: Dict[str, Any], dim: int):
        self.trial_id = trial_id
        self.params = params
        self.solver = params["solver"]
        self.theta = np.zeros(dim)
        self.f = math.nan
        self.g: Optional[np.ndarray] = None
        self.iters = 0
        self.status = RUNNING
        self.S: List[np.ndarray] = []
        self.Y: List[np.ndarray] = []
        self.rho: List[float] = []
        self.p: Optional[np.ndarray] = None   # current search direction (None: between iterations)
        self.t = 0.0
        self.gp = 0.0
        self.backtracks = 0
        self.epoch = 0
        self.version = 0
        self.evaluated = False                # f, g known at theta

    _ARRAYS = ("theta", "g", "p")
    _SCALARS = ("f", "iters", "status", "t", "gp", "backtracks", "epoch", "version", "evaluated")

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"trial_id": self.trial_id, "params": dict(self.params)}
        for name in self._ARRAYS:
            v = getattr(self, name)
            out[name] = None if v is None else [float(x) for x in v]
        for name in self._SCALARS:
            v = getattr(self, name)
            out[name] = None if isinstance(v, float) and not math.isfinite(v) else v
        out["S"] = [[float(x) for x in s] for s in self.S]
        out["Y"] = [[float(x) for x in y] for y in self.Y]
        out["rho"] = [float(r) for r in self.rho]
        return out

    def to_arrays(self) -> Dict[str, Any]:
        """Like :meth:`to_dict`, with copies of the numpy arrays (for npz checkpoints);
        non-finite values are kept exactly."""
        dim = self.theta.shape[0]
        out: Dict[str, Any] = {"trial_id": int(self.trial_id), "params": dict(self.params)}
        for name in self._ARRAYS:
            v = getattr(self, name)
            out[name] = None if v is None else np.array(v, dtype=np.float64)
        for name in self._SCALARS:
            out[name] = getattr(self, name)
        out["S"] = np.array(self.S, dtype=np.float64).reshape(len(self.S), dim)
        out["Y"] = np.array(self.Y, dtype=np.float64).reshape(len(self.Y), dim)
        out["rho"] = np.array(self.rho, dtype=np.float64)
        return out

    @classmethod
    def from_arrays(cls, data: Mapping[str, Any], params: Dict[str, Any], dim: int) -> "_Config":
        """The inverse of :meth:`to_arrays` and of :meth:`to_dict` (lists or arrays; JSON's
        None for a non-finite ``f`` reads as NaN)."""
        c = cls(int(data["trial_id"]), params, dim)
        for name in cls._ARRAYS:
            v = data[name]
            setattr(c, name, None if v is None else np.array(v, dtype=np.float64))
        for name in cls._SCALARS:
            setattr(c, name, data[name])
        c.f = math.nan if c.f is None else float(c.f)
        c.S = [np.array(s, dtype=np.float64) for s in data["S"]]
        c.Y = [np.array(y, dtype=np.float64) for y in data["Y"]]
        c.rho = [float(r) for r in data["rho"]]
        if c.theta.shape != (dim,) or any(s.shape != (dim,) for s in c.S + c.Y) or len(c.S) != len(c.rho):
            raise ValueError("the arrays have the wrong shapes")
        return c

    from_dict = from_arrays

    # -- L-BFGS --------------------------------------------------------------
    def point(self) -> np.ndarray:
        """The point this config needs evaluated in the next full-batch pass."""
        if self.solver == "lbfgs" and self.p is not None:
            return self.theta + self.t * self.p
        return self.theta

    def direction(self) -> None:
        g = self.g
        q = g.copy()
        alphas = []
        for s, y, rho in zip(reversed(self.S), reversed(self.Y), reversed(self.rho)):
            a = rho * float(s @ q)
            q -= a * y
            alphas.append(a)
        if self.S:
            s, y = self.S[-1], self.Y[-1]
            q *= float(s @ y) / float(y @ y)
        for (s, y, rho), a in zip(zip(self.S, self.Y, self.rho), reversed(alphas)):
            b = rho * float(y @ q)
            q += (a - b) * s
        self.set_direction(-q)

    def set_direction(self, p: np.ndarray) -> None:
        """Take ``p`` as the search direction (steepest descent if it is not a descent
        direction) and reset the line search."""
        g = self.g
        gp = float(g @ p)
        if not gp < 0:  # not a descent direction: restart from steepest descent
            self.S, self.Y, self.rho = [], [], []
            p = -g
            gp = float(g @ p)
        self.p, self.gp = p, gp
        if self.S:
            self.t = 1.0
        else:
            self.t = min(1.0, 1.0 / max(float(np.linalg.norm(g)), 1e-300))
        self.backtracks = 0


class GLMTrainer(TrialAccessors):
    """Trains many GLM configurations over one train/validation split.

    Implements :class:`groupml.engine.Trainer`.  ``X_val``/``y_val`` may be None, in
    which case scores and metrics are computed on the training data.
    """

    #: start lbfgs configs from a row sample's solution (:meth:`_presolve`); off by default,
    #: so a config trained in a batch equals the same config trained alone
    warm_start = False

    def __init__(self, family, X_train, y_train, X_val=None, y_val=None, *,
                 metric: Optional[str] = None):
        self.family: GLMFamily = get_family(family)
        fam = self.family
        self.X, self.y, self.X_val, self.y_val = train_val(fam, X_train, y_train, X_val, y_val)
        self.n, self.d = self.X.shape
        # Binary labels: training rows are kept sorted by label (0s, then 1s), so the
        # class-weighted loss sums of a block work on two contiguous row ranges
        # (ColumnWeights.log_sums).  The row order does not change any result beyond
        # floating-point summation order.
        self._label_sorted = fam.kind == "classification"
        if self._label_sorted and self.n and np.any(self.y[1:] < self.y[:-1]):
            order = np.argsort(self.y, kind="stable")
            self.X, self.y = np.ascontiguousarray(self.X[order]), self.y[order]
        self.metric = choose_metric(fam, metric)
        self.shift, self.scale = standardization([column_moments(self.X)], self.d)
        self.passes = 0
        self._configs: Dict[int, _Config] = {}
        self._retired: Dict[int, _Config] = {}
        self._balanced_w: Optional[np.ndarray] = None
        self._val_cache: Dict[int, Tuple[int, np.ndarray]] = {}
        self._ws = None
        self._rows: Dict[Any, tuple] = {}       # the pass rows by dtype (_pass_rows), built at a first pass
        self._sw_pass = None
        # called with no arguments after every full data pass and every 64 sgd
        # mini-batches; the SQL glue hooks its cancellation check here.  An exception
        # it raises propagates unchanged and leaves every config at a consistent state.
        self.interrupt_check: Optional[Callable[[], None]] = None

    # ------------------------------------------------------------ Trainer API
    def add(self, trial_id: int, params: Mapping[str, Any]) -> None:
        if trial_id in self._configs:
            raise InvalidParameterError(f"Trial {trial_id} is already in the batch",
                                        hint="Use a new trial id for every configuration.")
        p = self.family.validate_params(params)
        self._retired.pop(trial_id, None)
        self._val_cache.pop(trial_id, None)
        self._configs[trial_id] = _Config(trial_id, p, self.d + 1)

    def remove(self, trial_id: int) -> None:
        """Take a config out of the batch; its current model stays readable."""
        cfg = self._configs.pop(self._check(trial_id, active_only=True).trial_id)
        cfg.S, cfg.Y, cfg.rho, cfg.p, cfg.g = [], [], [], None, None
        self._retired[trial_id] = cfg

    def active(self) -> List[int]:
        """Trial ids added and not removed (finished ones included), in insertion order."""
        return list(self._configs)

    def _trial_record(self, trial_id: int) -> TrialRecord:
        """Status 'running', 'converged', 'max_iter', 'stalled' (line search failed) or 'diverged'."""
        c = self._check(trial_id)
        return TrialRecord(c.status, c.iters, c.params)

    def run(self, iterations: int) -> None:
        """Advance every active, unfinished config by up to ``iterations`` iterations.

        An iteration is one accepted L-BFGS step, one gradient step ('gd') or one
        epoch ('sgd').  Each batched pass over the data counts in ``passes``.
        """
        check_iterations(iterations)
        if self.warm_start:
            self._presolve()
        targets = {}
        for cfg in self._configs.values():
            if cfg.status == RUNNING:
                targets[cfg.trial_id] = min(cfg.iters + iterations, cfg.params["max_iter"])
        while True:
            todo = [c for c in self._configs.values()
                    if c.status == RUNNING and c.iters < targets.get(c.trial_id, 0)]
            if not todo:
                break
            # a diverging config overflows harmlessly; it is flagged 'diverged' below
            with np.errstate(over="ignore", invalid="ignore", under="ignore"):
                full = [c for c in todo if c.solver != "sgd"]
                if full:
                    self._full_pass(full)
                groups: Dict[Tuple[int, int, int], List[_Config]] = {}
                for c in todo:
                    if c.solver == "sgd":
                        key = (c.params["seed"], c.epoch, c.params["batch_size"])
                        groups.setdefault(key, []).append(c)
                for key in sorted(groups):
                    self._sgd_epoch(groups[key], *key)
        for cfg in self._configs.values():
            if cfg.status == RUNNING and cfg.iters >= cfg.params["max_iter"]:
                cfg.status = MAX_ITER

    # ------------------------------------------------------------ warm starts
    def _presolve(self) -> None:
        """Start every lbfgs config not yet evaluated from its solution on a sample of the
        training rows, with that solve's L-BFGS curvature pairs.

        The sample is every ``step``-th training row (the rows are in content-hash order
        within each label, so it is a stratified sample of about :data:`PRESOLVE_ROWS` rows),
        standardized with the full rows' shift and scale so the weights and pairs carry over
        as they are. The sample's mean loss approximates the full one, so the full solve then
        needs a few iterations instead of a few dozen. Only groups with at least
        ``PRESOLVE_MIN_STEP * PRESOLVE_ROWS`` training rows are presolved; the problems are
        convex, so the start changes a converged solution only within ``tol``.
        """
        fresh = [c for c in self._configs.values()
                 if c.status == RUNNING and c.solver == "lbfgs" and not c.evaluated and not c.S]
        step = self.n // PRESOLVE_ROWS if self.X is not None else 0
        if not fresh or step < PRESOLVE_MIN_STEP:
            return
        Xs, ys = self.X[::step], self.y[::step]
        if self.family.kind == "classification":
            n1 = int(np.count_nonzero(ys > 0.5))
            if min(n1, ys.shape[0] - n1) < PRESOLVE_MIN_CLASS:
                return
        sub = GLMTrainer(self.family, Xs, ys, Xs[:1], ys[:1], metric=self.metric)
        sub.shift, sub.scale = self.shift, self.scale
        dtype = self._pass_dtype(fresh)
        if dtype != np.float64:                 # the sample of the float32 pass rows
            Xp, yp, c, s = self._pass_rows(dtype)
            sub._rows[dtype] = (np.ascontiguousarray(Xp[::step]), yp[::step], c, s)
        sub.interrupt_check = self.interrupt_check
        for c in fresh:
            sub.add(c.trial_id, c.params)
        sub.run(max(c.params["max_iter"] for c in fresh))
        for c in fresh:
            sc = sub._configs[c.trial_id]
            if sc.status == DIVERGED or not np.all(np.isfinite(sc.theta)):
                continue
            c.theta = sc.theta.copy()
            c.S, c.Y, c.rho = list(sc.S), list(sc.Y), list(sc.rho)

    def score(self, trial_id: int) -> float:
        """Validation loss of the current model for ``self.metric`` (lower is better)."""
        return validation_loss(self.metric, self.y_val, self._val_margins(self._check(trial_id)))

    def metrics(self, trial_id: int) -> Dict[str, float]:
        """All of the family's report metrics (plus the selected one) on validation data."""
        return validation_metrics(self.family.report_metrics, self.metric, self.y_val,
                                  self._val_margins(self._check(trial_id)))

    def selected_metric(self, trial_id: int) -> float:
        """``metrics(trial_id)[self.metric]`` without the other report metrics (a trial list
        shows only the selected one; AUC's rank sort is the costly one)."""
        return validation_metrics((), self.metric, self.y_val, self._val_margins(self._check(trial_id)))[self.metric]

    def model(self, trial_id: int) -> GLMModel:
        cfg = self._check(trial_id)
        theta = self._user_theta(cfg)
        return GLMModel(self.family.name, theta[:self.d].copy(), float(theta[self.d]), cfg.params)

    # ------------------------------------------------------------ checkpoints
    def state_dict(self) -> Dict[str, Any]:
        """JSON-serializable solver state of every config (not the data).

        Resume with :meth:`from_state` on the same rows; the result equals an
        uninterrupted run.  ``fingerprint`` (row count, features and an
        order-independent hash of the rows) guards against resuming on other data.
        """
        return {
            "format": STATE_FORMAT,
            "family": self.family.name,
            "metric": self.metric,
            "passes": self.passes,
            "fingerprint": self._fingerprint(),
            "configs": [c.to_dict() for c in self._configs.values()],
            "retired": [c.to_dict() for c in self._retired.values()],
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], X_train, y_train, X_val=None,
                   y_val=None) -> "GLMTrainer":
        """Rebuild a trainer from :meth:`state_dict` output and the same data."""
        try:
            family, metric = state["family"], state["metric"]
            if state.get("format") != STATE_FORMAT:
                raise KeyError("format")
        except (KeyError, TypeError):
            raise PrerequisiteStateError("The trainer state is not a groupml GLM trainer state",
                                         hint="Pass the dict returned by state_dict().") from None
        tr = cls(family, X_train, y_train, X_val, y_val, metric=metric)
        if state.get("fingerprint") != tr._fingerprint():
            raise PrerequisiteStateError(
                "The trainer state was saved for different training data",
                hint="Resume on the same group's rows (same features, labels and split).")
        try:
            tr.passes = int(state["passes"])
            for bucket, key in ((tr._configs, "configs"), (tr._retired, "retired")):
                for data in state[key]:
                    params = tr.family.validate_params(data["params"])
                    cfg = _Config.from_dict(data, params, tr.d + 1)
                    bucket[cfg.trial_id] = cfg
        except (KeyError, TypeError, ValueError) as exc:
            raise PrerequisiteStateError(f"The trainer state is damaged: {exc}",
                                         hint="Restart the run from scratch.") from None
        return tr

    def checkpoint_state(self) -> Dict[str, Any]:
        """Every config's solver state (weights, L-BFGS history, line-search step, iteration
        counts, status) as numpy arrays and plain scalars, copied: the executor's epoch
        checkpoints store it as npz + JSON (:mod:`groupml.executor.checkpoint`).
        :meth:`load_checkpoint` on a trainer over the same rows continues exactly. It
        carries the column standardization too, so a resumed split group need not measure
        it again."""
        return {
            "format": STATE_FORMAT,
            "family": self.family.name,
            "metric": self.metric,
            "passes": int(self.passes),
            "shift": np.array(self.shift, dtype=np.float64),
            "scale": np.array(self.scale, dtype=np.float64),
            "configs": [c.to_arrays() for c in self._configs.values()],
            "retired": [c.to_arrays() for c in self._retired.values()],
        }

    def load_checkpoint(self, state: Mapping[str, Any]) -> None:
        """Replace every config by the ones in ``state`` (from :meth:`checkpoint_state`)."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT or \
                state.get("family") != self.family.name or state.get("metric") != self.metric:
            raise PrerequisiteStateError(
                "The checkpoint is not a state of this trainer (family, metric or format differ)",
                hint="Resume with the same model and options, or restart the run.")
        configs: Dict[int, _Config] = {}
        retired: Dict[int, _Config] = {}
        try:
            shift, scale = (np.array(state[k], dtype=np.float64) for k in ("shift", "scale"))
            if shift.shape != (self.d,) or scale.shape != (self.d,):
                raise ValueError("the standardization has the wrong shape")
            for bucket, key in ((configs, "configs"), (retired, "retired")):
                for data in state[key]:
                    cfg = _Config.from_arrays(data, self.family.validate_params(data["params"]), self.d + 1)
                    bucket[cfg.trial_id] = cfg
            passes = int(state["passes"])
        except (KeyError, TypeError, ValueError) as exc:
            raise PrerequisiteStateError(f"The trainer checkpoint is damaged: {exc}",
                                         hint="Restart the run from scratch.") from None
        self._configs, self._retired, self.passes = configs, retired, passes
        self.shift, self.scale = shift, scale
        self._val_cache = {}

    def _fingerprint(self) -> List[Any]:
        from ._holdout import row_hash
        h = np.bitwise_xor.reduce(row_hash(self.X, self.y, seed=12345)) if self.n else 0
        return [int(self.n), int(self.d), format(int(h), "016x")]

    # ------------------------------------------------------------ internals
    def _check(self, trial_id: int, active_only: bool = False) -> _Config:
        return find_trial(self._configs, self._retired, trial_id, active_only)

    def _val_margins(self, cfg: _Config) -> np.ndarray:
        hit = self._val_cache.get(cfg.trial_id)
        if hit is not None and hit[0] == cfg.version:
            return hit[1]
        theta = self._user_theta(cfg)
        z = np.dot(self.X_val, theta[:self.d])
        z += theta[self.d]
        self._val_cache[cfg.trial_id] = (cfg.version, z)
        return z

    def _weights(self) -> np.ndarray:
        if self._balanced_w is None:
            self._balanced_w = self.family.sample_weights(self.y, {"class_weight": "balanced"})
        return self._balanced_w

    def _label_weights(self) -> Optional[Tuple[float, float]]:
        """(w0, w1): the row weight of label-0 and of label-1 rows (balanced weights
        depend on the label only)."""
        sw, y = self._weights(), self.y
        if sw is None or not self.n:
            return None
        first0, first1 = int(np.argmin(y > 0.5)), int(np.argmax(y > 0.5))
        w0 = float(sw[first0]) if y[first0] <= 0.5 else 0.0
        w1 = float(sw[first1]) if y[first1] > 0.5 else 0.0
        return (w0, w1)

    def _evaluate(self, Theta: np.ndarray, cfgs: Sequence[_Config],
                  rows: Optional[np.ndarray] = None, dtype=None) -> Tuple[np.ndarray, np.ndarray]:
        """Mean data loss and its gradient for every column of ``Theta`` (weights on the
        user's scale; no penalty: :meth:`_objective` adds it).

        ``rows`` selects a mini-batch (sorted row indices); None means all rows.  ``dtype``:
        the pass dtype (default :meth:`_pass_dtype` of ``cfgs``)."""
        zero = np.zeros((self.d, len(cfgs)))
        return self._data_term(Theta, cfgs, rows, zero, np.ones(self.d), dtype)

    def _data_term(self, V: np.ndarray, cfgs: Sequence[_Config], rows: Optional[np.ndarray],
                   vshift: np.ndarray, vscale: np.ndarray, dtype=None) -> Tuple[np.ndarray, np.ndarray]:
        """Mean data loss and its gradient with respect to ``V``, weights on the scale
        ``(vshift, vscale)``: the model ``w = v / vscale``, ``b = v_b - vshift . w`` (``vshift``
        d x k, one column per config; zero and one: the user's scale).

        The pass runs on the trainer's pass rows (:meth:`_pass_rows`: centred on ``c`` and
        divided by ``s``), where the same model has the weights ``v * s / vscale`` and the
        intercept ``v_b + (c - vshift) . w``; the chain rule brings the gradient back.  On the
        trainer's own standardization both maps are the identity, exactly."""
        d = self.d
        dtype = self._pass_dtype(cfgs) if dtype is None else dtype
        _, _, c, s = self._pass_rows(dtype)
        ratio = s / vscale
        off = c[:, None] - vshift                      # d x k
        Wp = V[:d] * ratio[:, None]
        bp = V[d] + np.einsum("ij,ij->j", off, V[:d] / vscale[:, None])
        f, Gp = self._pass(Wp, bp, cfgs, rows, dtype)
        G = np.empty_like(Gp)
        G[:d] = Gp[:d] * ratio[:, None] + off / vscale[:, None] * Gp[d]
        G[d] = Gp[d]
        return f, G

    def _pass_dtype(self, cfgs: Sequence[_Config]):
        """float32 when every config of the pass may run on float32 rows
        (:meth:`GLMFamily.pass_dtype_for`), else float64."""
        fam = self.family
        if fam.pass_dtype != np.float64 and all(fam.pass_dtype_for(c.params) == fam.pass_dtype for c in cfgs):
            return fam.pass_dtype
        return np.float64

    def _pass_rows(self, dtype):
        """(X, y, c, s): the training rows as a pass in ``dtype`` reads them, ``(X - c) / s``,
        built at the first such pass from the trainer's standardization then.  float64
        passes read the user's rows as they are (c = 0, s = 1: no copy); float32 passes a
        centred and scaled copy (every column has mean 0 and spread 1 there, so float32
        keeps about 7 significant digits of each value whatever the column's offset and
        units) with a last column of ones (:func:`standardized`), which carries the
        intercepts through the products."""
        rows = self._rows.get(dtype)
        if rows is None:
            if dtype == np.float64:
                rows = (self.X, self.y, np.zeros(self.d), np.ones(self.d))
            else:
                c, s = self.shift.copy(), self.scale.copy()
                rows = (standardized(self.X, c, s, dtype), self.y.astype(dtype), c, s)
            self._rows[dtype] = rows
        return rows

    def _pass(self, W: np.ndarray, b: np.ndarray, cfgs: Sequence[_Config],
              rows: Optional[np.ndarray], dtype) -> Tuple[np.ndarray, np.ndarray]:
        """Mean data loss and gradient (float64) of the models ``(W, b)`` on the pass rows
        in ``dtype`` (:meth:`_pass_rows`).

        The rows are processed in blocks (:func:`_block_rows`) so the n x k work
        arrays stay in cache and are reused; each block contributes partial sums in the pass
        dtype, accumulated over blocks in float64.  Columns of class-weighted configs are
        moved to the end so their row weights apply to one contiguous slice.
        """
        if dtype != np.float64 and len(cfgs) == 1 and len(self._configs) + len(self._retired) != 1:
            # a config left alone (or a worker's shard pass) runs as two equal columns: a
            # matrix-vector product's sums would differ from those it had in any batch
            f, G = self._pass(np.repeat(W, 2, axis=1), np.repeat(b, 2), [cfgs[0]] * 2, rows, dtype)
            return f[:1], G[:, :1]
        d = self.d
        Xp, yp, _, _ = self._pass_rows(dtype)
        X = Xp if rows is None else Xp[rows]
        y = yp if rows is None else yp[rows]
        n, k = X.shape[0], len(cfgs)
        balanced = np.array([c.params.get("class_weight") == "balanced" for c in cfgs])
        order = np.argsort(balanced, kind="stable")
        permuted = bool(balanced.any()) and bool(np.any(order != np.arange(k)))
        if permuted:
            W, b = W[:, order], b[order]
            cfgs = [cfgs[i] for i in order]
        split = k - int(balanced.sum())
        sw = label_w = None
        if split < k:
            sw = self._pass_weights(dtype)
            sw = sw if rows is None else sw[rows]
            label_w = self._label_weights()
        sorted_labels = getattr(self, "_label_sorted", False)
        params_list = [c.params for c in cfgs]
        dx = X.shape[1]                 # d, or d + 1: the float32 rows end with a column of ones
        ones_col = dx > d
        if ones_col:                    # the intercepts ride in the products (both are BLAS-3)
            W1 = np.empty((dx, k), dtype=dtype)
            W1[:d], W1[d] = W, b
            W = W1
        else:
            W = np.ascontiguousarray(W, dtype=dtype)
            b = b.astype(dtype)
        # float64 passes of 2-4 configs run their products one matrix-vector product per
        # config (GEMV_MAX_K); float32 passes of two or more configs always run matrix-matrix
        # products on blocks of one size, so that a column's sums do not depend on how many
        # columns share them; the one config of a one-config trainer streams its rows through
        # matrix-vector products (its pass costs numpy's per-call overhead more than arithmetic)
        gemv = not ones_col and 1 < k <= GEMV_MAX_K
        chunk = _block_rows(d, k if not ones_col or k == 1 else max(k, GEMV_MAX_K + 1))
        Zbuf, Abuf, Bbuf, ones = self._workspace(min(n, chunk), k, dtype)
        f = np.zeros(k)
        G = np.zeros((d + 1, k))
        Gx = G[:dx]                     # the rows the products fill
        wide = k > GEMV_MAX_K and d >= WIDE_FEATURES and d * k >= WIDE_WORK
        Gpart = np.empty((k, dx) if wide else (dx, k), dtype=dtype)
        if wide:
            WT = np.ascontiguousarray(W.T)
            ZT_flat = np.empty(min(n, chunk) * k, dtype=dtype)
        for s in range(0, n, chunk):
            e = min(n, s + chunk)
            m = e - s
            Xb = X[s:e]
            Z = Zbuf[:m]
            if gemv:
                for j in range(k):
                    Z[:, j] = np.dot(Xb, W[:, j])
            elif wide:
                ZT = ZT_flat[:k * m].reshape(k, m)
                np.dot(WT, Xb.T, out=ZT)
                Z[...] = ZT.T
            else:
                np.dot(Xb, W, out=Z)
            if not ones_col:
                Z += b
            zeros = int(np.count_nonzero(y[s:e] < 0.5)) if sorted_labels else None
            cw = ColumnWeights(ones[:m], None if sw is None else sw[s:e], split, label_w, zeros)
            f += self.family.batch_loss(Z, y[s:e], cw, params_list, (Abuf[:m], Bbuf[:m]))
            if cw.by_label_ranges():
                # label-sorted rows: one product per label range, whose row weight is one value
                # per column (weighted columns scale the d x k product, not Z); a column's
                # sums then do not depend on which other columns share the pass
                for r0, r1, scale in cw.label_ranges(k):
                    part = _xt_z(Xb[r0:r1], Z[r0:r1], Gpart, k, wide, gemv)
                    Gx += part if scale is None else part * scale
                    if not ones_col:
                        g = np.dot(ones[r0:r1], Z[r0:r1])
                        G[d] += g if scale is None else g * scale
            else:
                cw.apply(Z)                               # Z := weighted dloss/dz
                Gx += _xt_z(Xb, Z, Gpart, k, wide, gemv)
                if not ones_col:
                    G[d] += np.dot(ones[:m], Z)
        f /= n
        G /= n
        if permuted:
            inv = np.empty_like(order)
            inv[order] = np.arange(k)
            f, G = f[inv], G[:, inv]
        return f, G

    def _pass_weights(self, dtype) -> np.ndarray:
        """The balanced row weights in the pass dtype (converted once per weights array)."""
        sw = self._weights()
        if sw.dtype == dtype:
            return sw
        hit = self._sw_pass
        if hit is None or hit[0] is not sw:
            hit = self._sw_pass = (sw, sw.astype(dtype))
        return hit[1]

    def _shift_of(self, cfgs: Sequence[_Config]) -> np.ndarray:
        """d x k: every config's column centres (zero for a config without intercept)."""
        icpt = np.array([bool(c.params["fit_intercept"]) for c in cfgs], dtype=np.float64)
        return np.outer(self.shift, icpt)

    def _to_user(self, V: np.ndarray, cfgs: Sequence[_Config]) -> np.ndarray:
        """Standardized weights (columns of ``V``) -> the same models on the user's scale:
        ``w = v / scale``, ``b = v_b - shift . w``."""
        d = self.d
        Theta = np.empty_like(V)
        Theta[:d] = V[:d] / self.scale[:, None]
        Theta[d] = V[d] - np.einsum("ij,ij->j", self._shift_of(cfgs), Theta[:d])
        return Theta

    def _user_theta(self, cfg: _Config) -> np.ndarray:
        return self._to_user(cfg.theta[:, None], [cfg])[:, 0]

    def _objective(self, V: np.ndarray, cfgs: Sequence[_Config],
                   rows: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
        """The objective the solvers minimise (without l1) and its gradient, for every
        column of ``V`` (standardized weights; the last row is the intercept): the mean
        data loss at the equivalent user-scale weights plus (l2/2)*||v||^2."""
        d = self.d
        f, Gv = self._data_term(V, cfgs, rows, self._shift_of(cfgs), self.scale)
        Wv = V[:d]
        l2 = np.array([c.params["l2"] for c in cfgs])
        f = f + 0.5 * l2 * np.einsum("ij,ij->j", Wv, Wv)
        Gv[:d] += l2 * Wv
        no_icpt = np.array([not c.params["fit_intercept"] for c in cfgs], dtype=bool)
        Gv[d, no_icpt] = 0.0
        return f, Gv

    def _workspace(self, rows: int, k: int, dtype=np.float64):
        """Three (rows x k) work arrays and a ones vector, reused while k and dtype fit."""
        ws = self._ws
        if ws is None or ws[4] != k or ws[0].shape[0] < rows or ws[0].dtype != dtype:
            flat = [np.empty(rows * k, dtype=dtype) for _ in range(3)]
            ws = self._ws = (flat[0].reshape(rows, k), flat[1].reshape(rows, k),
                             flat[2].reshape(rows, k), np.ones(rows, dtype=dtype), k)
        return ws[:4]

    def _prox(self, cfg: _Config, theta: np.ndarray, step: float) -> None:
        """In-place soft-thresholding of the weights (never the intercept)."""
        l1 = cfg.params["l1"]
        if l1 > 0:
            w = theta[:self.d]
            np.copysign(np.maximum(np.abs(w) - step * l1, 0.0), w, out=w)

    def _full_pass(self, cfgs: List[_Config]) -> None:
        Theta = np.empty((self.d + 1, len(cfgs)))
        for j, c in enumerate(cfgs):
            Theta[:, j] = c.point()
        f, G = self._objective(Theta, cfgs)
        self.passes += 1
        turning: List[_Config] = []             # configs that need a new L-BFGS direction
        for j, c in enumerate(cfgs):
            if c.solver == "lbfgs":
                if self._lbfgs_consume(c, float(f[j]), G[:, j].copy()):
                    turning.append(c)
            else:
                self._gd_consume(c, float(f[j]), G[:, j].copy())
        lbfgs_directions(turning)
        if self.interrupt_check is not None:
            self.interrupt_check()

    def _lbfgs_consume(self, c: _Config, f: float, g: np.ndarray) -> bool:
        """Take one evaluation of ``c``'s trial point; True when ``c`` needs a new search
        direction (computed for all such configs at once by :func:`lbfgs_directions`)."""
        tol = c.params["tol"]
        if not c.evaluated:                      # first evaluation at theta = 0
            c.evaluated = True
            c.f, c.g = f, g
            if not np.isfinite(f) or not np.all(np.isfinite(g)):
                c.status = DIVERGED
            elif np.max(np.abs(g)) <= tol:
                c.status = CONVERGED
            else:
                return True
            return False
        finite = math.isfinite(f) and bool(np.all(np.isfinite(g)))
        # Armijo, or (near the optimum, where f differences drown in rounding) Hager and
        # Zhang's approximate condition: f did not grow beyond its rounding level and the
        # directional derivative at the trial point has not turned strongly positive.
        ok = finite and (f <= c.f + ARMIJO_C1 * c.t * c.gp or (
            f <= c.f + self._approx_eps(c) * abs(c.f) and float(g @ c.p) <= -APPROX_SLOPE * c.gp))
        if ok:
            s = c.t * c.p
            yv = g - c.g
            sy = float(s @ yv)
            if sy > 1e-10 * float(yv @ yv):
                c.S.append(s)
                c.Y.append(yv)
                c.rho.append(1.0 / sy)
                if len(c.S) > LBFGS_HISTORY:
                    del c.S[0], c.Y[0], c.rho[0]
            c.theta = c.theta + s
            c.f, c.g = f, g
            c.iters += 1
            c.version += 1
            c.p = None
            if np.max(np.abs(g)) <= tol:
                c.status = CONVERGED
            elif c.iters < c.params["max_iter"]:
                return True
            return False
        c.backtracks += 1
        if c.backtracks > MAX_BACKTRACKS:
            c.status = STALLED
            c.p = None
            return False
        t = c.t
        if math.isfinite(f):                     # minimiser of the quadratic through f, gp, f_t
            denom = 2.0 * (f - c.f - c.gp * t)
            t_new = -c.gp * t * t / denom if denom > 0 else 0.5 * t
            t_new = min(max(t_new, 0.1 * t), 0.5 * t)
        else:
            t_new = 0.1 * t
        c.t = t_new
        return False

    def _approx_eps(self, c: _Config) -> float:
        """The rounding level of ``c``'s objective relative to its value: its passes may run
        in float32 (:meth:`GLMFamily.pass_dtype_for`) or in float64."""
        return APPROX_EPS if self.family.pass_dtype_for(c.params) == np.float64 else APPROX_EPS_FLOAT32

    def _gd_consume(self, c: _Config, f: float, g: np.ndarray) -> None:
        if not math.isfinite(f) or not np.all(np.isfinite(g)):
            c.status = DIVERGED
            return
        c.f, c.g = f, g
        lr = c.params["lr"]
        new = c.theta - lr * g
        self._prox(c, new, lr)
        if c.params["l1"] > 0:
            crit = np.max(np.abs(c.theta - new)) / lr      # proximal gradient mapping
        else:
            crit = np.max(np.abs(g))
        if crit <= c.params["tol"]:
            c.status = CONVERGED
            return
        if not np.all(np.isfinite(new)):
            c.status = DIVERGED
            return
        c.theta = new
        c.iters += 1
        c.version += 1

    def _sgd_epoch(self, cfgs: List[_Config], seed: int, epoch: int, batch_size: int) -> None:
        rng = np.random.default_rng([seed, epoch])
        perm = rng.permutation(self.n)
        Theta = np.empty((self.d + 1, len(cfgs)))
        for j, c in enumerate(cfgs):
            Theta[:, j] = c.theta
        lr = np.array([c.params["lr"] for c in cfgs])
        l1 = np.array([c.params["l1"] for c in cfgs])
        check = self.interrupt_check
        for i, start in enumerate(range(0, self.n, batch_size)):
            if check is not None and i % 64 == 63:
                check()                 # before any state is written back: nothing partial
            rows = np.sort(perm[start:start + batch_size])
            _, G = self._objective(Theta, cfgs, rows)
            Theta -= lr * G
            if l1.any():
                W = Theta[:self.d]
                np.copysign(np.maximum(np.abs(W) - lr * l1, 0.0), W, out=W)
        self.passes += 1
        for j, c in enumerate(cfgs):
            c.epoch += 1
            col = Theta[:, j]
            if not np.all(np.isfinite(col)):
                c.status = DIVERGED
                continue
            c.theta = col.copy()
            c.iters += 1
            c.version += 1


def lbfgs_directions(cfgs: Sequence[_Config]) -> None:
    """:meth:`_Config.direction` for many configs at once.

    The two-loop recursion runs over all configs together (histories right-aligned
    and zero-padded: a padded pair has rho = 0 and changes nothing), so a pass costs
    a few vectorised operations per history slot instead of a few per config and slot.
    """
    if len(cfgs) <= 1:
        for c in cfgs:
            c.direction()
        return
    nc, dim = len(cfgs), cfgs[0].g.shape[0]
    h = max(len(c.S) for c in cfgs)
    Q = np.stack([c.g for c in cfgs])
    if h:
        S = np.zeros((h, nc, dim))
        Y = np.zeros((h, nc, dim))
        R = np.zeros((h, nc))
        for j, c in enumerate(cfgs):
            L = len(c.S)
            if L:
                S[h - L:, j] = c.S
                Y[h - L:, j] = c.Y
                R[h - L:, j] = c.rho
        A = np.zeros((h, nc))
        for i in range(h - 1, -1, -1):
            A[i] = R[i] * np.einsum("cd,cd->c", S[i], Q)
            Q -= A[i][:, None] * Y[i]
        sy = np.einsum("cd,cd->c", S[h - 1], Y[h - 1])
        yy = np.einsum("cd,cd->c", Y[h - 1], Y[h - 1])
        has = np.array([len(c.S) > 0 for c in cfgs])
        Q *= np.where(has, sy / np.where(has, yy, 1.0), 1.0)[:, None]
        for i in range(h):
            b = R[i] * np.einsum("cd,cd->c", Y[i], Q)
            Q += (A[i] - b)[:, None] * S[i]
    for j, c in enumerate(cfgs):
        c.set_direction(-Q[j])


def _block_rows(d: int, k: int) -> int:
    """Rows per block of a pass over d features with k configs (see GEMM_BLOCK_VALUES)."""
    if k > GEMV_MAX_K:
        return max(GEMM_MIN_ROWS, GEMM_BLOCK_VALUES // max(d, 1))
    return int(min(CHUNK_ROWS, max(1024, (1 << 20) // max(d, 1))))


def _xt_z(Xb: np.ndarray, Z: np.ndarray, out: np.ndarray, k: int, wide: bool = False,
          gemv: bool = False) -> np.ndarray:
    """``Xb.T @ Z`` (d x k); with ``gemv`` the columns go through BLAS-2 one by one.

    ``out`` is d x k, or k x d when ``wide`` (:data:`WIDE_FEATURES`): then the product is
    computed as ``Z.T @ Xb`` and returned transposed."""
    if gemv:
        ZT = Z.T.copy()
        for j in range(k):
            out[:, j] = np.dot(ZT[j], Xb)
    elif wide:
        np.dot(Z.T, Xb, out=out)
        return out.T
    else:
        np.dot(Xb.T, Z, out=out)
    return out


def fit_many(family, X, y, params_list: Sequence[Mapping[str, Any]], *, X_val=None, y_val=None,
             metric: Optional[str] = None) -> List[Tuple[GLMModel, Dict[str, float]]]:
    """Train every config in ``params_list`` to the end in one batch.

    Returns ``[(model, metrics), ...]`` in the order of ``params_list``; metrics are
    computed on ``X_val``/``y_val`` when given, else on the training data.
    """
    trainer = GLMTrainer(family, X, y, X_val, y_val, metric=metric)
    for i, params in enumerate(params_list):
        trainer.add(i, params)
    if params_list:
        trainer.run(max(trainer.params(i)["max_iter"] for i in range(len(params_list))))
    return [(trainer.model(i), trainer.metrics(i)) for i in range(len(params_list))]
