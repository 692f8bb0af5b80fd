"""The algebraic pattern (GLMs, L-BFGS/GD) under GAP: the coordinator keeps every
configuration's solver state; a data pass is a set of worker tasks returning partial
sums, accumulated until the last shard reports, then the update is applied.

:class:`ShardedGLMTrainer` is a :class:`groupml.learners.GLMTrainer` whose data pass
(``_evaluate``) is delegated to an *evaluator* ``(Theta, cfgs) -> (f_sum, G_sum)``; the
loss/gradient normalisation is applied here and the standardization and L2/intercept
terms by the one-process trainer's code, with the column means and scales of the whole
group's training rows (merged from one moments task per shard), so the L-BFGS trajectory
is the same up to floating-point summation order. Validation rows stay with the
coordinator (scores, metrics).
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..errors import FeatureNotSupportedError
from ..fitting import plan_group, validate_request
from ..learners import GLMTrainer, as_data, get_family, merge_standardization
from ..validation import check_choice
from .core import Aborted, await_result, fit_with_trainer, precheck, unpack_stats


class ShardedGLMTrainer(GLMTrainer):
    """A GLMTrainer without training rows: passes go to ``evaluator``; ``standardization`` is
    the (shift, scale) of the group's training columns (:meth:`ShardEvaluator.standardization`)."""

    def __init__(self, family, n_train: int, n_pos: int, d: int, X_val, y_val, evaluator, *,
                 standardization, metric: Optional[str] = None):
        self.family = get_family(family)
        fam = self.family
        Xv, yv = as_data(X_val, y_val, "validation data")
        self.X_val, self.y_val = Xv, fam.prepare_labels(yv, "the validation data")
        self.n, self.d = int(n_train), int(d)
        self.n_pos = int(n_pos)
        self.X = None
        self.y = None
        self.metric = check_choice(metric if metric is not None else fam.default_metric, "metric", fam.owner,
                                   fam.metric_names)
        self.shift, self.scale = (np.asarray(a, dtype=np.float64) for a in standardization)
        self.passes = 0
        self._configs = {}
        self._retired = {}
        self._balanced_w = None
        self._val_cache = {}
        self._ws = None
        self.interrupt_check = None
        self.evaluator = evaluator

    def class_weights(self) -> List[float]:
        n, n1 = float(self.n), float(self.n_pos)
        n0 = n - n1
        return [n / (2.0 * n0) if n0 else 0.0, n / (2.0 * n1) if n1 else 0.0]

    def _evaluate(self, Theta, cfgs, rows=None, dtype=None):
        if rows is not None:
            raise FeatureNotSupportedError(
                "solver 'sgd' needs a group's rows in one process; the planner-driven executor runs "
                "full-batch solvers", hint="Use solver 'lbfgs' or 'gd', or workers => 1.")
        fsum, Gsum = self.evaluator(np.ascontiguousarray(Theta), cfgs)
        return fsum / self.n, Gsum / self.n

    def _data_term(self, V, cfgs, rows, vshift, vscale, dtype=None):
        """The workers evaluate the models on the user's scale (:meth:`_evaluate`, each on its
        own rows); the chain rule brings the gradient to ``V``'s scale."""
        d = self.d
        Theta = np.empty_like(V)
        Theta[:d] = V[:d] / vscale[:, None]
        Theta[d] = V[d] - np.einsum("ij,ij->j", vshift, Theta[:d])
        f, G = self._evaluate(Theta, cfgs, rows)
        Gv = np.empty_like(G)
        Gv[:d] = (G[:d] - vshift * G[d]) / vscale[:, None]
        Gv[d] = G[d]
        return f, Gv

    def _fingerprint(self):
        return [int(self.n), int(self.d), "sharded"]


def uses_sgd(search: Dict[str, Any]) -> bool:
    return '"sgd"' in json.dumps(search)


def fit_sharded_group(model: str, search: dict, options: dict, *, n_train: int, n_val: int, n_pos: int,
                      n_skipped: int, d: int, X_val: np.ndarray, y_val: np.ndarray,
                      evaluator: Callable, on_epoch=None, interrupt_check=None, cost_model=None,
                      checkpoint=None, resume=None):
    """:func:`groupml.fitting.fit_group` for a group whose training rows live on workers.

    ``checkpoint`` / ``resume``: epoch checkpoints (see :func:`groupml.fitting.search_and_select`);
    a resumed group's passes are numbered on from the checkpoint's."""
    family, spec, opts = validate_request(model, search, options)
    early = precheck(family, n_train=n_train, n_val=n_val, n_pos=n_pos, n_skipped=n_skipped, d=d, y_val=y_val)
    if early is not None:
        return early
    plan = plan_group(spec, family, n_train, d, cost_model)
    saved = {} if resume is None else resume["trainer"]
    std = (saved["shift"], saved["scale"]) if "shift" in saved and "scale" in saved else \
        evaluator.standardization()                # a resumed group keeps its checkpoint's
    trainer = ShardedGLMTrainer(family.name, n_train, n_pos, d, X_val, y_val, evaluator, metric=opts["metric"],
                                standardization=std)
    evaluator.trainer = trainer
    if resume is not None:
        evaluator.pass_no = int(resume["trainer"]["passes"])
    return fit_with_trainer(trainer, family, spec, n_train=n_train, n_val=n_val, n_skipped=n_skipped, d=d,
                            on_epoch=on_epoch, interrupt_check=interrupt_check, checkpoint=checkpoint,
                            resume=resume, plan=plan)


