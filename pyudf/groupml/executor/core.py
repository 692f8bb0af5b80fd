"""Types, codecs and tables every part of the grouped executor shares (no plpy).

* the request checks of a fit (:func:`validate_any`, :func:`pattern_of`, :func:`check_strategy`)
  and the strategies run per access pattern (:data:`PATTERN_STRATEGIES`);
* the search of a group over any trainer (:func:`precheck`, :func:`fit_with_trainer`);
* what the tasks of one group carry (:class:`GroupCtx`), waiting for a task's result under
  the run's abort flag (:func:`await_result`, :class:`Aborted`);
* the validation scoring and the per-trial bookkeeping of the coordinator-side trainers
  (:class:`ScoredTrainer`) and their checkpoint codec (:func:`save_configs`, :func:`load_configs`);
* the wire codecs of worker results: the MLP's standardisation moments (:func:`pack_stats`,
  :func:`unpack_stats`) and a whole-group search (:func:`pack_fit`, :func:`unpack_fit`);
* the table of strategies: each trainer module registers its trainers by (access pattern,
  task mode) and its checkpoint formats (:func:`register_trainer`, :func:`trainer_for`,
  :func:`register_checkpoint_format`, :func:`check_checkpoint_models`).

Every other executor module imports from here; this module imports no other of them.
"""

from __future__ import annotations

import json
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import FeatureNotSupportedError, InvalidParameterError, PrerequisiteStateError
from ..fitting import FitResult, budget_cap, finite, json_default, parse_options, plan_search, search_and_select
from ..learners import (TrialAccessors, TrialRecord, access_pattern, as_data, check_lgbm_text, find_trial,
                        get_learner_family, merge_stats, mlp, pack_container, partial_stats, unpack_container,
                        validation_loss, validation_metrics)
from ..search import search_budget
from ..validation import check_choice

# the strategies the executor runs for each access pattern (``auto`` chooses among them)
PATTERN_STRATEGIES = {"algebraic": ("grouped", "gtp", "mtp", "dp"), "sequential": ("grouped", "gtp", "mtp", "dp"),
                      "sampling": ("grouped", "gtp", "mtp", "dp")}


class Aborted(Exception):
    """The run is being stopped (another group failed, or the coordinator was cancelled)."""


# ------------------------------------------------------------------ request validation
def validate_any(model, search: dict, options: dict, options_owner: str = "train_groups options"):
    """:func:`groupml.fitting.validate_request` for every learner family (GLM, MLP, LightGBM)."""
    family = get_learner_family(model)
    spec = plan_search(family, search)
    opts = parse_options(options, family, options_owner)
    return family, spec, opts


def pattern_of(family) -> str:
    return access_pattern(family)


#: the strategies run only when named, and the access patterns they run for
EXPLICIT_PATTERNS = {"mop": ("sequential", "algebraic")}


def check_strategy(pattern: str, strategy: str, model: str) -> None:
    """Refuse a strategy the executor does not run for the model's access pattern."""
    allowed = PATTERN_STRATEGIES[pattern] + tuple(s for s, pats in EXPLICIT_PATTERNS.items() if pattern in pats)
    if strategy != "auto" and strategy not in allowed:
        raise FeatureNotSupportedError(
            f"The 'strategy' value of train_groups must be one of auto, {', '.join(allowed)} for "
            f"model '{model}' ({pattern} pattern); got '{strategy}'",
            hint=f"The executor runs {', '.join(allowed)} for the {pattern} pattern; 'auto' picks the cheapest "
                 f"by the planner's estimates (see explain_train_groups).")


def search_slots(spec, family) -> int:
    if spec.slots is not None:
        return int(spec.slots)
    return max(1, int(search_budget(spec, max_iter=budget_cap(spec.to_dict().get("space", {}), family)).in_flight))


# ------------------------------------------------------------------ search over a trainer
def precheck(family, *, n_train: int, n_val: int, n_pos: int, n_skipped: int, d: int, y_val):
    """FitResult for a group that cannot be trained (no rows, too small, one class), else None."""
    base = dict(family=family.name, n_skipped=n_skipped, n_features=d)
    n = n_train + n_val
    if n == 0:
        return FitResult(status="no_rows", message="every row had a NULL, NaN or infinite label or feature", **base)
    family.prepare_labels(y_val, "the group's rows")
    base.update(n_train=n_train, n_validation=n_val)
    if n_train < 2 or n_val < 1:
        return FitResult(status="too_small", message=(
            f"the group has {n} usable rows: {n_train} for training and {n_val} for validation; "
            f"need at least 2 and 1"), **base)
    if family.kind == "classification" and (n_pos == 0 or n_pos == n_train):
        return FitResult(status="single_class", message=(
            f"every training row of the group has label {1.0 if n_pos else 0.0:g}; a classifier needs both "
            f"classes"), **base)
    return None


