"""PyTorch multi-layer perceptron: the *sequential* access pattern (Kingpin section 2.2).

Everything about one configuration's training lives in a :class:`MLPRun` -- network,
optimizer, the torch generator that draws dropout masks -- and one epoch over a block
of rows is :func:`train_epoch`.  Both the single-backend :class:`MLPTrainer` and the
sharded executor (``_sharded``: a model hops from shard to shard) call that same
function, so a run is reproducible bit for bit from its visit log.

Determinism on CPU (no global state is read or written while training):

* weights are initialised from a ``torch.Generator`` seeded with the config's ``seed``
  (PyTorch's default ``nn.Linear`` ranges, drawn explicitly);
* dropout masks come from that same generator, whose state travels with the model;
* the row order of an epoch is ``numpy.random.default_rng([seed, epoch, shard_id])``;
* torch runs with one intra-op thread (:data:`TORCH_THREADS`) and
  ``torch.use_deterministic_algorithms(True)``: parallelism comes from running many
  backends, never from threads inside one, and results do not depend on the core count.

``torch`` is imported lazily: the package imports without it.
"""

from __future__ import annotations

import io
import math
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import (DataError, FeatureNotSupportedError, GroupmlError, InvalidParameterError,
                      PrerequisiteStateError, UndefinedObjectError)
from ._data import check_iterations, choose_metric, train_val
from . import _container
from ._extfamilies import EXTRA_FAMILIES, LearnerFamily
from ._metrics import validation_loss, validation_metrics
from ._model import ContainerModel, check_body_digest, register_loader
from ._trials import TrialAccessors, TrialRecord, check_fork, find_trial

TORCH_THREADS = 1
STATE_FORMAT = "groupml-mlp-state-1"
_torch_mod = None
_net_cls = None
#: Seconds between the caller's cancel checks while torch loads in :func:`_load_torch`.
IMPORT_CHECK_EVERY_S = 0.05
_loader: Optional[threading.Thread] = None
#: the thread importing what torch's first optimizer imports (:func:`optimizer_ready`)
_optim_loader: Optional[threading.Thread] = None
_optim_ready = False
_loader_lock = threading.Lock()


def torch_module(interrupt_check: Optional[Callable[[], None]] = None):
    """Import torch once and make it deterministic (one thread, deterministic kernels).
    ``interrupt_check`` (a backend's cancel check): torch's first import in a process takes
    seconds, in which a backend would notice no cancel, so it then loads in a helper thread
    (:func:`_load_torch`) while this thread keeps calling the check."""
    global _torch_mod
    if _torch_mod is None:
        if interrupt_check is not None:
            _load_torch(interrupt_check)
        try:
            import torch
        except ImportError:
            raise FeatureNotSupportedError(
                "Model 'mlp' needs PyTorch, which is not installed in groupml's Python",
                hint="Reinstall with: groupml install --extras torch") from None
        if torch.get_num_threads() != TORCH_THREADS:
            torch.set_num_threads(TORCH_THREADS)
        _deterministic(torch)
        _torch_mod = torch
    return _torch_mod


def _load_torch(interrupt_check: Callable[[], None]) -> None:
    """Wait for ``import torch`` in a helper thread, calling ``interrupt_check`` every
    :data:`IMPORT_CHECK_EVERY_S` (a cancel raises here; the import goes on, and a later call
    waits for the same thread). Whether the import failed is left to the caller's own
    ``import torch``, which then raises its error again."""
    _load_in_thread("_loader", "groupml-import-torch", _import_torch, interrupt_check)


def _load_in_thread(slot: str, name: str, target: Callable[[], None], interrupt_check: Callable[[], None]) -> None:
    """Run ``target`` once per process in a helper thread (kept in the module global
    ``slot``, which the exit hook waits for) and wait for it, calling ``interrupt_check``
    every :data:`IMPORT_CHECK_EVERY_S`."""
    with _loader_lock:
        thread = globals()[slot]
        if thread is None:
            thread = threading.Thread(target=target, name=name)
            globals()[slot] = thread
            _wait_for_loader_at_exit()
            thread.start()
    while thread.is_alive():
        interrupt_check()
        thread.join(IMPORT_CHECK_EVERY_S)


def optimizer_ready(interrupt_check: Optional[Callable[[], None]] = None) -> None:
    """Import torch (:func:`torch_module`) and what its first optimizer imports (torch._dynamo:
    about 0.8 s in a new process), the latter also in a helper thread while this thread keeps
    calling ``interrupt_check``: a training's first optimizer then imports nothing, and a
    cancel during that import is noticed at once. Prediction never needs it."""
    global _optim_ready
    if _optim_ready:
        return
    torch_module(interrupt_check)
    if interrupt_check is not None:
        _load_in_thread("_optim_loader", "groupml-import-optim", _import_optimizer_deps, interrupt_check)
    _import_optimizer_deps()
    _optim_ready = True


def _import_optimizer_deps() -> None:
    try:
        import torch._dynamo  # noqa: F401
    except BaseException:  # noqa: BLE001 - the optimizer's own import raises it again
        pass


#: Seconds a backend that is ending waits for torch's import to finish (:func:`_wait_for_loader_at_exit`).
EXIT_WAIT_S = 60.0
_exit_hook = None