class ShardEvaluator:
    """One group's data pass as worker tasks.

    ``shards`` = [(worker, row_start, n_rows, pieces)]; mode ``'shards'`` sends every
    config to every shard (grouped / gtp / dp), mode ``'configs'`` sends each config
    alone to one worker holding the whole group (mtp; ``shards`` then has one entry per
    worker that may hold a copy).
    """

    def __init__(self, pool, *, snapshot_id: int, group_no: int, group_key: str, family: str, d: int,
                 shards: Sequence[tuple], mode: str = "shards", mem_mb: float = 512, abort=None):
        self.pool, self.snapshot_id, self.group_no, self.group_key = pool, snapshot_id, group_no, group_key
        self.family, self.d, self.shards, self.mode, self.mem_mb = family, d, list(shards), mode, mem_mb
        self.pass_no = 0
        self.trainer = None
        self.abort = abort

    def _request(self, pieces, params, k, class_w) -> str:
        return json.dumps({"snapshot": self.snapshot_id, "group_no": self.group_no, "pieces": pieces,
                           "family": self.family, "params": params, "d": self.d, "k": k,
                           "class_w": class_w, "mem_mb": self.mem_mb})

    def standardization(self):
        """(shift, scale) of the group's training columns: one moments task per shard (the
        first copy only in mode 'configs'), merged in shard order. The tasks ask for no cache
        (mem_mb 0): the passes keep the shard in the GLM shard cache, not a second copy."""
        shards = self.shards[:1] if self.mode == "configs" else self.shards
        futs = []
        for s, (w, start, rows, pieces) in enumerate(shards):
            req = json.dumps({"snapshot": self.snapshot_id, "group_no": self.group_no, "pieces": pieces,
                              "d": self.d, "mem_mb": 0, "op": "mlp_stats"})
            meta = {"group_key": self.group_key, "kind": "stats", "pass": 0, "shard": s, "row_start": start,
                    "n_rows": rows, "trials": []}
            futs.append(self.pool.submit(w, req, b"", meta, fn="task"))
        return merge_standardization([unpack_stats(await_result(f, self.abort), self.d) for f in futs], self.d)

    def __call__(self, Theta: np.ndarray, cfgs) -> tuple:
        d, k = self.d, Theta.shape[1]
        params = [dict(c.params) for c in cfgs]
        trials = [int(c.trial_id) for c in cfgs]
        cw = None
        if any(p.get("class_weight") == "balanced" for p in params):
            cw = self.trainer.class_weights()
        futures = []
        if self.mode == "configs":
            for j in range(k):
                w, start, rows, pieces = self.shards[(self.group_no + trials[j]) % len(self.shards)]
                meta = {"group_key": self.group_key, "pass": self.pass_no, "shard": 0, "row_start": start,
                        "n_rows": rows, "trials": [trials[j]]}
                th = np.ascontiguousarray(Theta[:, j:j + 1]).astype("<f8").tobytes()
                futures.append(self.pool.submit(w, self._request(pieces, [params[j]], 1, cw), th, meta))
        else:
            th = Theta.astype("<f8").tobytes()
            for s, (w, start, rows, pieces) in enumerate(self.shards):
                meta = {"group_key": self.group_key, "pass": self.pass_no, "shard": s, "row_start": start,
                        "n_rows": rows, "trials": trials}
                futures.append(self.pool.submit(w, self._request(pieces, params, k, cw), th, meta))
        fsum = np.zeros(k)
        Gsum = np.zeros((d + 1, k))
        n_seen = 0
        for j, fut in enumerate(futures):           # fixed order: deterministic summation
            # poll the abort flag while waiting: a worker that never reports must not hold the
            # driver (and the run's shutdown) forever
            out = np.frombuffer(await_result(fut, self.abort), dtype="<f8")
            kk = 1 if self.mode == "configs" else k
            f = out[1:1 + kk]
            G = out[1 + kk:].reshape(d + 1, kk)
            if self.mode == "configs":
                fsum[j], Gsum[:, j] = f[0], G[:, 0]
            else:
                fsum += f
                Gsum += G
                n_seen += int(out[0])
        self.pass_no += 1
        if self.abort is not None and self.abort.is_set():
            raise Aborted()
        return fsum, Gsum
