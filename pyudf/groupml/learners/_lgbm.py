"""LightGBM gradient-boosted trees: the *sampling* access pattern (Kingpin section 2.2).

* :class:`LightGBMTrainer` (engine.Trainer): one ``lightgbm.Booster`` per config over
  the same rows; ``run(iterations)`` adds up to ``iterations`` boosting rounds to each
  (``Booster.update``, one tree per round), and the validation metrics are computed
  after every block from the raw scores.
* :class:`LightGBMModel`: stored as LightGBM's own model *text* inside groupml's model
  container (never pickle); the ``lightgbm`` loader is registered.
* :func:`train_lightgbm_distributed`: a group split across workers is trained with
  LightGBM's own data-parallel mode (``tree_learner='data'``, ``pre_partition``): one
  OS process per shard on loopback, histograms exchanged by LightGBM itself.
  :func:`train_lightgbm_rank` is what one rank runs; a worker backend runs it in a child
  process it can kill (:class:`RankProcess`, :func:`train_lightgbm_rank_isolated`).

Determinism: ``deterministic=True``, ``force_row_wise=True`` (no timing-based choice),
a fixed ``num_threads`` (:data:`NUM_THREADS`) and every random seed derived from ``seed``.
``lightgbm`` is imported lazily.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..interrupts import cancel_check_here
from ..errors import (ArrayLengthError, DataError, FeatureNotSupportedError,
                      InvalidParameterError, PrerequisiteStateError, UndefinedObjectError)
from ..validation import check_number
from . import _container
from ._extfamilies import EXTRA_FAMILIES, LearnerFamily
from ._lgbm_check import BLOCK_INTEGRATIONS, CHECK_TIMEOUT_S, OPTIONAL_INTEGRATIONS, CheckTimeout, ModelChecker
from ._lgbm_text import check_model_text
from ._metrics import validation_loss, validation_metrics
from ._data import as_data, check_iterations, choose_metric, train_val
from ._model import ContainerModel, body_digest, check_body_digest, register_loader
from ._trials import TrialAccessors, TrialRecord, find_trial

NUM_THREADS = 1
#: Seconds between two interrupt checks inside a block of boosting rounds.
CHECK_EVERY_S = 0.05
MAX_MODEL_TEXT = 1 << 30
_lgb_mod = None


def lgb_module():
    """The ``lightgbm`` module, imported on first use. Inside a PostgreSQL backend (``plpy``
    is loaded) it is imported without its optional integrations that are not imported yet:
    with them the import took 0.69 s of every new session's first LightGBM call, without
    0.13 s. They are blocked only during the import, so code of the session can still import
    pandas or scikit-learn itself; LightGBM then simply has no pandas input or sklearn API."""
    global _lgb_mod
    if _lgb_mod is None:
        blocked = [m for m in OPTIONAL_INTEGRATIONS if m not in sys.modules] if "plpy" in sys.modules else []
        for m in blocked:
            sys.modules[m] = None
        try:
            import lightgbm
        except ImportError:
            raise FeatureNotSupportedError(
                "Model 'lightgbm' needs LightGBM, which is not installed in groupml's Python",
                hint="Reinstall with: groupml install --extras lightgbm") from None
        finally:
            for m in blocked:
                if m in sys.modules and sys.modules[m] is None:
                    del sys.modules[m]
        _lgb_mod = lightgbm
    return _lgb_mod


def _family(name) -> LearnerFamily:
    fam = EXTRA_FAMILIES.get(name) if isinstance(name, str) else name
    if not isinstance(fam, LearnerFamily) or fam.pattern != "sampling":
        raise UndefinedObjectError(f"Unknown LightGBM model family {name!r}",
                                   hint="LightGBM families are lightgbm and lightgbm_regressor.")
    return fam


def lgb_params(family, params: Mapping[str, Any], *, num_threads: int = NUM_THREADS
               ) -> Dict[str, Any]:
    """LightGBM's parameter dict for validated groupml ``params`` (deterministic)."""
    fam = _family(family)
    p = fam.validate_params(params)
    return {
        "objective": "binary" if fam.kind == "classification" else "regression",
        "num_leaves": p["num_leaves"],
        "learning_rate": p["learning_rate"],
        "min_data_in_leaf": p["min_data_in_leaf"],
        "feature_fraction": p["feature_fraction"],
        "bagging_fraction": p["bagging_fraction"],
        "bagging_freq": 1 if p["bagging_fraction"] < 1.0 else 0,
        "lambda_l1": p["lambda_l1"],
        "lambda_l2": p["lambda_l2"],
        "max_depth": p["max_depth"],
        "max_bin": p["max_bin"],
        "seed": p["seed"],
        "deterministic": True,
        "force_row_wise": True,
        "num_threads": int(num_threads),
        "verbosity": -1,
        "feature_pre_filter": False,
    }


