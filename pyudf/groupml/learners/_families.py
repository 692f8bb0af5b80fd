"""Model families of the batched GLM solvers: hyperparameters and batched losses.

A family knows two things:

* which hyperparameters it accepts and how to validate them
  (:meth:`GLMFamily.validate_params` returns a new dict with defaults filled and
  ``solver`` resolved to a concrete one);
* how to turn a block of margins ``Z = X @ W + b`` (n x k, one column per config)
  into per-config weighted loss sums and the derivative of the loss with respect
  to each margin.  That is all the batched solvers need: the gradient of the data
  term is ``X.T @ R`` (BLAS-3) and the intercept's is ``R.sum(axis=0)``.

The per-row losses (``y`` in {0, 1} for classifiers, ``t = 2y - 1`` in {-1, +1}):

* ``logistic``: ``log(1 + exp(z)) - y z``
* ``linear``: ``(y - z)^2 / 2``
* ``svm``: ``max(0, 1 - t z)^2`` (``squared_hinge``) or ``max(0, 1 - t z)`` (``hinge``)
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Tuple

import numpy as np

from ..errors import DataError, InvalidParameterError, SearchSpecError, UndefinedObjectError
from ..validation import check_bool, check_choice, check_number, clipped, fail, shown

SOLVERS = ("auto", "lbfgs", "gd", "sgd")
#: Smallest ``tol`` whose configurations of a binary family train on float32 passes
FLOAT32_MIN_TOL = 1e-5
#: Upper bound of every iteration-count hyperparameter (GLM max_iter, MLP epochs, LightGBM
#: num_boost_round): far beyond any useful run, and inside the C int of LightGBM.
MAX_ITERATIONS = 1 << 30

_COMMON_DEFAULTS: Dict[str, Any] = {
    "l2": 0.0,
    "l1": 0.0,
    "fit_intercept": True,
    "solver": "auto",
    "lr": 0.1,
    "max_iter": 100,
    "tol": 1e-4,  # scikit-learn's default for lbfgs
    "batch_size": 256,
    "seed": 0,
}


class GLMFamily:
    """Base class; subclasses set ``name``, ``extra_defaults``, metrics and the loss."""

    name = ""
    kind = "regression"  # or "classification"
    extra_defaults: Dict[str, Any] = {}
    metric_names: Tuple[str, ...] = ()
    report_metrics: Tuple[str, ...] = ()
    default_metric = ""
    #: the narrowest dtype of the data passes' products and elementwise loss
    #: (:meth:`pass_dtype_for`): float64 here, where the labels may be large (a residual
    #: y - z keeps y's offset)
    pass_dtype = np.float64

    @property
    def owner(self) -> str:
        return f"model '{self.name}'"

    @property
    def defaults(self) -> Dict[str, Any]:
        out = dict(_COMMON_DEFAULTS)
        out.update(self.extra_defaults)
        return out

    @property
    def param_names(self) -> Tuple[str, ...]:
        return tuple(sorted(self.defaults))

    def __repr__(self) -> str:
        return f"GLMFamily({self.name!r})"

    # ------------------------------------------------------------------ params
    def validate_params(self, params: Mapping[str, Any] | None) -> Dict[str, Any]:
        """Validate user hyperparameters; return a new dict with defaults filled.

        ``solver`` comes back resolved: 'auto' becomes 'gd' when l1 > 0 or the loss is
        the non-smooth 'hinge', else 'lbfgs'.  A step size 'lr' never picks the solver:
        with 'auto' resolving to 'lbfgs' (which chooses its own steps) a given 'lr' is
        refused rather than silently switching to 'gd'.
        """
        if params is None:
            params = {}
        if not isinstance(params, Mapping):
            raise SearchSpecError(f"The parameters of {self.owner} must be an object; got "
                                  f"{type(params).__name__}",
                                  hint='Give parameters as a JSON object, e.g. {"l2": 0.01}.')
        params = dict(params)
        allowed = self.param_names
        for key in params:
            if key not in allowed:
                raise SearchSpecError(
                    f"Unknown parameter '{clipped(key)}' for {self.owner}; allowed parameters are "
                    f"{', '.join(allowed)}",
                    hint="Check the spelling; see SELECT groupml.help('models') for each "
                         "model's parameters.",
                )
        owner = self.owner
        out = self.defaults
        out.update(params)
        out["l2"] = check_number(out["l2"], "l2", owner, ge=0,
                                 hint="l2 is the ridge penalty (l2/2)*||w||^2 on the standardized "
                                      "weights; use 0 for none.")
        out["l1"] = check_number(out["l1"], "l1", owner, ge=0,
                                 hint="l1 is the lasso penalty l1*||w||_1 on the standardized "
                                      "weights; use 0 for none.")
        out["fit_intercept"] = check_bool(out["fit_intercept"], "fit_intercept", owner)
        out["lr"] = check_number(out["lr"], "lr", owner, gt=0,
                                 hint="lr is the step size of the 'gd' and 'sgd' solvers.")
        out["max_iter"] = check_number(out["max_iter"], "max_iter", owner, ge=1, le=MAX_ITERATIONS,
                                       integer=True)
        out["tol"] = check_number(out["tol"], "tol", owner, gt=0,
                                  hint="tol bounds the largest absolute entry of the gradient "
                                       "(standardized weights) at convergence.")
        out["batch_size"] = check_number(out["batch_size"], "batch_size", owner, ge=1,
                                         le=2 ** 31 - 1, integer=True)
        out["seed"] = check_number(out["seed"], "seed", owner, ge=0, le=2 ** 63 - 1, integer=True)
        check_choice(out["solver"], "solver", owner, SOLVERS,
                     hint="'auto' picks 'gd' when l1 > 0 or the loss is 'hinge', else 'lbfgs'.")
        self._validate_extra(out)
        if out["solver"] == "auto":
            nonsmooth = out.get("loss") == "hinge"
            out["solver"] = "gd" if (out["l1"] > 0 or nonsmooth) else "lbfgs"
            if out["solver"] == "lbfgs" and "lr" in params:
                raise InvalidParameterError(
                    f"The 'lr' value of {owner} is read only by the 'gd' and 'sgd' solvers, and solver "
                    f"'auto' picks 'lbfgs' here (l1 = 0, a smooth loss); got lr = {shown(params['lr'])}",
                    hint="Set solver to 'gd' (or 'sgd') to take fixed steps of size lr, or drop lr and "
                         "let lbfgs choose its own steps.")
        if out["solver"] == "lbfgs" and out["l1"] > 0:
            fail("solver", owner, "'gd' or 'sgd' when l1 > 0", "lbfgs",
                 hint="The L1 penalty is applied by a proximal step, which only the 'gd' and "
                      "'sgd' solvers take; set solver to 'gd' or drop l1.")
        return out

    def _validate_extra(self, out: Dict[str, Any]) -> None:
        return None

    def pass_dtype_for(self, params: Mapping[str, Any]):
        """The dtype a data pass for validated ``params`` may run in: :attr:`pass_dtype`
        for the full-batch solvers of a model with an intercept when ``tol`` is at least
        :data:`FLOAT32_MIN_TOL` (a float32 pass computes the standardized gradient to about
        1e-7, far below such a tol), else float64.  sgd's mini-batches of a few hundred rows
        cost numpy's per-call overhead, which float32 does not cut; a model without
        intercept is not centred, so its margins keep the columns' offsets, which float32
        would round."""
        if self.pass_dtype != np.float64 and params["solver"] != "sgd" and params["fit_intercept"] \
                and params["tol"] >= FLOAT32_MIN_TOL:
            return self.pass_dtype
        return np.float64

    #: parameters each solver does not read (lbfgs takes no step size; only sgd draws batches)
    _UNREAD_BY_SOLVER = {"lbfgs": ("lr", "batch_size", "seed"), "gd": ("batch_size", "seed"), "sgd": ()}

    def unread_params(self, valid: Mapping[str, Any]) -> Tuple[str, ...]:
        """Parameters of validated ``valid`` that training does not read, given the others
        (two configurations differing only in them are one model)."""
        return self._UNREAD_BY_SOLVER.get(valid.get("solver"), ())

    # ------------------------------------------------------------------ data
    def prepare_labels(self, y: np.ndarray, what: str) -> np.ndarray:
        """Return the float64 label vector the loss works on; raise DataError on bad labels."""
        y = np.ascontiguousarray(y, dtype=np.float64)
        if not np.all(np.isfinite(y)):
            bad = y[~np.isfinite(y)][0]
            raise DataError(f"The labels of {what} must be finite numbers; got {bad}",
                            hint="Filter out rows with NULL or NaN labels.")
        return y

    def sample_weights(self, y: np.ndarray, params: Mapping[str, Any]) -> np.ndarray | None:
        return None

    # ------------------------------------------------------------------ loss
    def batch_loss(self, Z: np.ndarray, y: np.ndarray, cw: "ColumnWeights",
                   params_list, scratch: Tuple[np.ndarray, np.ndarray]) -> np.ndarray:
        """Return each column's weighted loss sum; overwrite ``Z`` with dloss/dz.

        ``Z`` holds the margins of a block of rows (n x k, one column per config),
        ``cw`` the row weights of each column, ``params_list`` one validated params
        dict per column and ``scratch`` two work arrays shaped like ``Z`` (reused
        between calls so a pass allocates nothing of size n x k).  The residual left
        in ``Z`` is *unweighted*; the caller applies the row weights.
        """
        raise NotImplementedError


class ColumnWeights:
    """Row weights per column: columns ``[:split]`` weigh rows 1, ``[split:]`` by ``sw``.

    Weighted column sums are matrix-vector products (BLAS-2) instead of
    elementwise temporaries.  Row weights are the balanced class weights, so they
    depend on the label only; ``label_w = (w0, w1)`` names them and ``zeros``, when
    the block's rows are sorted by label (every 0 before every 1), is the number of
    label-0 rows.  Both let :meth:`log_sums` work on two contiguous row ranges.
    """

    def __init__(self, ones: np.ndarray, sw: np.ndarray | None, split: int,
                 label_w: Tuple[float, float] | None = None, zeros: int | None = None):
        self.ones, self.sw, self.split = ones, sw, split
        self.label_w, self.zeros = label_w, zeros

    def sums(self, M: np.ndarray, v: np.ndarray | None = None) -> np.ndarray:
        """``out[j] = sum_i s_ij * v_i * M_ij`` (``v`` defaults to ones)."""
        s = self.split
        if s >= M.shape[1]:
            return np.dot(self.ones if v is None else v, M)   # np.dot releases the GIL (_glm.py)
        out = np.empty(M.shape[1])
        if s > 0:
            out[:s] = np.dot(self.ones if v is None else v, M[:, :s])
        out[s:] = np.dot(self.sw if v is None else self.sw * v, M[:, s:])
        return out

    def totals(self, M: np.ndarray) -> np.ndarray:
        """``out[j] = sum_i s_ij * M_ij`` accumulated in float64 whatever ``M``'s dtype;
        overwrites ``M``.

        On a label-sorted block each label range's rows are added pairwise in place
        (:func:`_fold`: a float32 partial sum then covers at most 64 rows) and the rows left
        are summed in float64; its row weight is the same for all rows of a range.  The two
        ranges are summed apart even without weighted columns, so a column's sums do not
        depend on which other configurations share the pass.  A float32
        matrix-vector product instead adds thousands of rows one after another into a float32
        sum, which loses about 1e-6 of a loss over a few thousand rows: enough to make two
        evaluations of one point compare wrongly in the line search.  Without a label-sorted
        block this is :meth:`sums`.
        """
        m, k = M.shape
        z = self.zeros
        if z is None:
            return self.sums(M)
        s0 = _float64_sums(M, _fold(M[:z], np.add, _SUM_ROUNDS)) if z else np.zeros(k)
        s1 = _float64_sums(M[z:], _fold(M[z:], np.add, _SUM_ROUNDS)) if z < m else np.zeros(k)
        return self._by_label(s0, s1)

    def log_sums(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """``out[j] = sum_i s_ij * log(A_ij)`` for ``A`` in [1, 2]; ``B`` is scratch.

        The logarithm of a product of up to 512 such values is exact to a few ulps and
        the product cannot overflow (2**512 in float64; in float32, which overflows at
        2**128, products of 64 values), so the rows are multiplied pairwise in place
        (:func:`_fold`) and only one row in 512 (64) goes through ``log``; the logarithms
        are summed in float64.  That replaces a ``log`` per element (the most expensive step
        of a logistic pass) by a multiplication.  Weighted columns need the two label ranges
        apart (on a label-sorted block the ranges are always multiplied apart, so a column's
        sums do not depend on the other columns); without a label-sorted block weighted
        columns take one ``log`` per element.
        """
        m, k = A.shape
        rounds = _PRODUCT_ROUNDS.get(A.dtype.itemsize, 0)
        if self.zeros is None and self.split >= k:
            rows = _fold_from(A, B, np.multiply, rounds)
            return np.log(B[:rows]).sum(axis=0, dtype=np.float64)
        if self.zeros is None:
            np.log(A, out=B)
            return self.sums(B)
        z = self.zeros
        part0, part1 = B[:z], B[z:]
        s0 = (np.log(part0[:_fold_from(A[:z], part0, np.multiply, rounds)]).sum(axis=0, dtype=np.float64)
              if z else np.zeros(k))
        s1 = (np.log(part1[:_fold_from(A[z:], part1, np.multiply, rounds)]).sum(axis=0, dtype=np.float64)
              if z < m else np.zeros(k))
        return self._by_label(s0, s1)

    def _by_label(self, s0: np.ndarray, s1: np.ndarray) -> np.ndarray:
        """Column totals from the label-0 and label-1 rows' sums ``s0`` and ``s1``."""
        out = s0 + s1
        if self.split < out.shape[0]:
            w0, w1 = self.label_w
            out[self.split:] = w0 * s0[self.split:] + w1 * s1[self.split:]
        return out

    def by_label_ranges(self) -> bool:
        """True when the block is sorted by label (its products then run per label range)."""
        return self.zeros is not None

    def label_ranges(self, k: int):
        """``(row_start, row_end, column_scale)`` for the label-0 and label-1 rows of a
        block sorted by label: the row weight of every column of each range (None: all 1)."""
        m, z = self.ones.shape[0], self.zeros
        out = []
        for r0, r1, i in ((0, z, 0), (z, m, 1)):
            if r1 > r0:
                scale = None
                if self.label_w is not None and self.split < k:
                    scale = np.ones(k)
                    scale[self.split:] = self.label_w[i]
                out.append((r0, r1, scale))
        return out

    def apply(self, R: np.ndarray) -> None:
        """Multiply the rows of the weighted columns by ``sw`` in place."""
        if self.split < R.shape[1]:
            R[:, self.split:] *= self.sw[:, None]