def fit_with_trainer(trainer, family, spec, *, n_train: int, n_val: int, n_skipped: int, d: int,
                     on_epoch=None, interrupt_check=None, pattern: str = "", checkpoint=None, resume=None,
                     plan: Optional[Dict[str, Any]] = None, requests: Optional[Callable] = None):
    """Run the search of ``spec`` on ``trainer`` (any engine.Trainer); the group's FitResult.

    ``plan``: the batch plan (``slots``, ``seconds``; GLMs: :func:`groupml.fitting.plan_group`);
    by default the spec's slots or its budget's configs in flight, with no estimate."""
    base = dict(family=family.name, n_skipped=n_skipped, n_features=d, n_train=n_train, n_validation=n_val)
    if plan is None:
        plan = {"slots": search_slots(spec, family), "seconds": None, "pattern": pattern}
    return search_and_select(trainer, spec, plan, base, on_epoch=on_epoch, interrupt_check=interrupt_check,
                             checkpoint=checkpoint, resume=resume, requests=requests)


# ------------------------------------------------------------------ codec: a whole-group search
FIT_FIELDS = ("status", "family", "params", "metric", "score", "metrics", "n_train", "n_validation", "n_skipped",
              "n_features", "trials", "message", "passes", "seconds", "slots", "mean_batch", "plan")


def pack_fit(res, events: List[list]) -> bytes:
    """A worker's FitResult and its epoch reports as one container (read by :func:`unpack_fit`)."""
    header = finite({k: getattr(res, k) for k in FIT_FIELDS})
    header["events"] = events
    header = json.loads(json.dumps(header, default=json_default))
    return pack_container(header, res.model or b"")


def unpack_fit(blob: bytes):
    """(FitResult, epoch reports) of a :func:`pack_fit` container."""
    header, body = unpack_container(blob, "train_groups worker result")
    events = header.pop("events", [])
    return FitResult(model=body or None, **{k: header.get(k) for k in FIT_FIELDS}), events


# ------------------------------------------------------------------ codec: the MLP's moments
def pack_stats(X: np.ndarray, y: np.ndarray) -> bytes:
    """The shard's mergeable moments (:func:`groupml.learners.partial_stats`) as exact
    little-endian float8."""
    X, y = as_data(X, y, "shard")
    s = partial_stats(X, y)
    return np.concatenate([[float(s["n"]), s["my"], s["m2y"]], s["mx"], s["m2x"]]).astype("<f8").tobytes()


def unpack_stats(blob: bytes, d: int) -> Dict[str, Any]:
    a = np.frombuffer(blob, dtype="<f8").astype(np.float64)
    return {"n": int(a[0]), "my": float(a[1]), "m2y": float(a[2]), "mx": a[3:3 + d].copy(),
            "m2x": a[3 + d:3 + 2 * d].copy()}


# ------------------------------------------------------------------ one group's tasks
def await_result(fut, abort, what: str = "task"):
    """A future's result, polling the run's abort flag (another group failed or a cancel)."""
    while True:
        if abort is not None and abort.is_set():
            raise Aborted()
        try:
            return fut.result(timeout=0.25)
        except FutureTimeout:
            continue


class GroupCtx:
    """What every task of one group carries: pool, snapshot, group, shards."""

    def __init__(self, pool, *, snapshot_id: int, group_no: int, group_key: str, d: int, shards: Sequence[tuple],
                 mem_mb: float, abort=None, replicas: int = 1, progress: Optional[Callable[[str], None]] = None,
                 holders: Optional[Sequence[Sequence[int]]] = None,
                 val_holders: Optional[Sequence[Sequence[int]]] = None):
        self.pool, self.snapshot_id, self.group_no, self.group_key = pool, snapshot_id, group_no, group_key
        self.d, self.shards, self.mem_mb, self.abort = d, list(shards), mem_mb, abort
        self.replicas = int(replicas)     # workers holding a copy of each shard (model hopper parallelism)
        # a group spread over nodes: the workers holding each shard (its placements), and each
        # part of the validation rows (scored where they live); None: any worker reads any shard
        self.holders = [list(h) for h in holders] if holders else None
        self.val_holders = [list(h) for h in val_holders] if val_holders else None
        self.progress = progress          # progress(line): where the group's training is, between commits
        self.stops: Optional[Callable[[], set]] = None   # trial ids other sessions asked to stop (MOP)

    def request(self, s: int, **extra) -> str:
        return json.dumps(dict({"snapshot": self.snapshot_id, "group_no": self.group_no,
                                "pieces": self.shards[s][3], "d": self.d, "mem_mb": self.mem_mb}, **extra))

    def meta(self, s: int, kind: str, pass_no: int, trials: List[int]) -> Dict[str, Any]:
        w, start, rows, _ = self.shards[s]
        return {"group_key": self.group_key, "kind": kind, "pass": pass_no, "shard": s, "row_start": start,
                "n_rows": rows, "trials": list(trials)}