# ---------------------------------------------------------------------- model
class LightGBMModel(ContainerModel):
    """A fitted LightGBM model kept as its text; ``predict`` as the GLM models do."""

    kind = "lightgbm"

    def __init__(self, family: str, params: Mapping[str, Any], model_text: str):
        lgb = lgb_module()
        self.family = str(family)
        self.params = dict(params)
        self.model_text = str(model_text)
        self.booster = lgb.Booster(model_str=self.model_text)
        self.n_features = int(self.booster.num_feature())

    def __repr__(self) -> str:
        return f"LightGBMModel(family={self.family!r}, n_features={self.n_features})"

    def memory_bytes(self) -> int:
        # the text is kept; the booster takes about as much again plus a fixed cost per tree
        # and per feature (measured: 200,000 one-leaf trees of 10.5 MB text took 147 MB)
        return 2 * len(self.model_text) + 1024 * self.num_trees + 64 * self.n_features

    @property
    def num_trees(self) -> int:
        return int(self.booster.num_trees())

    def decision_function(self, X) -> np.ndarray:
        """Raw scores: log-odds (lightgbm) or predictions (lightgbm_regressor)."""
        X = self._as_matrix(X)
        return np.asarray(self.booster.predict(X, raw_score=True, num_threads=NUM_THREADS),
                          dtype=np.float64).reshape(-1)

    def _body(self) -> bytes:
        return self.model_text.encode("utf-8")

    def _saved(self, digest: str) -> None:
        _TRUSTED_BODIES.add(digest)                 # LightGBM's own text, or text checked before

    @classmethod
    def from_payload(cls, payload: bytes) -> "LightGBMModel":
        header, body = _container.unpack(payload, "lightgbm model")
        fam = EXTRA_FAMILIES.get(header.get("family"))
        if fam is None or fam.pattern != "sampling" or not isinstance(header.get("params"), dict):
            raise _container.bad("lightgbm model", "unknown family or parameters")
        params = fam.validate_params(header["params"])
        if len(body) > MAX_MODEL_TEXT or not body.startswith(b"tree\n"):
            raise _container.bad("lightgbm model", "the body is not LightGBM model text")
        check_body_digest(header, body, "lightgbm model")
        n_features = header.get("n_features")
        if isinstance(n_features, bool) or not isinstance(n_features, int) or not 1 <= n_features <= 1 << 24:
            raise _container.bad("lightgbm model", "n_features is not a feature count")
        check_in_child(body, n_features, digest=header["sha256"])     # the checksum just matched
        model = cls(fam.name, params, body.decode("utf-8"))
        if model.n_features != n_features:
            raise _container.bad("lightgbm model", "n_features does not match the trees")
        return model


register_loader(LightGBMModel.kind, LightGBMModel.from_payload)

# SHA-256 of the model texts this process made (LightGBM's model_to_string) or already checked
# in a child: only other texts pay for a check.
_TRUSTED_BODIES: set = set()
_CHECKER = None


def _checker():
    """This process's checking child (:mod:`groupml.learners._lgbm_check`), made on first use."""
    global _CHECKER
    if _CHECKER is None:
        _CHECKER = ModelChecker(_python_executable(), _child_env())
    return _CHECKER