#: rounds of :func:`_fold` with np.multiply by item size: products of at most 2**rounds values
#: in [1, 2] stay below the dtype's overflow (2**1024 for float64, 2**128 for float32)
_PRODUCT_ROUNDS = {8: 9, 4: 6}
#: rounds of :func:`_fold` with np.add in :meth:`ColumnWeights.totals`
_SUM_ROUNDS = 6


def _fold(B: np.ndarray, op, rounds: int) -> int:
    """Combine the rows of ``B`` pairwise in place with ``op`` (np.multiply, np.add),
    ``rounds`` times; return the rows left.

    Afterwards ``B[:r]`` holds, column by column, the products (sums) of disjoint sets of
    at most ``2**rounds`` original rows that together cover every row.
    """
    rows = B.shape[0]
    for _ in range(rounds):
        if rows <= 1:
            break
        half = rows // 2
        op(B[:half], B[rows - half:rows], out=B[:half])
        rows -= half
    return rows


def _fold_from(A: np.ndarray, B: np.ndarray, op, rounds: int) -> int:
    """:func:`_fold` of a copy of ``A`` in ``B`` (same shape), without the copy: the first
    round reads ``A`` and writes ``B``; ``B[:r]`` then holds exactly what folding the copy
    in place leaves there."""
    rows = A.shape[0]
    if rounds <= 0 or rows <= 1:
        np.copyto(B, A)
        return rows
    half = rows // 2
    op(A[:half], A[rows - half:rows], out=B[:half])
    if rows - half > half:                 # an odd count: the middle row stays as it is
        B[half] = A[half]
    return _fold(B[:rows - half], op, rounds - 1)