def _wait_for_loader_at_exit() -> None:
    """In a PostgreSQL backend, register (``on_proc_exit``) a wait for the loader thread: a
    backend ending while torch loads (pg_terminate_backend, its client gone) ran its C++
    static destructors under the loader's library initialisers, and crashed -- which
    restarts the whole server. Outside a backend the thread is not a daemon, so Python's
    exit waits for it."""
    global _exit_hook
    import ctypes

    if _exit_hook is not None:        # registered once per process
        return

    try:
        register = ctypes.CDLL(None).on_proc_exit
    except (AttributeError, OSError):
        return
    hook_type = ctypes.CFUNCTYPE(None, ctypes.c_int, ctypes.c_size_t)

    def wait(code, arg):
        for loader in (_loader, _optim_loader):
            if loader is not None:
                loader.join(EXIT_WAIT_S)

    _exit_hook = hook_type(wait)
    register.restype, register.argtypes = None, [hook_type, ctypes.c_size_t]
    register(_exit_hook, 0)


def _import_torch() -> None:
    try:
        _preload_libtorch()
        import torch  # noqa: F401
    except BaseException:  # noqa: BLE001 - the caller's own import raises it again
        pass


def _preload_libtorch() -> None:
    """Load libtorch_cpu (the largest part of the import: its relocations and static
    initialisers) through a ctypes call of dlopen, which releases the GIL, so the waiting
    thread keeps checking meanwhile; Python's own import holds the GIL while it loads a
    library (measured: the longest stretch without a check went from 0.25-0.5 s to 0.15 s).
    torch's import then finds the library loaded. Nothing is done where the file or dlopen
    is not found."""
    import ctypes
    import importlib.util
    import os

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return
    path = os.path.join(os.path.dirname(spec.origin), "lib", "libtorch_cpu.so")
    if not os.path.exists(path):
        return
    dlopen = ctypes.CDLL(None).dlopen
    dlopen.restype, dlopen.argtypes = ctypes.c_void_p, [ctypes.c_char_p, ctypes.c_int]
    dlopen(os.fsencode(path), os.RTLD_NOW | os.RTLD_LOCAL)


def _deterministic(torch) -> None:
    """``torch.use_deterministic_algorithms(True)`` without its import of
    ``torch._inductor.config`` (which loads TorchDynamo: 0.75 s of a new session's first MLP
    call, measured with torch 2.13). That import only sets the flag for code torch.compile
    generates, and groupml does not compile; the kernels' switch is the ``_C`` call below.
    Falls back to the public call where ``_C`` lacks it."""
    setter = getattr(torch._C, "_set_deterministic_algorithms", None)
    if setter is None:                    # pragma: no cover - other torch versions
        torch.use_deterministic_algorithms(True)
        return
    setter(True, warn_only=False)


def _family(name) -> LearnerFamily:
    fam = EXTRA_FAMILIES.get(name) if isinstance(name, str) else name
    if not isinstance(fam, LearnerFamily) or fam.pattern != "sequential":
        raise UndefinedObjectError(f"Unknown MLP model family {name!r}",
                                   hint="MLP families are mlp and mlp_regressor.")
    return fam


def net_class():
    """The torch module class (built on first use so torch stays a lazy import)."""
    global _net_cls
    if _net_cls is not None:
        return _net_cls
    torch = torch_module()
    nn = torch.nn
    F = nn.functional
    acts = {"relu": F.relu, "tanh": torch.tanh, "gelu": F.gelu}

    class GroupmlMLP(nn.Module):
        """Standardise inputs, hidden Linear+activation(+dropout) layers, one output."""

        def __init__(self, n_features: int, layers: List[int], activation: str, dropout: float):
            super().__init__()
            # float64: a feature like 1.7e9 + x keeps its x only if the mean is taken off before
            # the float32 layers (float32 steps by 128 there)
            self.register_buffer("x_mean", torch.zeros(n_features, dtype=torch.float64))
            self.register_buffer("x_scale", torch.ones(n_features, dtype=torch.float64))
            self.register_buffer("y_mean", torch.zeros((), dtype=torch.float64))
            self.register_buffer("y_scale", torch.ones((), dtype=torch.float64))
            widths = [n_features] + list(layers)
            self.hidden = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
            self.out = nn.Linear(widths[-1], 1)
            self.activation = str(activation)
            self.act = acts[activation]
            self.dropout = float(dropout)

        def forward(self, x, generator=None, overflowed=None):
            """Inference (eval mode); training steps run :func:`train_step`, which computes
            this same forward pass (in training mode: dropout drawn from ``generator``).
            ``overflowed``: a bool tensor, one per row, set for the rows where a value on the
            way is not finite (the float32 inputs, a layer's pre-activations): relu(-inf) = 0
            and tanh(+-inf) = +-1 would hide that overflow in a finite output."""
            h = ((x - self.x_mean) / self.x_scale).to(torch.float32)
            p = self.dropout
            if overflowed is not None:
                overflowed |= ~torch.isfinite(h).all(dim=-1)
            for lin in self.hidden:
                h = lin(h)
                if overflowed is not None:
                    overflowed |= ~torch.isfinite(h).all(dim=-1)
                h = self.act(h)
                if self.training and p > 0.0:
                    keep = torch.rand(h.shape, generator=generator) >= p
                    h = h * keep / (1.0 - p)
            return self.out(h).squeeze(-1)

        def init_weights(self, generator) -> None:
            """PyTorch's default nn.Linear ranges, drawn from ``generator``."""
            with torch.no_grad():
                for lin in list(self.hidden) + [self.out]:
                    bound = 1.0 / math.sqrt(lin.in_features)
                    lin.weight.uniform_(-bound, bound, generator=generator)
                    lin.bias.uniform_(-bound, bound, generator=generator)

    _net_cls = GroupmlMLP
    return _net_cls