def check_in_child(body: bytes, n_features: int, digest: Optional[str] = None) -> None:
    """Raise ModelFormatError unless ``body`` (LightGBM model text) passes the structural
    check of :func:`groupml.learners._lgbm_text.check_model_text` and this process's checking
    child (:mod:`groupml.learners._lgbm_check`) loads it and predicts probe rows with it
    (zeros, ones, NaN, +-1e30, 26 random rows; fewer for very wide models, at most 4M
    values); texts made or checked by this process before are trusted without a check
    (``_TRUSTED_BODIES``). ``digest``: the body's SHA-256 when the caller has it already."""
    from ..errors import ModelFormatError

    digest = digest or body_digest(body)
    if digest in _TRUSTED_BODIES:
        return
    interrupt_check = cancel_check_here()
    # paths the probes miss: LightGBM would read outside its arrays
    check_model_text(body, n_features, interrupt_check)
    hint = "Use the model as train_groups or learn_over_groups stored it; a changed model cannot be used."
    try:
        why = _checker().check(body, n_features, interrupt_check)
    except CheckTimeout:
        raise ModelFormatError(f"The lightgbm model could not be checked: loading it took over "
                               f"{CHECK_TIMEOUT_S:.0f} s", hint=hint) from None
    if why is not None:
        raise ModelFormatError(f"The lightgbm model is damaged: {why}", hint=hint)
    _TRUSTED_BODIES.add(digest)


# ---------------------------------------------------------------------- trainer
class _Booster:
    __slots__ = ("params", "booster", "rounds", "status", "version")

    def __init__(self, params, booster):
        self.params, self.booster = params, booster
        self.rounds, self.status, self.version = 0, "running", 0