def _float64_sums(B: np.ndarray, rows: int) -> np.ndarray:
    """Column sums of ``B[:rows]`` accumulated in float64."""
    return B[:rows].sum(axis=0, dtype=np.float64)


_UINT = {4: np.uint32, 8: np.uint64}


def _copysign_nonneg(A: np.ndarray, Z: np.ndarray) -> None:
    """``Z := copysign(A, Z)`` for ``A >= 0`` (no sign bit set), bit for bit, by two integer
    operations on the values' bits: Z's sign bit, or A's bits. About 6 times faster than
    np.copysign, which has no SIMD loop (measured 43 against 7.5 us on a 4096 x 12 float32
    block)."""
    u = _UINT[Z.dtype.itemsize]
    z, a = Z.view(u), A.view(u)
    np.bitwise_and(z, u(1) << u(8 * Z.dtype.itemsize - 1), out=z)
    np.bitwise_or(z, a, out=z)


class _BinaryFamily(GLMFamily):
    kind = "classification"
    #: labels 0/1 and bounded losses: the passes run in float32 on standardized rows
    pass_dtype = np.float32

    def prepare_labels(self, y, what):
        y = super().prepare_labels(y, what)
        bad = (y != 0.0) & (y != 1.0)
        if np.any(bad):
            value = y[bad][0]
            shown = int(value) if float(value).is_integer() else value
            raise DataError(
                f"The labels of {what} for model '{self.name}' must be 0 or 1; got {shown}",
                hint="Binary models need labels coded 0/1, e.g. (label = 'yes')::int.",
            )
        return y

    def sample_weights(self, y, params):
        if params.get("class_weight") != "balanced":
            return None
        n = y.shape[0]
        n1 = float(np.count_nonzero(y))
        n0 = n - n1
        w1 = n / (2.0 * n1) if n1 else 0.0
        w0 = n / (2.0 * n0) if n0 else 0.0
        return np.where(y > 0.5, w1, w0)