# ------------------------------------------------------------------ data and statistics
#: Largest feature or label magnitude an MLP trains on: it trains in float32 (max 3.4e38), and
#: the squares of its standardisation statistics must stay finite.
MLP_MAX_ABS = 1e30


def partial_stats(X: np.ndarray, y: np.ndarray) -> Dict[str, Any]:
    """Mergeable moments of one shard: row count, means and sums of squared deviations from
    them (two passes in float64: ``sxx / n - mean**2`` cancels to nothing for a feature like
    1e8 + x). Every MLP path computes these on its training rows first, so they check the
    value range."""
    for what, v in (("features", X), ("labels", y)):
        top = float(np.max(np.abs(v))) if v.size else 0.0
        if top > MLP_MAX_ABS:
            raise DataError(f"The {what} of an MLP must lie within +-{MLP_MAX_ABS:g} (it trains in float32); "
                            f"got a value of magnitude {top:g}",
                            hint="Rescale the column, e.g. divide it by a power of ten or take its logarithm.")
    n = int(X.shape[0])
    if n == 0:
        return {"n": 0, "mx": np.zeros(X.shape[1]), "m2x": np.zeros(X.shape[1]), "my": 0.0, "m2y": 0.0}
    mx = X.mean(axis=0)
    dx = X - mx
    my = float(y.mean())
    dy = y - my
    return {"n": n, "mx": mx, "m2x": np.einsum("ij,ij->j", dx, dx), "my": my, "m2y": float(dy @ dy)}


#: Relative spread below which a column counts as constant: 64 float64 epsilons.
_RESOLUTION = 64 * float(np.finfo(np.float64).eps)


def merge_stats(parts: List[Dict[str, Any]], d: int) -> Dict[str, Any]:
    """Standardisation statistics (mean, scale) of the union of shards, merged in order
    (Chan et al.'s pairwise update of means and squared deviations)."""
    n, mx, m2x, my, m2y = 0, np.zeros(d), np.zeros(d), 0.0, 0.0
    for p in parts:
        nb = int(p["n"])
        if nb == 0:
            continue
        tot = n + nb
        dx = np.asarray(p["mx"], dtype=np.float64) - mx
        dy = float(p["my"]) - my
        m2x = m2x + np.asarray(p["m2x"], dtype=np.float64) + dx * dx * (n * nb / tot)
        m2y = m2y + float(p["m2y"]) + dy * dy * (n * nb / tot)
        mx = mx + dx * (nb / tot)
        my = my + dy * (nb / tot)
        n = tot
    n = max(n, 1)
    sdx = np.sqrt(np.maximum(m2x / n, 0.0))
    # a column is constant when its spread is below what float64 resolves at its mean (then its
    # squared deviations are rounding); 1.7e9 + 0.001 x still has thousands of levels
    sdx[~(sdx > np.maximum(1e-12, _RESOLUTION * np.abs(mx)))] = 1.0
    sdy = math.sqrt(max(m2y / n, 0.0))
    if not sdy > max(1e-12, _RESOLUTION * abs(my)):
        sdy = 1.0
    return {"x_mean": [float(v) for v in mx], "x_scale": [float(v) for v in sdx],
            "y_mean": float(my), "y_scale": float(sdy)}


def as_tensors(X: np.ndarray, y: np.ndarray):
    """Training rows as float64 tensors (no copy of a float64 array): :func:`standardize`
    takes the mean off in float64 before anything is rounded to float32."""
    torch = torch_module()
    return (torch.from_numpy(np.ascontiguousarray(X, dtype=np.float64)),
            torch.from_numpy(np.ascontiguousarray(y, dtype=np.float64)))


def stats_key(net, regression: bool) -> tuple:
    """What :func:`standardize` depends on besides the rows (to reuse its result)."""
    return (net.x_mean.numpy().tobytes(), net.x_scale.numpy().tobytes(), float(net.y_mean), float(net.y_scale),
            bool(regression))


def standardize(net, Xt, yt, regression: bool):
    """(inputs, targets) of :func:`train_step`: float64 rows standardised in float64 with the
    network's statistics, then float32 -- what the module's forward computes."""
    torch = torch_module()
    with torch.no_grad():
        Xs = ((Xt - net.x_mean) / net.x_scale).to(torch.float32)
        target = ((yt - net.y_mean) / net.y_scale if regression else yt).to(torch.float32)
    return Xs, target


# ------------------------------------------------------------------ one config's training
class MLPRun:
    """Network, optimizer and dropout generator of one configuration."""

    def __init__(self, family: LearnerFamily, params: Dict[str, Any], n_features: int,
                 net, opt, gen, epochs_done: int = 0, visits: int = 0):
        self.family, self.params, self.n_features = family, params, n_features
        self.net, self.opt, self.gen = net, opt, gen
        self.epochs_done, self.visits = epochs_done, visits

    @property
    def regression(self) -> bool:
        return self.family.kind == "regression"