class LightGBMTrainer(TrialAccessors):
    """Trains many LightGBM configurations over one train/validation split (engine.Trainer).

    ``run(iterations)`` adds up to ``iterations`` boosting rounds (trees) to every
    active, unfinished config; a config is finished after ``num_boost_round`` rounds
    ('max_iter') or when no tree can split any more ('converged').  ``passes`` counts
    config-rounds (each reads the training histograms once).
    """

    def __init__(self, family, X_train, y_train, X_val=None, y_val=None, *,
                 metric: Optional[str] = None):
        self.family = _family(family)
        fam = self.family
        self.X, self.y, self.X_val, self.y_val = train_val(fam, X_train, y_train, X_val, y_val,
                                                           need_features=True)
        X = self.X
        self.n, self.d = X.shape
        self.metric = choose_metric(fam, metric)
        self.passes = 0
        self._cfgs: Dict[int, _Booster] = {}
        self._retired: Dict[int, _Booster] = {}
        self._val_cache: Dict[int, Tuple[int, int, np.ndarray]] = {}  # version, trees scored, sums
        self.interrupt_check: Optional[Callable[[], None]] = None

    def add(self, trial_id: int, params: Mapping[str, Any]) -> None:
        if trial_id in self._cfgs:
            raise InvalidParameterError(f"Trial {trial_id} is already in the batch",
                                        hint="Use a new trial id for every configuration.")
        lgb = lgb_module()
        p = self.family.validate_params(params)
        lp = lgb_params(self.family, p)
        ds = lgb.Dataset(self.X, label=self.y, params=lp, free_raw_data=False)
        # the rounds it will run, as lgb.train records them: the model text's parameters said
        # num_iterations 100 (LightGBM's default) from this path and the real count from others
        booster = lgb.Booster(params=dict(lp, num_iterations=int(p["num_boost_round"])), train_set=ds)
        self._retired.pop(trial_id, None)
        self._val_cache.pop(trial_id, None)
        self._cfgs[trial_id] = _Booster(p, booster)

    def remove(self, trial_id: int) -> None:
        cfg = self._check(trial_id, active_only=True)
        booster = cfg.booster
        # keep only the trees: the training Dataset and its histograms are released
        cfg.booster = lgb_module().Booster(model_str=booster.model_to_string())
        booster.free_dataset()
        del self._cfgs[trial_id]
        self._retired[trial_id] = cfg

    def active(self) -> List[int]:
        return list(self._cfgs)

    def _trial_record(self, trial_id: int) -> TrialRecord:
        b = self._check(trial_id)
        return TrialRecord(b.status, b.rounds, b.params)

    def run(self, iterations: int) -> None:
        check_iterations(iterations)
        last = time.perf_counter()
        for cfg in self._cfgs.values():
            for _ in range(iterations):
                if cfg.status != "running":
                    break
                finished = cfg.booster.update()
                self.passes += 1
                cfg.version += 1
                if finished:
                    cfg.status = "converged"
                else:
                    cfg.rounds += 1
                    if cfg.rounds >= cfg.params["num_boost_round"]:
                        cfg.status = "max_iter"
                # within a block too (it may be a million rounds), at most every CHECK_EVERY_S:
                # a round on a small group takes tens of microseconds, a check about ten
                if self.interrupt_check is not None and time.perf_counter() - last >= CHECK_EVERY_S:
                    self.interrupt_check()
                    last = time.perf_counter()
            if self.interrupt_check is not None:
                self.interrupt_check()
                last = time.perf_counter()

    def score(self, trial_id: int) -> float:
        return validation_loss(self.metric, self.y_val, self._val_margins(trial_id))

    def metrics(self, trial_id: int) -> Dict[str, float]:
        return validation_metrics(self.family.report_metrics, self.metric, self.y_val, self._val_margins(trial_id))

    def model(self, trial_id: int) -> LightGBMModel:
        cfg = self._check(trial_id)
        return LightGBMModel(self.family.name, cfg.params, cfg.booster.model_to_string())

    def _check(self, trial_id: int, active_only: bool = False) -> _Booster:
        return find_trial(self._cfgs, self._retired, trial_id, active_only)

    def _val_margins(self, trial_id: int) -> np.ndarray:
        """Raw validation scores of the config's current model.

        Scored incrementally: only the trees added since the last call are evaluated and
        added to the cached sums (scoring every tree again after every block made the
        validation cost quadratic in the rounds: 0.25 s of a 0.8 s fit of 300 rounds).
        Trees are added one at a time, in order, from zero -- the order LightGBM's own
        predict sums them in -- so the margins are bit for bit those of a full predict.
        """
        cfg = self._check(trial_id)
        hit = self._val_cache.get(trial_id)
        if hit is not None and hit[0] == cfg.version:
            return hit[2]
        trees = cfg.booster.current_iteration()
        z = extend_margins(cfg.booster, self.X_val, None if hit is None else hit[2], 0 if hit is None else hit[1],
                           trees)
        self._val_cache[trial_id] = (cfg.version, trees, z)
        return z


def extend_margins(booster, X: np.ndarray, margins: Optional[np.ndarray], scored: int, trees: int,
                   num_threads: int = NUM_THREADS) -> np.ndarray:
    """Raw scores of the first ``trees`` trees on ``X``, from ``margins`` -- those of the
    first ``scored`` (None: nothing scored yet) -- plus the trees in between, one at a time
    in order from zero: the order LightGBM's own predict sums them in, so the result is bit
    for bit a full predict's. ``margins`` is not changed."""
    if margins is None or scored > trees:
        z, scored = np.zeros(X.shape[0]), 0
    else:
        z = margins.copy()
    for i in range(scored, trees):
        z += np.asarray(booster.predict(X, raw_score=True, start_iteration=i, num_iteration=1,
                                        num_threads=num_threads), dtype=np.float64).reshape(-1)
    return z


def train_lightgbm(family, X, y, params: Mapping[str, Any],
                   num_boost_round: Optional[int] = None,
                   interrupt_check: Optional[Callable[[], None]] = None) -> str:
    """Single-node training of one config; returns the model text. ``interrupt_check`` is
    called after every round (a worker's cancel check)."""
    lgb = lgb_module()
    fam = _family(family)
    p = fam.validate_params(params)
    X, y = as_data(X, y, "training data")
    y = fam.prepare_labels(y, "the training data")
    rounds = p["num_boost_round"] if num_boost_round is None else check_number(
        num_boost_round, "num_boost_round", "LightGBM training", ge=1, integer=True)
    lp = lgb_params(fam, p)
    callbacks = [] if interrupt_check is None else [lambda env: interrupt_check()]
    booster = lgb.train(lp, lgb.Dataset(X, label=y, params=lp), num_boost_round=rounds, callbacks=callbacks)
    return booster.model_to_string()


