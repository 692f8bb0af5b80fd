"""Mini-batch SGD of a GLM over one partition at a time: the GLM's model hopper unit.

Model hopper parallelism (Cerebro, sections 3.1 and 4.2) trains a configuration by passing
its state from partition to partition; a *visit* is one pass of mini-batch SGD over one
partition's rows.  For the GLM families (logistic, linear, svm) the state is small and plain:

* the weights on the standardized scale (``d + 1`` values, the last the intercept), the
  column centres and scales of the whole group (merged from the partitions' moments, in
  partition order) and the balanced class weights when the configuration asks for them
  (they depend on the group's label mean only);
* the family, the validated parameters (``solver`` 'sgd') and the epochs done.

:func:`sgd_pass` is the step: for every mini-batch of a seeded permutation of the rows, the
gradient of the mean data loss at the equivalent weights on the user's scale (the family's
own ``batch_loss``: the losses of :class:`groupml.learners.GLMTrainer`) is brought back to the
standardized scale by the chain rule, the l2 term ``l2 * v`` is added (the intercept is never
penalized) and ``v -= lr * g``; ``l1`` is a proximal soft-threshold after each step.  It is a
pure function: the same state, rows, epoch and partition give the same bytes, so a run's
visit log replays bit for bit (:mod:`groupml.executor.replay`).  Models are ordinary
:class:`groupml.learners.GLMModel` fits with the weights on the user's scale.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import ArrayLengthError, InvalidParameterError, ModelFormatError
from ..validation import shown
from ._container import pack, unpack
from ._data import as_data
from ._families import ColumnWeights, GLMFamily, get_family
from ._model import GLMModel

STATE_FORMAT = "glm-sgd-1"
#: a visit calls ``interrupt_check`` after every this many mini-batches
CHECK_EVERY = 64
#: the search parameters SGD does not honour under model hopper parallelism, and why
UNHONOURED = {
    "tol": "SGD runs its max_iter epochs; it has no convergence test for tol to bound",
    "epochs": "a GLM counts its SGD epochs in max_iter",
}
MOP_SOLVERS = ("sgd", "auto")
_HINT = "The bytes are not a GLM SGD training state of groupml; restart the run."


# ------------------------------------------------------------------ the state
def class_weights(family: GLMFamily, params: Mapping[str, Any], y_mean: float) -> Optional[Tuple[float, float]]:
    """(w0, w1) of ``class_weight 'balanced'`` for a group whose label mean is ``y_mean``
    (``n / (2 n_c)`` = ``1 / (2 share_c)``), else None."""
    if family.kind != "classification" or params.get("class_weight") != "balanced":
        return None
    p1 = float(y_mean)
    return (0.5 / (1.0 - p1) if p1 < 1.0 else 0.0, 0.5 / p1 if p1 > 0.0 else 0.0)


def init_state(family, params: Mapping[str, Any], d: int, stats: Mapping[str, Any]) -> bytes:
    """The initial training state of one configuration: zero weights, the group's
    standardization ``stats`` (:func:`groupml.learners.merge_stats`: ``x_mean``, ``x_scale``,
    ``y_mean``), ``params`` validated with solver 'sgd'."""
    fam = get_family(family)
    p = sgd_params(fam, params)
    shift = np.asarray(stats["x_mean"], dtype=np.float64).reshape(-1)
    scale = np.asarray(stats["x_scale"], dtype=np.float64).reshape(-1)
    if shift.shape != (int(d),) or scale.shape != (int(d),):
        raise ArrayLengthError(f"The standardization of a GLM SGD state has {shift.shape[0]} columns; the group has "
                               f"{int(d)} features", hint="Merge the moments of the group's own partitions.")
    return _pack(fam.name, p, 0, class_weights(fam, p, float(stats.get("y_mean", 0.0))),
                 np.zeros(int(d) + 1), shift, scale)


def sgd_params(family, params: Mapping[str, Any]) -> Dict[str, Any]:
    """``params`` validated by the family with solver 'sgd' ('auto' or absent means 'sgd')."""
    fam = get_family(family)
    q = dict(params or {})
    if q.get("solver", "auto") == "auto":
        q["solver"] = "sgd"
    p = fam.validate_params(q)
    if p["solver"] != "sgd":
        raise InvalidParameterError(
            f"The 'solver' value of {fam.owner} must be 'sgd' (or 'auto') when it is trained by model hopper "
            f"parallelism; got {shown(p['solver'])}",
            hint="strategy 'mop' trains GLMs by mini-batch SGD over each partition: drop solver or set it to 'sgd'.")
    return p


def _pack(family: str, params: Mapping[str, Any], epochs_done: int, class_w, theta, shift, scale) -> bytes:
    header = {"format": STATE_FORMAT, "family": family, "params": dict(params), "d": int(shift.shape[0]),
              "epochs_done": int(epochs_done), "class_w": None if class_w is None else [float(v) for v in class_w]}
    body = np.concatenate([theta, shift, scale]).astype("<f8").tobytes()
    # non-finite weights (a diverged configuration) are kept exactly: they are in the body
    return pack(header, body)


class SGDState:
    """A decoded training state (see the module doc)."""

    __slots__ = ("family", "params", "epochs_done", "class_w", "theta", "shift", "scale")

    def __init__(self, blob: bytes):
        header, body = unpack(blob, "GLM SGD training state")
        try:
            if header.get("format") != STATE_FORMAT:
                raise ValueError("format")
            self.family = get_family(header["family"])
            self.params = sgd_params(self.family, header["params"])
            d = int(header["d"])
            self.epochs_done = int(header["epochs_done"])
            cw = header["class_w"]
            self.class_w = None if cw is None else (float(cw[0]), float(cw[1]))
        except Exception:      # any malformed header: one error, never a traceback of its contents
            raise ModelFormatError("The GLM SGD training state has an invalid header", hint=_HINT) from None
        if d < 0 or len(body) != 8 * (3 * d + 1):
            raise ModelFormatError(f"The GLM SGD training state holds {len(body)} bytes of arrays; expected "
                                   f"{8 * (3 * d + 1)}", hint=_HINT)
        a = np.frombuffer(body, dtype="<f8").astype(np.float64)
        self.theta, self.shift, self.scale = a[:d + 1].copy(), a[d + 1:2 * d + 1].copy(), a[2 * d + 1:].copy()
        if not (np.all(np.isfinite(self.shift)) and np.all(self.scale > 0) and np.all(np.isfinite(self.scale))):
            raise ModelFormatError("The GLM SGD training state has an invalid standardization", hint=_HINT)

    @property
    def d(self) -> int:
        return int(self.shift.shape[0])

    def to_bytes(self) -> bytes:
        return _pack(self.family.name, self.params, self.epochs_done, self.class_w, self.theta, self.shift,
                     self.scale)

    def user_weights(self, theta: Optional[np.ndarray] = None) -> Tuple[np.ndarray, float]:
        """(coef, intercept) on the user's scale of standardized weights ``theta`` (the
        state's by default): ``w = v / scale``, ``b = v_b - shift . w`` (not centred without
        an intercept)."""
        v = self.theta if theta is None else theta
        d = self.d
        w = v[:d] / self.scale
        b = float(v[d])
        if self.params["fit_intercept"]:
            b -= float(np.dot(self.shift, w))
        return w, b


# ------------------------------------------------------------------ the step
def sgd_pass(state: SGDState, X: np.ndarray, y: np.ndarray, *, seed_key: Sequence[int],
             interrupt_check: Optional[Callable[[], None]] = None) -> np.ndarray:
    """One pass of mini-batch SGD over the rows ``X``, ``y`` (labels prepared), in the order of
    a permutation drawn from ``numpy.random.default_rng(seed_key)``; returns the new
    standardized weights (``state`` is not changed)."""
    fam, p = state.family, state.params
    d = state.d
    n = int(X.shape[0])
    lr, l2, l1 = float(p["lr"]), float(p["l2"]), float(p["l1"])
    bs = int(p["batch_size"])
    icpt = bool(p["fit_intercept"])
    centre = state.shift if icpt else np.zeros(d)
    v = state.theta.copy()
    perm = np.random.default_rng([int(k) for k in seed_key]).permutation(n)
    params_list = [p]
    for i, start in enumerate(range(0, n, bs)):
        if interrupt_check is not None and i % CHECK_EVERY == CHECK_EVERY - 1:
            interrupt_check()
        rows = perm[start:start + bs]
        Xb, yb = X[rows], y[rows]
        m = Xb.shape[0]
        w, b = state.user_weights(v)
        Z = np.dot(Xb, w).reshape(m, 1)
        Z += b
        ones = np.ones(m)
        scratch = (np.empty((m, 1)), np.empty((m, 1)))
        fam.batch_loss(Z, yb, ColumnWeights(ones, None, 1), params_list, scratch)   # Z := dloss/dz
        r = Z[:, 0]
        if state.class_w is not None:
            r = r * np.where(yb > 0.5, state.class_w[1], state.class_w[0])
        gw = np.dot(r, Xb) / m
        gb = float(np.dot(ones, r)) / m
        g = np.empty(d + 1)
        g[:d] = (gw - centre * gb) / state.scale + l2 * v[:d]
        g[d] = gb if icpt else 0.0
        v -= lr * g
        if l1 > 0:
            np.copysign(np.maximum(np.abs(v[:d]) - lr * l1, 0.0), v[:d], out=v[:d])
    return v


def visit(state: bytes, X, y, *, epoch: int, shard_id: int, interrupt_check=None) -> bytes:
    """Train the configuration in ``state`` for one pass over one partition; return the new
    state. Pure: the same (state, rows, epoch, shard_id) always give the same bytes. The
    batch order is seeded by (the configuration's ``seed``, ``epoch``, ``shard_id``)."""
    st = SGDState(state)
    X, y = as_data(X, y, f"partition {shard_id}")
    if X.shape[1] != st.d:
        raise ArrayLengthError(f"Partition {shard_id} has {X.shape[1]} features; the model has {st.d}",
                               hint="Every partition of a group holds the same feature columns.")
    y = st.family.prepare_labels(y, f"partition {shard_id}")
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        st.theta = sgd_pass(st, X, y, seed_key=(int(st.params["seed"]), int(epoch), int(shard_id), 0x475344),
                            interrupt_check=interrupt_check)
    st.epochs_done = max(st.epochs_done, int(epoch) + 1)
    return st.to_bytes()


def diverged(state: bytes) -> bool:
    return not bool(np.all(np.isfinite(SGDState(state).theta)))


def state_margins(state: bytes, X: np.ndarray) -> np.ndarray:
    """Decision values of the state's model on the rows ``X``."""
    w, b = SGDState(state).user_weights()
    with np.errstate(over="ignore", invalid="ignore"):
        z = np.dot(np.ascontiguousarray(X, dtype=np.float64), w)
        z += b
    return z


def state_model(state: bytes) -> GLMModel:
    """The fitted GLM the state holds (weights on the user's scale)."""
    st = SGDState(state)
    w, b = st.user_weights()
    return GLMModel(st.family.name, w.copy(), b, st.params)


# ------------------------------------------------------------------ the request
def _solver_values(node: Any, out: List[Any]) -> None:
    """Every value given to a 'solver' key anywhere in a search object (lists flattened;
    the sub-spaces of a list are searched too)."""
    if isinstance(node, Mapping):
        for k, v in node.items():
            if k == "solver":
                for s in (v if isinstance(v, list) else [v]):
                    if isinstance(s, Mapping):
                        _solver_values(s, out)
                    else:
                        out.append(s)
            else:
                _solver_values(v, out)
    elif isinstance(node, list):
        for v in node:
            _solver_values(v, out)


def _find(node: Any, key: str) -> List[Any]:
    """``[value]`` of the first ``key`` anywhere in a search object (sub-spaces too), else []."""
    if isinstance(node, Mapping):
        if key in node:
            return [node[key]]
        node = list(node.values())
    if isinstance(node, list):
        for v in node:
            hit = _find(v, key)
            if hit:
                return hit
    return []


def mop_search(family, search: Mapping[str, Any]) -> Dict[str, Any]:
    """The search of a GLM run under model hopper parallelism: SGD made explicit.

    Refuses (22023) a solver other than 'sgd'/'auto' and the parameters SGD does not honour
    (:data:`UNHONOURED`); returns a copy of ``search`` whose parameters say ``solver`` 'sgd'
    (a fixed dimension where the parameters live -- in ``space``, or among the search's own
    keys -- and every 'auto' replaced), so every configuration is validated,
    trained and stored as the SGD fit it is."""
    fam = get_family(family)
    if not isinstance(search, Mapping):
        return search
    values: List[Any] = []
    _solver_values(search, values)
    for s in values:
        if s not in MOP_SOLVERS:
            raise InvalidParameterError(
                f"The 'solver' value of search must be 'sgd' (or 'auto') for {fam.owner} under strategy 'mop'; "
                f"got {shown(s)}",
                hint="Model hopper parallelism trains GLMs by mini-batch SGD over each partition (lr, batch_size, "
                     "max_iter epochs, l2, l1): drop solver or set it to 'sgd'.")
    for k, why in UNHONOURED.items():
        found = _find(search.get("space", search), k)
        if found:
            raise InvalidParameterError(
                f"The search of {fam.owner} under strategy 'mop' must not set '{k}' ({why}); got {k} = "
                f"{shown(found[0])}",
                hint="Drop it; give the epochs as max_iter (and the step size as lr).")
    out = json.loads(json.dumps(search))
    _replace_auto(out)
    holder = out["space"] if isinstance(out.get("space"), dict) else out
    holder.setdefault("solver", "sgd")          # a fixed dimension: every configuration says it
    return out


def _replace_auto(node: Any) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "solver":
                if v == "auto":
                    node[k] = "sgd"
                elif isinstance(v, list):
                    node[k] = ["sgd" if s == "auto" else s for s in v]
            _replace_auto(node[k])
    elif isinstance(node, list):
        for v in node:
            _replace_auto(v)