#: Every weight of one MLP, the input layer included (n_features grows it): 50 million at most.
MAX_WEIGHTS = 50_000_000


def warm_up(interrupt_check: Optional[Callable[[], None]] = None) -> None:
    """Import torch and what its first optimizer imports (torch._dynamo: about 1.5 s of a new
    backend's first MLP training), so that a caller timing a training times the training.
    ``interrupt_check``: as for :func:`torch_module`."""
    optimizer_ready(interrupt_check)
    torch = torch_module()
    p = torch.nn.Parameter(torch.zeros(1))
    torch.optim.Adam([p], lr=0.1, fused=True)
    torch.optim.SGD([p], lr=0.1, momentum=0.9)


def build_net(params: Mapping[str, Any], n_features: int):
    """The network of ``params`` (validated) for ``n_features`` inputs, without an optimizer:
    what a model needs to predict. (Making a torch optimizer imports TorchDynamo, 0.7 s of a
    new session's first MLP predict.)"""
    widths = [int(n_features)] + list(params["layers"]) + [1]
    weights = sum((a + 1) * b for a, b in zip(widths[:-1], widths[1:]))
    if weights > MAX_WEIGHTS:
        raise InvalidParameterError(
            f"The 'layers' value of model 'mlp' must give a network of at most {MAX_WEIGHTS:,} weights with "
            f"{n_features} features; got {params['layers']} ({weights:,} weights)",
            hint="Use a narrower first hidden layer.")
    torch_module()
    return net_class()(n_features, params["layers"], params["activation"], params["dropout"])


def _build(params: Mapping[str, Any], n_features: int):
    """(network, optimizer) of ``params`` for training."""
    torch = torch_module()
    net = build_net(params, n_features)
    if params["optimizer"] == "adam":
        # fused: one kernel per step for all parameters instead of ~5 tensor ops per parameter
        # (under autograd it took a [64, 32] net's step at batch 64 from 0.5 to 0.38 ms; results
        # differ from the per-tensor implementation in the last float32 bits, deterministically)
        opt = torch.optim.Adam(net.parameters(), lr=params["lr"],
                               weight_decay=params["weight_decay"], fused=True)
    else:
        opt = torch.optim.SGD(net.parameters(), lr=params["lr"], momentum=params["momentum"],
                              weight_decay=params["weight_decay"])
    return net, opt


def new_run(family, params: Mapping[str, Any], n_features: int,
            stats: Mapping[str, Any]) -> MLPRun:
    """A freshly initialised config; ``stats`` from :func:`merge_stats` of its training rows."""
    torch = torch_module()
    fam = _family(family)
    params = fam.validate_params(params)
    net, opt = _build(params, n_features)
    gen = torch.Generator().manual_seed(int(params["seed"]))
    net.init_weights(gen)
    with torch.no_grad():
        net.x_mean.copy_(torch.tensor(stats["x_mean"], dtype=torch.float64))
        net.x_scale.copy_(torch.tensor(stats["x_scale"], dtype=torch.float64))
        if fam.kind == "regression":
            net.y_mean.fill_(float(stats["y_mean"]))
            net.y_scale.fill_(float(stats["y_scale"]))
    return MLPRun(fam, params, n_features, net, opt, gen)


def epoch_order(seed: int, epoch: int, shard_id: int, n: int) -> np.ndarray:
    """The row order of one epoch over one shard (seeded; independent of everything else)."""
    return np.random.default_rng([int(seed), int(epoch), int(shard_id)]).permutation(n)


def _activation_grad(name: str, g, z, a):
    """``g`` (gradient at the activation's output) back through activation ``name`` with
    input ``z`` and output ``a``: the formulas of PyTorch's own backward kernels."""
    torch = torch_module()
    if name == "relu":
        return g * (a > 0)
    if name == "tanh":
        return g * (1.0 - a * a)
    # exact GELU, x * Phi(x): Phi(x) + x * phi(x)
    cdf = 0.5 * (1.0 + torch.erf(z * (1.0 / math.sqrt(2.0))))
    pdf = torch.exp(-0.5 * z * z) * (1.0 / math.sqrt(2.0 * math.pi))
    return g * (cdf + z * pdf)