# ---------------------------------------------------------------------- distributed
def free_ports(n: int, host: str = "127.0.0.1") -> List[int]:
    """``n`` distinct TCP ports free on ``host`` right now (bound, read and released;
    ``host=""``: on every interface of this machine)."""
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((host, 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def distributed_params(family, params: Mapping[str, Any], machines: Sequence[str], rank: int,
                       *, timeout_minutes: int = 1) -> Dict[str, Any]:
    """LightGBM parameters of worker ``rank`` for data-parallel training over ``machines``."""
    port = int(str(machines[rank]).rsplit(":", 1)[1])
    lp = lgb_params(family, params)
    lp.update({
        "tree_learner": "data",
        "num_machines": len(machines),
        "machines": ",".join(machines),
        "local_listen_port": port,
        "pre_partition": True,
        "time_out": int(timeout_minutes),
    })
    return lp


def train_lightgbm_rank(family, X, y, params: Mapping[str, Any], num_boost_round: int,
                        machines: Sequence[str], rank: int, *, timeout_minutes: int = 1) -> str:
    """What one worker runs: its shard, LightGBM's network, the shared model's text.

    Every rank returns the same model; ``machines`` lists ``host:port`` of all ranks.
    """
    lgb = lgb_module()
    fam = _family(family)
    X, y = as_data(X, y, f"shard {rank}")
    y = fam.prepare_labels(y, f"shard {rank}")
    lp = distributed_params(fam, params, machines, rank, timeout_minutes=timeout_minutes)
    try:
        with _hold_housekeeping_signals():
            booster = lgb.train(lp, lgb.Dataset(X, label=y, params=lp),
                                num_boost_round=int(num_boost_round))
        return booster.model_to_string()
    finally:
        try:
            lgb.basic._safe_call(lgb.basic._LIB.LGBM_NetworkFree())
        except Exception:  # the network may already be down; nothing to release then
            pass


# Signals a PostgreSQL backend catches for housekeeping, held back while LightGBM's network
# runs. SIGINT (cancel), SIGTERM and SIGQUIT stay deliverable.
HELD_SIGNALS = ("SIGUSR1", "SIGALRM", "SIGHUP")


@contextlib.contextmanager
def _hold_housekeeping_signals():
    """Housekeeping signals held back (pending, delivered afterwards) while LightGBM's network runs.

    LightGBM sets a receive timeout on its sockets (``time_out``), and a recv with a timeout
    is never restarted after a signal handler ran (signal(7)), whatever SA_RESTART says:
    LightGBM then fails with "Socket recv error, Interrupted system call" and the whole
    distributed job dies. A PostgreSQL backend catches signals that have nothing to do with
    the rank:

    * SIGALRM -- PostgreSQL 15 arms the interval timer (the idle statistics flush, 10 s)
      when the backend goes idle between two tasks, and only disarms it lazily: the
      alarm can arrive seconds into the next task;
    * SIGUSR1 -- process signals, e.g. the shared-invalidation catch-up other sessions'
      catalog writes send;
    * SIGHUP -- a configuration reload.

    Their handlers run when the mask is restored, so a statement_timeout that fell due
    meanwhile fires then (LightGBM's own ``time_out`` bounds the rank). SIGINT, SIGTERM and
    SIGQUIT stay deliverable, so a cancel still stops the rank. Outside the main thread (or
    without pthread_sigmask) nothing is changed."""
    import signal
    import threading

    held = {getattr(signal, name) for name in HELD_SIGNALS if hasattr(signal, name)}
    if not held or not hasattr(signal, "pthread_sigmask") or threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _encode_job(family: str, X, y, params, rounds: int, machines, rank: int,
                minutes: int) -> bytes:
    """The stdin of one worker process: a JSON header and an npz archive (no pickle)."""
    buf = io.BytesIO()
    np.savez(buf, X=np.ascontiguousarray(X, dtype=np.float64),
             y=np.ascontiguousarray(y, dtype=np.float64))
    return _container.pack({"family": family, "params": params, "rounds": int(rounds),
                            "machines": list(machines), "rank": int(rank),
                            "timeout_minutes": int(minutes)}, buf.getvalue())


def _worker_main() -> int:
    """Entry point of ``python -m groupml.learners._lgbm``: one rank of a distributed run."""
    header, body = _container.unpack(sys.stdin.buffer.read(), "distributed LightGBM job")
    with np.load(io.BytesIO(body), allow_pickle=False) as npz:
        X, y = npz["X"], npz["y"]
    text = train_lightgbm_rank(header["family"], X, y, header["params"], header["rounds"],
                               header["machines"], header["rank"],
                               timeout_minutes=header["timeout_minutes"])
    if header["rank"] == 0:
        sys.stdout.buffer.write(text.encode("utf-8"))
    sys.stdout.flush()
    return 0


# ---------------------------------------------------------------- ranks in a child process
# A rank inside a PostgreSQL backend cannot be stopped while it is in LightGBM's C code: when a
# peer dies while the network is set up, LightGBM's listener thread loops on a recv that keeps
# returning 0 (end of stream), forever and at full CPU, and neither LightGBM's time_out nor a
# cancel or pg_terminate_backend reaches it. So a worker backend runs its ranks in a child
# process it can kill: one long-lived child per backend (the imports are paid once) that
# reads jobs from a pipe and answers on another; a cancel, or a child that dies, costs a new
# child for the next job.

def _read_exact(fd: int, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError("the rank process closed its pipe")
        buf += chunk
    return buf


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(8, "big") + payload


def _rank_server_main(job_fd: int, result_fd: int) -> int:
    """The child's loop: a framed job in (``_encode_job``), a framed answer out:
    ``b"T" + model text`` or ``b"E" + the error message``."""
    while True:
        try:
            size = int.from_bytes(_read_exact(job_fd, 8), "big")
        except EOFError:
            return 0
        header, body = _container.unpack(_read_exact(job_fd, size), "distributed LightGBM job")
        try:
            with np.load(io.BytesIO(body), allow_pickle=False) as npz:
                X, y = npz["X"], npz["y"]
            text = train_lightgbm_rank(header["family"], X, y, header["params"], header["rounds"],
                                       header["machines"], header["rank"],
                                       timeout_minutes=header["timeout_minutes"])
            answer = b"T" + text.encode("utf-8")
        except Exception as exc:  # reported to the backend, which raises it there
            answer = b"E" + str(exc).encode("utf-8", "replace")
        _write_all(result_fd, _frame(answer))


_RANK_SERVER_BOOT = BLOCK_INTEGRATIONS + (
    "from groupml.learners._lgbm import _rank_server_main\n"
    "sys.exit(_rank_server_main(int(sys.argv[1]), int(sys.argv[2])))\n"
)


class RankProcess:
    """The long-lived child that runs this process's LightGBM ranks (see above)."""

    def __init__(self):
        import tempfile

        job_r, self._job_w = os.pipe()
        self._res_r, res_w = os.pipe()
        self._err = tempfile.TemporaryFile()      # a file, not a pipe nobody drains between jobs
        try:
            self.proc = subprocess.Popen([_python_executable(), "-c", _RANK_SERVER_BOOT, str(job_r), str(res_w)],
                                         pass_fds=(job_r, res_w), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=self._err, env=_child_env())
        finally:
            os.close(job_r)
            os.close(res_w)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def run(self, job: bytes, interrupt_check: Optional[Callable[[], None]] = None, poll_s: float = 0.2) -> str:
        """Send one job and wait for its answer, calling ``interrupt_check`` every ``poll_s``
        seconds; whatever it raises (a cancel) kills the child first."""
        import select

        try:
            _write_all(self._job_w, _frame(job))
            while not select.select([self._res_r], [], [], poll_s)[0]:
                if interrupt_check is not None:
                    interrupt_check()
            size = int.from_bytes(_read_exact(self._res_r, 8), "big")
            answer = _read_exact(self._res_r, size)
        except EOFError:
            err = self._stderr()
            self.close()
            raise PrerequisiteStateError(f"The LightGBM rank process exited: {_last_line(err)}",
                                         hint="Retry; the next job starts a new rank process.") from None
        except BaseException:
            self.close()
            raise
        if answer[:1] != b"T":
            raise PrerequisiteStateError(f"Distributed LightGBM failed: {answer[1:].decode('utf-8', 'replace')}",
                                         hint="Check that the loopback ports are usable and retry.")
        return answer[1:].decode("utf-8")

    def _stderr(self) -> bytes:
        try:
            self._err.seek(0)
            return self._err.read() or b""
        except (OSError, ValueError):
            return b""

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)
        for fd in (self._job_w, self._res_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._job_w = self._res_r = -1
        self._err.close()


_RANK_PROCESS: Optional[RankProcess] = None


def train_lightgbm_rank_isolated(family, X, y, params: Mapping[str, Any], num_boost_round: int,
                                 machines: Sequence[str], rank: int, *, timeout_minutes: int = 1,
                                 interrupt_check: Optional[Callable[[], None]] = None) -> str:
    """:func:`train_lightgbm_rank` in this process's rank child (started on first use, started
    again after a cancel or a crash); ``interrupt_check`` runs while it trains."""
    global _RANK_PROCESS
    fam = _family(family)
    X, y = as_data(X, y, f"shard {rank}")
    y = fam.prepare_labels(y, f"shard {rank}")
    job = _encode_job(fam.name, X, y, fam.validate_params(params), num_boost_round, machines, rank,
                      timeout_minutes)
    if _RANK_PROCESS is None or not _RANK_PROCESS.alive():
        _RANK_PROCESS = RankProcess()
    server = _RANK_PROCESS
    try:
        return server.run(job, interrupt_check)
    finally:
        if not server.alive():
            _RANK_PROCESS = None


# A worker needs numpy and lightgbm only: hiding the optional packages lightgbm probes at
# import time (scikit-learn, pandas, dask, ...) cuts a worker's start from ~2 s to ~0.5 s.
_WORKER_BOOT = BLOCK_INTEGRATIONS + (
    "from groupml.learners._lgbm import _worker_main\n"
    "sys.exit(_worker_main())\n"
)


def _python_executable() -> str:
    """A Python interpreter for worker processes.

    Inside PostgreSQL ``sys.executable`` is not Python; then the interpreter of the
    virtualenv that holds numpy (groupml's venv) is used, else ``sys.prefix``'s.
    """
    exe = sys.executable or ""
    if os.path.basename(exe).startswith("python") and os.path.exists(exe):
        return exe
    roots = [os.path.abspath(os.path.join(os.path.dirname(np.__file__), *[".."] * 4)), sys.prefix]
    for root in roots:
        for name in ("python3", "python"):
            cand = os.path.join(root, "bin", name)
            if os.path.exists(cand):
                return cand
    raise FeatureNotSupportedError("No Python interpreter found to start LightGBM workers",
                                   hint="Run distributed LightGBM from worker backends instead.")


def _child_env() -> Dict[str, str]:
    """The parent's environment with its import path, so workers import the same packages."""
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = [pkg_root] + [p for p in sys.path if p and os.path.isdir(p) and p != pkg_root]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


def train_lightgbm_distributed(shards: Sequence[Tuple[Any, Any]], params: Mapping[str, Any],
                               num_boost_round: Optional[int] = None, *, family="lightgbm",
                               timeout: float = 120.0, host: str = "127.0.0.1") -> str:
    """Data-parallel LightGBM over ``shards`` (one OS process each); the model text.

    LightGBM's own distributed mode does the work (``tree_learner='data'``: every
    process builds histograms of its shard, LightGBM reduces them over its sockets).
    Each rank is a fresh Python process (:data:`_WORKER_BOOT`) fed its shard as
    an npz archive on stdin (spawn semantics without multiprocessing's pickling and
    ``__main__`` re-import, so it also works from inside a PostgreSQL backend).
    ``timeout`` (seconds) bounds the whole run; LightGBM's socket ``time_out`` is set
    from it too, and every process still running at the deadline is killed.
    """
    fam = _family(family)
    p = fam.validate_params(params)
    timeout = check_number(timeout, "timeout", "distributed LightGBM", gt=0)
    if not isinstance(shards, (list, tuple)) or len(shards) < 1:
        raise InvalidParameterError("The 'shards' value of distributed LightGBM must be a "
                                    "non-empty list of (X, y) pairs",
                                    hint="Pass one (X, y) pair per worker.")
    data, d = [], None
    for i, pair in enumerate(shards):
        X, y = as_data(pair[0], pair[1], f"shard {i}")
        if X.shape[0] == 0:
            raise DataError(f"Shard {i} has no rows",
                            hint="Every worker of a distributed LightGBM run needs rows.")
        if d is not None and X.shape[1] != d:
            raise ArrayLengthError(f"Shard {i} has {X.shape[1]} features; shard 0 has {d}",
                                   hint="Every shard of a group holds the same feature columns.")
        d = X.shape[1]
        data.append((X, fam.prepare_labels(y, f"shard {i}")))
    rounds = p["num_boost_round"] if num_boost_round is None else check_number(
        num_boost_round, "num_boost_round", "distributed LightGBM", ge=1, integer=True)
    if len(data) == 1:
        return train_lightgbm(fam, data[0][0], data[0][1], p, rounds)
    machines = [f"{host}:{port}" for port in free_ports(len(data))]
    minutes = max(1, math.ceil(timeout / 60.0))
    exe = _python_executable()
    env = _child_env()
    procs, outs, threads = [], [], []
    deadline = time.monotonic() + timeout
    try:
        for r, (X, y) in enumerate(data):
            job = _encode_job(fam.name, X, y, p, rounds, machines, r, minutes)
            proc = subprocess.Popen([exe, "-c", _WORKER_BOOT], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            procs.append((proc, job))
        # feed every rank first (they block on each other while connecting), then collect
        for proc, job in procs:
            t = threading.Thread(target=_feed, args=(proc, job, outs), daemon=True)
            t.start()
            threads.append(t)
        # wait for all ranks; stop early when one fails (its peers would wait for it)
        while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
            if any(proc.returncode not in (0, None) for proc, _, _ in list(outs)):
                break
            threads[0].join(0.05) if threads[0].is_alive() else time.sleep(0.05)
    finally:
        timed_out = any(t.is_alive() for t in threads)
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(10)
        for t in threads:
            t.join(10)
    by_rank = {id(proc): r for r, (proc, _) in enumerate(procs)}
    results = {by_rank[id(proc)]: (proc.returncode, out, err) for proc, out, err in outs}
    errors = [f"worker {r}: {_last_line(err)}"
              for r, (rc, out, err) in sorted(results.items()) if rc not in (0, -9)]
    if errors:
        raise PrerequisiteStateError("Distributed LightGBM failed: " + "; ".join(errors),
                                     hint="Check that the loopback ports are usable and retry.")
    if timed_out or len(results) < len(procs) or any(rc != 0 for rc, _, _ in results.values()):
        raise PrerequisiteStateError(
            f"Distributed LightGBM did not finish within {timeout:g} s",
            hint="Raise the timeout, or check that the loopback ports are usable.")
    return results[0][1].decode("utf-8")


def _last_line(err: bytes) -> str:
    lines = err.decode("utf-8", "replace").strip().splitlines()
    return lines[-1] if lines else "exited without a message"


def _feed(proc, job: bytes, outs: list) -> None:
    out, err = proc.communicate(job)
    outs.append((proc, out, err))


if __name__ == "__main__":
    sys.exit(_worker_main())