class LogisticFamily(_BinaryFamily):
    name = "logistic"
    extra_defaults = {"class_weight": None}
    metric_names = ("accuracy", "auc", "logloss")
    report_metrics = ("accuracy", "auc", "logloss")
    default_metric = "accuracy"

    def _validate_extra(self, out):
        check_choice(out["class_weight"], "class_weight", self.owner, (None, "balanced"))

    def batch_loss(self, Z, y, cw, params_list, scratch):
        # loss = softplus(z) - y z with softplus(z) = max(z, 0) + log(1 + exp(-|z|))
        # and sum max(z, 0) = (sum z + sum |z|) / 2; sigmoid(z) = 1/2 + sign(z) (1/(1+e) - 1/2)
        A, B = scratch
        h = 0.5 - y                               # 1/2 - y, one value per row
        np.abs(Z, out=A)
        z0 = cw.zeros
        if z0 is None:
            f = cw.sums(Z, h) + 0.5 * cw.sums(A)  # sum max(z, 0) - y z
        else:                                     # rows sorted by label: 2 max(z, 0) - 2 y z is
            np.add(A[:z0], Z[:z0], out=B[:z0])    # |z| + z on label-0 rows,
            np.subtract(A[z0:], Z[z0:], out=B[z0:])   # |z| - z on label-1 rows
            f = 0.5 * cw.totals(B)
        np.negative(A, out=A)
        np.exp(A, out=A)                          # e = exp(-|z|) in (0, 1]
        A += 1.0
        f += cw.log_sums(A, B)                    # sum log(1 + e)
        np.reciprocal(A, out=A)                   # sigmoid(|z|)
        A -= 0.5
        _copysign_nonneg(A, Z)                    # sigmoid(z) - 1/2
        if z0 is None:
            Z += h[:, None]                       # sigmoid(z) - y
        else:                                     # rows sorted by label: h is 1/2, then -1/2
            Z[:z0] += 0.5                         # (scalar adds beat a broadcast over k columns)
            Z[z0:] -= 0.5
        return f