def train_step(net, xb, tb, regression: bool, generator=None, masks=None):
    """Forward and backward of one mini-batch without autograd; sets every parameter's
    ``.grad`` and returns the batch loss (a 0-d tensor).

    ``xb`` is already standardised (``net.standardize``) and ``tb`` the target (for a
    regressor, scaled). The forward pass is the module's own -- the same operations in the
    same order, the same dropout draws from ``generator`` (or the given keep-``masks``, one
    per hidden layer) -- and the gradients are the
    closed forms of a Linear/activation/dropout stack under the mean BCE-with-logits or
    MSE loss (tests compare them with autograd). Autograd's bookkeeping is most of a small
    network's step: this takes a [64, 32] step at batch 64 from about 0.6 to 0.25 ms.
    """
    torch = torch_module()
    F = torch.nn.functional
    p = net.dropout
    drop = net.training and p > 0.0
    layers = list(net.hidden) + [net.out]
    with torch.no_grad():
        h = xb
        inputs, pre, post, keeps = [], [], [], []
        for lin in net.hidden:
            inputs.append(h)
            z = F.linear(h, lin.weight, lin.bias)
            a = net.act(z)
            pre.append(z)
            post.append(a)
            if drop:
                keep = masks[len(keeps)] if masks is not None else torch.rand(a.shape, generator=generator) >= p
                keeps.append(keep)
                h = a * keep / (1.0 - p)
            else:
                keeps.append(None)
                h = a
        inputs.append(h)
        out = F.linear(h, net.out.weight, net.out.bias).squeeze(-1)
        n = out.shape[0]
        if regression:
            loss = F.mse_loss(out, tb)
            g = (out - tb) * (2.0 / n)
        else:
            loss = F.binary_cross_entropy_with_logits(out, tb)
            g = (torch.sigmoid(out) - tb) * (1.0 / n)
        g = g.unsqueeze(-1)
        for i in range(len(layers) - 1, -1, -1):
            lin = layers[i]
            lin.weight.grad = g.t().mm(inputs[i])
            lin.bias.grad = g.sum(0)
            if i == 0:
                break
            g = g.mm(lin.weight)
            if keeps[i - 1] is not None:
                g = g / (1.0 - p) * keeps[i - 1]
            g = _activation_grad(net.activation, g, pre[i - 1], post[i - 1])
    return loss


#: Mini-batches between two interrupt checks inside an epoch (an epoch of batch size 1 over a
#: large group could not be cancelled: minutes per epoch).
CHECK_EVERY_BATCHES = 64


def train_epoch(run: MLPRun, Xt, yt, *, epoch: int, shard_id: int = 0,
                interrupt_check: Optional[Callable[[], None]] = None, prepared=None) -> float:
    """One pass of mini-batch updates over ``Xt``/``yt`` (float64 tensors, :func:`as_tensors`);
    mean batch loss. ``prepared``: :func:`standardize` of them with this network's statistics,
    when the caller keeps it across epochs.
    ``interrupt_check`` runs every :data:`CHECK_EVERY_BATCHES` batches."""
    torch = torch_module()
    n = int(Xt.shape[0])
    if n == 0:
        return math.nan
    p = run.params
    bs = int(p["batch_size"])
    order = torch.from_numpy(epoch_order(p["seed"], epoch, shard_id, n))
    net, opt = run.net, run.opt
    net.train()
    total, batches = 0.0, 0
    # what the module's forward computes per batch, once for the shard: elementwise,
    # so every batch's rows are the same bits
    Xs, target = prepared if prepared is not None else standardize(net, Xt, yt, run.regression)
    for s in range(0, n, bs):
        idx = order[s:s + bs]
        loss = train_step(net, Xs[idx], target[idx], run.regression, run.gen)
        opt.step()
        total += float(loss)
        batches += 1
        if interrupt_check is not None and batches % CHECK_EVERY_BATCHES == 0:
            interrupt_check()
    net.eval()
    run.visits += 1
    return total / batches


#: Activation values one forward pass of decision_values may hold per layer (rows x widest layer).
DECISION_CHUNK_VALUES = 4_000_000


