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

    def log_sums(self, A: np.ndarray, B: np.ndarray) -> np.ndarray:
        """``out[j] = sum_i s_ij * log(A_ij)`` for ``A`` in [1, 2]; ``B`` is scratch.

        The logarithm of a product of up to 512 such values is exact to a few ulps and
        the product cannot overflow (2**512), so the rows are multiplied pairwise in
        place (:func:`_tree_product`) and only one row in 512 goes through ``log``.
        That replaces a ``log`` per element (the most expensive step of a logistic
        pass) by a multiplication.  Weighted columns need the two label ranges apart;
        without a label-sorted block they take one ``log`` per element.
        """
        m, k = A.shape
        np.copyto(B, A)
        if self.split >= k:
            rows = _tree_product(B)
            return np.log(B[:rows]).sum(axis=0)
        if self.zeros is None or self.label_w is None:
            np.log(A, out=B)
            return self.sums(B)
        z = self.zeros
        part0, part1 = B[:z], B[z:]
        s0 = np.log(part0[:_tree_product(part0)]).sum(axis=0) if z else np.zeros(k)
        s1 = np.log(part1[:_tree_product(part1)]).sum(axis=0) if z < m else np.zeros(k)
        out = s0 + s1
        w0, w1 = self.label_w
        out[self.split:] = w0 * s0[self.split:] + w1 * s1[self.split:]
        return out

    def by_label_ranges(self) -> bool:
        """True when weighted columns exist and the block is sorted by label."""
        return self.sw is not None and self.zeros is not None and self.label_w is not None

    def label_ranges(self, k: int):
        """``(row_start, row_end, column_scale)`` for the label-0 and label-1 rows of a
        block sorted by label: the row weight of every column of each range."""
        m, z = self.sw.shape[0], self.zeros
        out = []
        for r0, r1, w in ((0, z, self.label_w[0]), (z, m, self.label_w[1])):
            if r1 > r0:
                scale = np.ones(k)
                scale[self.split:] = w
                out.append((r0, r1, scale))
        return out

    def apply(self, R: np.ndarray) -> None:
        """Multiply the rows of the weighted columns by ``sw`` in place."""
        if self.split < R.shape[1]:
            R[:, self.split:] *= self.sw[:, None]


def _tree_product(B: np.ndarray, rounds: int = 9) -> int:
    """Multiply the rows of ``B`` pairwise in place, ``rounds`` times; return the rows left.

    Afterwards ``B[:r]`` holds, column by column, products of disjoint sets of at most
    ``2**rounds`` original rows that together cover every row.
    """
    rows = B.shape[0]
    for _ in range(rounds):
        if rows <= 1:
            break
        half = rows // 2
        B[:half] *= B[rows - half:rows]
        rows -= half
    return rows


class _BinaryFamily(GLMFamily):
    kind = "classification"

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
        f = cw.sums(Z, h) + 0.5 * cw.sums(A)      # sum max(z, 0) - y z
        np.negative(A, out=A)
        np.exp(A, out=A)                          # e = exp(-|z|) in (0, 1]
        A += 1.0
        f += cw.log_sums(A, B)                    # sum log(1 + e)
        np.reciprocal(A, out=A)                   # sigmoid(|z|)
        A -= 0.5
        np.copysign(A, Z, out=Z)                  # sigmoid(z) - 1/2
        z0 = cw.zeros
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
        f = cw.sums(np.square(A, out=B))
        hinge = np.flatnonzero([p.get("loss") == "hinge" for p in params_list])
        # squared hinge: d/dz max(0, 1 - t z)^2 = -2 t max(0, 1 - t z); hinge: -t [1 - t z > 0]
        np.multiply(A, -2.0 * t, out=Z)
        if hinge.size:
            f[hinge] = cw.sums(A)[hinge]
            Z[:, hinge] = -t * (A[:, hinge] > 0)
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