class LinearFamily(GLMFamily):
    name = "linear"
    metric_names = ("rmse", "mse", "mae", "r2")
    report_metrics = ("rmse", "mae", "r2")
    default_metric = "rmse"

    def batch_loss(self, Z, y, cw, params_list, scratch):
        A = scratch[0]
        Z -= y[:, None]                       # residual z - y = dloss/dz
        np.square(Z, out=A)
        return 0.5 * cw.sums(A)


class SVMFamily(_BinaryFamily):
    name = "svm"
    extra_defaults = {"class_weight": None, "loss": "squared_hinge"}
    metric_names = ("accuracy", "auc")
    report_metrics = ("accuracy", "auc")
    default_metric = "accuracy"

    def _validate_extra(self, out):
        owner = self.owner
        check_choice(out["class_weight"], "class_weight", owner, (None, "balanced"))
        check_choice(out["loss"], "loss", owner, ("squared_hinge", "hinge"))
        if out["loss"] == "hinge" and out["solver"] == "lbfgs":
            fail("solver", owner, "'gd' or 'sgd' when loss is 'hinge'", "lbfgs",
                 hint="The hinge loss is not smooth; use solver 'gd' (subgradient) or the "
                      "smooth default loss 'squared_hinge'.")

    def batch_loss(self, Z, y, cw, params_list, scratch):
        A, B = scratch
        t = (2.0 * y - 1.0)[:, None]
        np.multiply(Z, t, out=A)
        np.subtract(1.0, A, out=A)
        np.maximum(A, 0.0, out=A)             # max(0, 1 - t z)
        f = cw.totals(np.square(A, out=B))
        hinge = np.flatnonzero([p.get("loss") == "hinge" for p in params_list])
        # squared hinge: d/dz max(0, 1 - t z)^2 = -2 t max(0, 1 - t z); hinge: -t [1 - t z > 0]
        np.multiply(A, -2.0 * t, out=Z)
        if hinge.size:
            Z[:, hinge] = -t * (A[:, hinge] > 0)
            f[hinge] = cw.totals(A)[hinge]    # overwrites A
        return f


FAMILIES: Dict[str, GLMFamily] = {
    f.name: f for f in (LogisticFamily(), LinearFamily(), SVMFamily())
}


def get_family(name: Any, owner: Optional[str] = None) -> GLMFamily:
    """Return the family object for ``name``; unknown -> UndefinedObjectError. ``owner``: whose
    'model' value it is (messages name it)."""
    if isinstance(name, GLMFamily):
        return name
    if name is None:
        raise InvalidParameterError(f"The 'model' value{f' of {owner}' if owner else ''} must name a model family; "
                                    f"got null",
                                    hint=f"Known model families are {', '.join(sorted(FAMILIES))}.")
    fam = FAMILIES.get(name) if isinstance(name, str) else None
    if fam is None:
        raise UndefinedObjectError(
            f"Unknown model family {shown(name)}",
            hint=f"Known model families are {', '.join(sorted(FAMILIES))}.",
        )
    return fam