def decision_values(net, X: np.ndarray, regression: bool, *, overflow_nan: bool = False) -> np.ndarray:
    """Logits (classifier) or predictions (regressor) as float64, in eval mode; with
    ``overflow_nan``, NaN for a row where a value inside the network overflowed (a score that
    may look finite but means nothing)."""
    torch = torch_module()
    if net.training:        # eval() walks every submodule: 24 us, most of a one-row predict
        net.eval()
    X = np.ascontiguousarray(X, dtype=np.float64)      # the forward standardises in float64
    # rows in chunks, so a wide net's activations over a large validation set stay bounded
    # (200,000 rows x 65,536 units would be 52 GB at once); one chunk for the usual sizes
    widest = max([X.shape[1] if X.ndim == 2 else 1] + [int(m.out_features) for m in net.modules()
                                                       if hasattr(m, "out_features")])
    step = max(1, DECISION_CHUNK_VALUES // widest)
    with torch.no_grad():
        parts = []
        for s in range(0, max(1, X.shape[0]), step):
            x = torch.from_numpy(X[s:s + step])
            overflowed = torch.zeros(x.shape[:-1], dtype=torch.bool) if overflow_nan else None
            z = net(x, overflowed=overflowed).double()
            if overflowed is not None and bool(overflowed.any()):
                z[overflowed] = float("nan")
            if regression:
                z = z * net.y_scale + net.y_mean
            parts.append(z.numpy().reshape(-1))
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


# ------------------------------------------------------------------ bytes (never pickle)
def _torch_bytes(obj) -> bytes:
    torch = torch_module()
    buf = io.BytesIO()
    torch.save(obj, buf)
    return buf.getvalue()


#: Unpacked bytes of a torch archive that are read at most: a training state of the largest
#: network (float32 weights and two Adam moments) and room for the rest. torch reads deflated
#: archives too, so a small value could otherwise unpack to any size.
MAX_TORCH_BYTES = 3 * 4 * MAX_WEIGHTS + (16 << 20)
#: Entries of a torch archive that are read at most (a record per tensor, a few more files).
MAX_TORCH_ENTRIES = 10_000


def _torch_load(body: bytes, what: str):
    """torch's own bytes, read with ``weights_only`` (tensors and plain containers only),
    after checking what they would unpack to."""
    import zipfile

    try:
        # the directory's entry count first (zip64 too): parsing 300,000 empty entries took
        # 100 MB before any size could be checked; torch's own archives hold a few hundred
        end = zipfile._EndRecData(io.BytesIO(body))
        entries = None if end is None else int(end[zipfile._ECD_ENTRIES_TOTAL])
    except (zipfile.BadZipFile, ValueError, OSError):
        entries = None
    if entries is None:
        raise _container.bad(what, "it is not torch's archive format")
    if entries > MAX_TORCH_ENTRIES:
        raise _container.bad(what, f"its archive lists {entries:,} entries; at most {MAX_TORCH_ENTRIES:,} are read")
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as z:
            unpacked = sum(i.file_size for i in z.infolist())
    except (zipfile.BadZipFile, ValueError, OSError):
        raise _container.bad(what, "it is not torch's archive format") from None
    if unpacked > MAX_TORCH_BYTES:
        raise _container.bad(what, f"it would unpack to {unpacked:,} bytes; at most {MAX_TORCH_BYTES:,} are read")
    torch = torch_module()
    try:
        return torch.load(io.BytesIO(body), weights_only=True, map_location="cpu")
    except MemoryError:
        raise                       # sql_entry's 53200, not a corrupt model
    except Exception as exc:        # torch raises many kinds on bytes that are not its own
        raise _container.bad(what, f"torch cannot read it ({type(exc).__name__})") from None


def run_to_bytes(run: MLPRun) -> bytes:
    """The whole training state (weights, optimizer moments, dropout generator) as bytes."""
    header = {"format": STATE_FORMAT, "family": run.family.name, "params": run.params,
              "n_features": run.n_features, "epochs_done": run.epochs_done, "visits": run.visits}
    body = _torch_bytes({"net": run.net.state_dict(), "opt": run.opt.state_dict(),
                         "gen": run.gen.get_state()})
    return _container.pack(header, body)


def run_from_bytes(state: bytes) -> MLPRun:
    """The training state ``run_to_bytes`` wrote. The state may have been read from a table
    (an epoch checkpoint), so it is checked before torch uses it: see :func:`_check_opt_state`."""
    torch = torch_module()
    header, body = _container.unpack(state, "mlp training state")
    if header.get("format") != STATE_FORMAT:
        raise _container.bad("mlp training state", "unknown format")
    fam = _family(header.get("family"))
    d, epochs, visits = (header.get(k) for k in ("n_features", "epochs_done", "visits"))
    if not isinstance(header.get("params"), dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) and v >= lo for v, lo in ((d, 1), (epochs, 0), (visits, 0))):
        raise _container.bad("mlp training state", "the header's params, n_features or epoch counts")
    params = fam.validate_params(header["params"])
    obj = _torch_load(body, "mlp training state")
    if not isinstance(obj, dict) or set(obj) != {"net", "opt", "gen"}:
        raise _container.bad("mlp training state", "it is not a network, optimizer and generator state")
    net, opt = _build(params, d)
    gen = torch.Generator()
    try:
        _check_opt_state(obj["opt"], opt, params)
        net.load_state_dict(obj["net"], strict=True)
        opt.load_state_dict(obj["opt"])
        gen.set_state(obj["gen"])
    except GroupmlError:
        raise
    except (RuntimeError, TypeError, ValueError, KeyError, AttributeError) as exc:
        why = " ".join(str(exc).split())[:200]
        raise _container.bad("mlp training state", f"it does not fit the network: {why}") from None
    net.eval()
    return MLPRun(fam, params, d, net, opt, gen, epochs, visits)


def fork_state(state: bytes, params: Mapping[str, Any]) -> bytes:
    """A configuration's training state continued with other hyperparameters (a population
    based training fork): the network, the optimizer's moments, the dropout generator and the
    epoch counts are the parent's; the optimizer's settings and the run's params are
    ``params`` (validated), which may differ from the parent's only in the family's
    ``fork_params``. Deterministic: the same state and params give the same bytes' tensors."""
    run = run_from_bytes(state)
    new = run.family.validate_params(params)
    other = sorted(k for k in new if k not in run.family.fork_params and new[k] != run.params[k])
    if other:
        k = other[0]
        raise InvalidParameterError(
            f"The '{k}' value of a fork of model '{run.family.name}' must be the parent's ({run.params[k]!r}); "
            f"got {new[k]!r}", hint=f"A fork continues the parent's network; only "
                                    f"{', '.join(run.family.fork_params)} may change.")
    for group in run.opt.param_groups:
        for key in ("lr", "momentum", "weight_decay"):
            if key in group:
                group[key] = new[key]
    run.params = new
    return run_to_bytes(run)


#: What the optimizer keeps per parameter after a step (torch 2): checked before torch steps.
_OPT_STATE_KEYS = {"adam": {"step", "exp_avg", "exp_avg_sq"}, "sgd": {"momentum_buffer"}}