def shard_stats(ctx: GroupCtx, op: str = "mlp_stats") -> Dict[str, Any]:
    """The standardisation moments of a split group: one ``op`` task per shard (``mlp_stats``;
    ``glm_stats``, the same moments without loading torch), merged in shard order (as
    :func:`groupml.learners.train_sharded` does). On the nodes (``ctx.holders``) a shard's task
    runs on a live holder of it, and moves to another one when its worker is lost."""
    from .pool import NodeLostError, WorkerLostError

    def holders(s: int) -> List[int]:
        return list(ctx.holders[s]) if ctx.holders else [ctx.shards[s][0]]

    def submit(s: int, w: int):
        return ctx.pool.submit(w, ctx.request(s, op=op), b"", ctx.meta(s, "stats", 0, []), fn="task")

    futs = []
    for s in range(len(ctx.shards)):
        w = next((x for x in holders(s) if ctx.pool.alive(x)), holders(s)[0])
        futs.append((s, [w], submit(s, w)))
    parts = []
    for s, tried, fut in futs:
        while True:
            try:
                parts.append(unpack_stats(await_result(fut, ctx.abort), ctx.d))
                break
            except WorkerLostError as exc:
                left = [x for x in holders(s) if x not in tried and ctx.pool.alive(x)]
                if type(exc) is not WorkerLostError or ctx.pool.alive(tried[-1]):
                    raise
                if not left and ctx.holders:
                    raise NodeLostError.of(f"partition(s) {s}", ctx.group_key, exc.message) from None
                if not left:
                    raise
                tried.append(left[0])
                fut = submit(s, left[0])
    return merge_stats(parts, ctx.d)


# ------------------------------------------------------------------ coordinator-side trainers
class ScoredTrainer(TrialAccessors):
    """Validation scoring and per-trial bookkeeping shared by the coordinator-side trainers:
    ``_cfgs`` (active) and ``_retired`` map a trial id to its config dict (``params``,
    ``status``, ``done``, ``version``, ...); a subclass computes ``_compute_margins(config)``."""

    def _init_scoring(self, family, X_val, y_val, metric):
        fam = family
        self.X_val = np.ascontiguousarray(X_val, dtype=np.float64)
        self.y_val = fam.prepare_labels(y_val, "the validation data")
        self.metric = check_choice(metric if metric is not None else fam.default_metric, "metric", fam.owner,
                                   fam.metric_names)
        self._val_cache: Dict[int, tuple] = {}

    def score(self, trial_id: int) -> float:
        return validation_loss(self.metric, self.y_val, self._margins(trial_id))

    def metrics(self, trial_id: int) -> Dict[str, float]:
        return validation_metrics(self.family.report_metrics, self.metric, self.y_val, self._margins(trial_id))

    def _margins(self, trial_id: int) -> np.ndarray:
        c = self._get(trial_id)
        hit = self._val_cache.get(trial_id)
        if hit is not None and hit[0] == c["version"]:
            return hit[1]
        z = self._compute_margins(c)
        self._val_cache[trial_id] = (c["version"], z)
        return z

    def _get(self, trial_id: int, active_only: bool = False) -> Dict[str, Any]:
        return find_trial(self._cfgs, self._retired, trial_id, active_only)

    def _admit(self, trial_id: int, params: Mapping[str, Any]) -> Dict[str, Any]:
        """The validated ``params`` of a new trial (refused if it is already active); forgets
        a retired trial of that id and its cached validation scores. ``add`` stores the config."""
        if trial_id in self._cfgs:
            raise InvalidParameterError(f"Trial {trial_id} is already in the batch",
                                        hint="Use a new trial id for every configuration.")
        p = self.family.validate_params(params)
        self._retired.pop(trial_id, None)
        self._val_cache.pop(trial_id, None)
        return p

    def active(self) -> List[int]:
        return list(self._cfgs)

    def remove(self, trial_id: int) -> None:
        c = self._get(trial_id, active_only=True)
        del self._cfgs[trial_id]
        self._retired[trial_id] = c

    def _trial_record(self, trial_id: int) -> TrialRecord:
        c = self._get(trial_id)
        return TrialRecord(c["status"], c["done"], c["params"])