def _check_opt_state(saved, opt, params: Mapping[str, Any]) -> None:
    """Raise ModelFormatError unless ``saved`` is what ``opt.state_dict()`` of this network and
    params looks like after training: the same parameter groups and settings, and per parameter
    exactly the optimizer's moment tensors, each of the parameter's shape and dtype (and Adam's
    step a finite scalar). Torch does not check the shapes itself: its fused Adam step on a
    moment tensor smaller than its parameter writes outside it (measured: SIGSEGV), which in a
    worker backend restarts every session of the server."""
    torch = torch_module()
    fresh = opt.state_dict()
    if not isinstance(saved, dict) or set(saved) != {"state", "param_groups"} \
            or saved["param_groups"] != fresh["param_groups"]:
        raise _container.bad("mlp training state", "its optimizer settings are not those of its params")
    tensors = [p for g in opt.param_groups for p in g["params"]]
    state = saved["state"]
    want = _OPT_STATE_KEYS[params["optimizer"]]
    if not isinstance(state, dict) or not set(state) <= set(range(len(tensors))):
        raise _container.bad("mlp training state", "its optimizer state names parameters the network does not have")
    for i, entry in state.items():
        p = tensors[i]
        if not isinstance(entry, dict) or set(entry) != want or not all(torch.is_tensor(v) for v in entry.values()):
            raise _container.bad("mlp training state", f"the optimizer state of parameter {i} is not {sorted(want)}")
        for key, v in entry.items():
            if key == "step":
                ok = v.shape == () and v.is_floating_point() and bool(torch.isfinite(v)) and float(v) >= 0
            else:
                ok = v.shape == p.shape and v.dtype == p.dtype
            if not ok:
                raise _container.bad("mlp training state", f"the optimizer's {key} of parameter {i} does not "
                                                           f"fit it (shape {tuple(v.shape)}, {v.dtype})")


class MLPModel(ContainerModel):
    """A fitted MLP: ``predict`` gives 0/1 labels (mlp) or values (mlp_regressor)."""

    kind = "mlp"

    def __init__(self, family: str, params: Mapping[str, Any], n_features: int, net):
        self.family = str(family)
        self.params = dict(params)
        self.n_features = int(n_features)
        self.net = net
        self.net.eval()

    def __repr__(self) -> str:
        return f"MLPModel(family={self.family!r}, n_features={self.n_features})"

    def memory_bytes(self) -> int:
        return int(sum(t.numel() * t.element_size() for t in self.net.state_dict().values()))

    def decision_function(self, X) -> np.ndarray:
        return decision_values(self.net, self._as_matrix(X), self.regression, overflow_nan=True)

    def _body(self) -> bytes:
        return _torch_bytes(self.net.state_dict())

    @classmethod
    def from_payload(cls, payload: bytes) -> "MLPModel":
        header, body = _container.unpack(payload, "mlp model")
        fam = EXTRA_FAMILIES.get(header.get("family"))
        if fam is None or fam.pattern != "sequential" or not isinstance(header.get("params"), dict):
            raise _container.bad("mlp model", "unknown family or parameters")
        params = fam.validate_params(header["params"])
        d = header.get("n_features")
        if isinstance(d, bool) or not isinstance(d, int) or d < 1:
            raise _container.bad("mlp model", "n_features")
        check_body_digest(header, body, "mlp model")
        state = _torch_load(body, "mlp model")
        torch = torch_module()
        if not isinstance(state, dict) or not all(torch.is_tensor(v) for v in state.values()):
            raise _container.bad("mlp model", "the weights are not a state dict")
        net = build_net(params, d)
        # names and shapes first: a tensor's shape is not its storage (an expanded tensor of a
        # few bytes can claim 10^9 values), so nothing reads the values of a tensor before it is
        # known to be one of this network's, whose size build_net bounds
        want = {k: tuple(v.shape) for k, v in net.state_dict().items()}
        if {k: tuple(v.shape) for k, v in state.items()} != want:
            raise _container.bad("mlp model", "the weights do not fit the network of its params")
        if not all(bool(torch.isfinite(v).all()) for v in state.values()):
            raise _container.bad("mlp model", "non-finite weights")
        net.load_state_dict(state, strict=True)
        return cls(fam.name, params, d, net)

    @classmethod
    def from_run(cls, run: MLPRun) -> "MLPModel":
        net = build_net(run.params, run.n_features)
        net.load_state_dict(run.net.state_dict())
        return cls(run.family.name, run.params, run.n_features, net)


register_loader(MLPModel.kind, MLPModel.from_payload)


# ------------------------------------------------------------------ the engine Trainer
class MLPTrainer(TrialAccessors):
    """Trains many MLP configurations over one train/validation split (engine.Trainer).

    ``run(iterations)`` advances every active, unfinished config by up to
    ``iterations`` *epochs*; a config is finished after its ``epochs`` parameter.
    Configs are trained one after another (each has its own network), so ``passes``
    counts config-epochs: every one reads the training rows once.
    """

    def __init__(self, family, X_train, y_train, X_val=None, y_val=None, *,
                 metric: Optional[str] = None):
        torch_module()
        self.family = _family(family)
        fam = self.family
        X, y, Xv, yv = train_val(fam, X_train, y_train, X_val, y_val, need_features=True)
        self.n, self.d = X.shape
        self.X_val, self.y_val = Xv, yv
        self.stats = merge_stats([partial_stats(X, y)], self.d)
        self._Xt, self._yt = as_tensors(X, y)
        self._std = None      # (stats key, standardised rows): see _standardized
        self.metric = choose_metric(fam, metric)
        self.passes = 0
        self._runs: Dict[int, MLPRun] = {}
        self._retired: Dict[int, MLPRun] = {}
        self._status: Dict[int, str] = {}
        self._val_cache: Dict[int, Tuple[int, np.ndarray]] = {}
        self.interrupt_check: Optional[Callable[[], None]] = None

    def add(self, trial_id: int, params: Mapping[str, Any]) -> None:
        if trial_id in self._runs:
            raise InvalidParameterError(f"Trial {trial_id} is already in the batch",
                                        hint="Use a new trial id for every configuration.")
        run = new_run(self.family, params, self.d, self.stats)
        self._retired.pop(trial_id, None)
        self._val_cache.pop(trial_id, None)
        self._runs[trial_id] = run
        self._status[trial_id] = "running"

    def remove(self, trial_id: int) -> None:
        self._check(trial_id, active_only=True)
        run = self._runs.pop(trial_id)
        run.opt = None                          # the optimizer state is not needed any more
        self._retired[trial_id] = run

    def active(self) -> List[int]:
        return list(self._runs)

    def _trial_record(self, trial_id: int) -> TrialRecord:
        """Status 'running', 'max_iter' (all epochs done) or 'diverged' (non-finite loss)."""
        run = self._check(trial_id)
        return TrialRecord(self._status[trial_id], run.epochs_done, run.params)

    def run(self, iterations: int) -> None:
        check_iterations(iterations)
        for tid, run in self._runs.items():
            for _ in range(iterations):
                if self._status[tid] != "running":
                    break
                loss = train_epoch(run, self._Xt, self._yt, epoch=run.epochs_done, shard_id=0,
                                   interrupt_check=self.interrupt_check, prepared=self._standardized(run))
                run.epochs_done += 1
                self.passes += 1
                if not math.isfinite(loss):
                    self._status[tid] = "diverged"
                elif run.epochs_done >= run.params["epochs"]:
                    self._status[tid] = "max_iter"
                if self.interrupt_check is not None:
                    self.interrupt_check()

    def score(self, trial_id: int) -> float:
        return validation_loss(self.metric, self.y_val, self._val_margins(trial_id))

    def metrics(self, trial_id: int) -> Dict[str, float]:
        return validation_metrics(self.family.report_metrics, self.metric, self.y_val, self._val_margins(trial_id))

    def model(self, trial_id: int) -> MLPModel:
        return MLPModel.from_run(self._check(trial_id))

    def run_state(self, trial_id: int) -> bytes:
        """Training state bytes of an active config: a checkpoint (and ``_sharded.visit`` input)."""
        return run_to_bytes(self._check(trial_id, active_only=True))

    def restore(self, trial_id: int, state: bytes) -> None:
        """Add a config from :meth:`run_state` bytes (a committed checkpoint).

        Continuing from the checkpoint gives bit for bit the weights of an uninterrupted
        run on the same rows (the epoch counter, optimizer moments and dropout
        generator are all in the state).
        """
        if trial_id in self._runs:
            raise InvalidParameterError(f"Trial {trial_id} is already in the batch",
                                        hint="Use a new trial id for every configuration.")
        run = run_from_bytes(state)
        if run.family.name != self.family.name or run.n_features != self.d:
            raise PrerequisiteStateError(
                f"The checkpoint is for model '{run.family.name}' with {run.n_features} "
                f"features; this trainer trains '{self.family.name}' with {self.d}",
                hint="Resume a checkpoint on the same group's data and model.")
        self._retired.pop(trial_id, None)
        self._val_cache.pop(trial_id, None)
        self._runs[trial_id] = run
        self._status[trial_id] = ("max_iter" if run.epochs_done >= run.params["epochs"]
                                  else "running")

    def fork(self, trial_id: int, params: Mapping[str, Any], parent_id: int, epochs: int) -> None:
        """Add ``trial_id`` continuing active ``parent_id``'s training state (after ``epochs``
        epochs) with ``params`` (:func:`fork_state`)."""
        parent = self._check(parent_id, active_only=True)
        check_fork(trial_id, parent_id, parent.epochs_done, epochs)
        self.restore(trial_id, fork_state(run_to_bytes(parent), params))

    # ------------------------------------------------------------ internals
    def _standardized(self, run: MLPRun):
        """The training rows standardised with ``run``'s statistics, kept across epochs and
        configurations (they share the trainer's statistics; a checkpoint's may differ)."""
        key = stats_key(run.net, run.regression)
        if self._std is None or self._std[0] != key:
            self._std = (key, standardize(run.net, self._Xt, self._yt, run.regression))
        return self._std[1]

    def _check(self, trial_id: int, active_only: bool = False) -> MLPRun:
        return find_trial(self._runs, self._retired, trial_id, active_only)

    def _val_margins(self, trial_id: int) -> np.ndarray:
        run = self._check(trial_id)
        hit = self._val_cache.get(trial_id)
        if hit is not None and hit[0] == run.visits:
            return hit[1]
        with np.errstate(over="ignore", invalid="ignore"):
            z = decision_values(run.net, self.X_val, run.regression)
        self._val_cache[trial_id] = (run.visits, z)
        return z