def save_configs(trainer, fmt: str, keys: Sequence[str]) -> Dict[str, Any]:
    """The checkpoint_state of an MLP trainer: format, passes, stats and, per active and
    retired config, its trial id, params and ``keys`` (read back by :func:`load_configs`)."""
    def one(tid, c):
        return dict({"trial_id": int(tid), "params": dict(c["params"])}, **{k: c[k] for k in keys})
    return {"format": fmt, "passes": int(trainer.passes), "stats": trainer.stats,
            "configs": [one(t, c) for t, c in trainer._cfgs.items()],
            "retired": [one(t, c) for t, c in trainer._retired.items()]}


def load_configs(trainer, state: Mapping[str, Any], fmt: str, keys: Sequence[str], *, stats: bool = False,
                 hint: str = "Resume with the same model and options, or restart the run.") -> None:
    """Restore the active and retired configs of a sharded trainer from its checkpoint_state
    (and ``trainer.stats`` with ``stats``); ``hint`` goes with a checkpoint of another format."""
    if not isinstance(state, Mapping) or state.get("format") != fmt:
        raise PrerequisiteStateError("The checkpoint is not a state of this trainer", hint=hint)
    try:
        for bucket, key in ((trainer._cfgs, "configs"), (trainer._retired, "retired")):
            bucket.clear()
            for data in state[key]:
                bucket[int(data["trial_id"])] = dict({"params": trainer.family.validate_params(data["params"])},
                                                     **{k: data[k] for k in keys})
        trainer.passes = int(state["passes"])
        if stats:
            trainer.stats = state["stats"]
    except (KeyError, TypeError, ValueError) as exc:
        raise PrerequisiteStateError(f"The trainer checkpoint is damaged: {exc}",
                                     hint="Restart the run from scratch.") from None
    trainer._val_cache = {}


# ------------------------------------------------------------------ the table of strategies
#: (access pattern, task mode of :func:`groupml.executor.plan.group_tasks`) -> trainer factory
#: ``(family, ctx, X_val, y_val, opts, *, lgbm_timeout_s, flexible, resume) -> engine.Trainer``
TRAINERS: Dict[Tuple[str, str], Callable] = {}
#: checkpoint format -> the key under which its configs keep model bytes: ``'state'`` (an MLP
#: training state, :func:`groupml.learners.mlp.run_to_bytes`) or ``'text'`` (a LightGBM model text)
CHECKPOINT_MODELS: Dict[str, str] = {}


def register_trainer(pattern: str, mode: str) -> Callable[[Callable], Callable]:
    """Decorator: the factory of the coordinator-side trainer of (``pattern``, ``mode``)."""
    def deco(factory: Callable) -> Callable:
        TRAINERS[(pattern, mode)] = factory
        return factory
    return deco


def trainer_for(pattern: str, mode: str) -> Callable:
    """The registered trainer factory of (``pattern``, ``mode``)."""
    try:
        return TRAINERS[(pattern, mode)]
    except KeyError:
        raise FeatureNotSupportedError(f"The executor has no trainer for the {pattern} pattern in task mode "
                                       f"'{mode}'", hint="Use another strategy, or workers => 1.") from None


def register_checkpoint_format(fmt: str, model_key: str) -> None:
    """Declare a trainer's checkpoint format and where its configs keep model bytes."""
    if model_key not in ("state", "text"):
        raise ValueError(f"model_key must be 'state' or 'text'; got {model_key!r}")
    CHECKPOINT_MODELS[fmt] = model_key


def check_checkpoint_models(state: Any, d: int) -> None:
    """Raise ModelFormatError unless every model a group's checkpoint holds is safe to hand to
    LightGBM or torch (``state`` is ``{"trainer": <a trainer's checkpoint_state()>, ...}``; a
    checkpoint is bytes read from a table, and both libraries can crash the backend on altered
    bytes): LightGBM model texts pass :func:`groupml.learners.check_lgbm_text` (texts this
    process made are trusted), MLP training states decode with
    :func:`groupml.learners.mlp.run_from_bytes`, which checks them against the network. GLM
    states are numpy arrays the trainer checks itself."""
    trainer = state.get("trainer") if isinstance(state, Mapping) else None
    fmt = trainer.get("format") if isinstance(trainer, Mapping) else None
    key = CHECKPOINT_MODELS.get(fmt) if isinstance(fmt, str) else None
    if key is None:
        return
    blobs = [c.get(key) for k in ("configs", "retired") for c in trainer.get(k) or () if isinstance(c, Mapping)]
    blobs = [bytes(b) for b in blobs if isinstance(b, (bytes, bytearray))]
    if key == "text":
        for text in blobs:
            check_lgbm_text(text, d)
        return
    for blob in blobs:            # torch: only when a resumed checkpoint holds MLP states
        if mlp.run_from_bytes(blob).n_features != d:
            raise PrerequisiteStateError("The trainer checkpoint is damaged: an MLP state is for another "
                                         "feature count", hint="Restart the run from scratch.")

