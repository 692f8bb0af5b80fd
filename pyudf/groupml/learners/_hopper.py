"""Which configuration visits which shard next: the model hopper's scheduler (MOP).

Pure decisions, no training and no I/O: the caller starts configurations, asks for the
visits to launch now, and reports each visit that finished.  Both drivers use it -- the
in-process :func:`groupml.learners.run_mop` (one thread per worker) and the executor's
:class:`groupml.executor.patterns.ShardedMLPTrainer` (worker backends) -- so the
rules are written once:

* every configuration visits every shard once per epoch, starting from its seeded
  :func:`hop_order` (Cerebro, section 4.2);
* a configuration runs on at most one worker at a time (config isolation) and a worker
  runs at most one of our visits at a time (worker exclusivity);
* without ``flexible`` a configuration takes its shards exactly in hop order, so the
  trained models do not depend on timing; with ``flexible`` one whose next shard sits on
  a busy worker takes another unvisited shard of the epoch on a free worker (the least
  loaded one when the caller reports loads), and the executed order is the visit log;
* configurations that have made the fewest visits are served first.
"""

from __future__ import annotations

from typing import Callable, Dict, Hashable, List, Optional, Sequence, Tuple

import numpy as np

Launch = Tuple[int, int, int]        # (trial_id, epoch, shard)


def hop_order(seed: int, trial_id: int, epoch: int, n_shards: int) -> List[int]:
    """The seeded order in which config ``trial_id`` visits the shards in ``epoch``."""
    rng = np.random.default_rng([int(seed), int(trial_id), int(epoch), 0x4D4F50])
    return [int(s) for s in rng.permutation(n_shards)]


class HopScheduler:
    """Visit decisions for configurations hopping over shards held by workers.

    ``shard_workers[s]`` names the worker (any hashable) holding shard ``s``.
    """

    def __init__(self, shard_workers: Sequence[Hashable], *, seed: int, flexible: bool = True):
        self.shard_workers = list(shard_workers)
        self.seed = int(seed)
        self.flexible = bool(flexible)
        self._epoch: Dict[int, int] = {}          # trial -> epoch it is in
        self._target: Dict[int, int] = {}         # trial -> epochs it stops at
        self._left: Dict[int, List[int]] = {}     # trial -> shards not yet visited this epoch
        self._visits: Dict[int, int] = {}         # trial -> visits made (fairness)
        self._running: Dict[int, Hashable] = {}   # trial -> worker of its visit in flight
        self._busy: Dict[Hashable, int] = {}      # worker -> trial visiting it

    def start(self, trial_id: int, done: int, target: int) -> None:
        """Let ``trial_id`` hop from epoch ``done`` until it has finished ``target`` epochs."""
        tid = int(trial_id)
        if tid in self._running:
            raise ValueError(f"config {tid} has a visit in flight")
        self._epoch[tid], self._target[tid] = int(done), int(target)
        self._visits.setdefault(tid, 0)
        if int(done) < int(target):
            self._left[tid] = hop_order(self.seed, tid, int(done), len(self.shard_workers))
        else:
            self._left.pop(tid, None)

    def pending(self) -> bool:
        """True while a started configuration has epochs or a visit in flight left."""
        return bool(self._left) or bool(self._running)

    def epoch(self, trial_id: int) -> int:
        return self._epoch[int(trial_id)]

    def next_visits(self, load: Optional[Callable[[Hashable], float]] = None) -> List[Launch]:
        """The visits to launch now, as ``(trial_id, epoch, shard)``; they count as running
        until :meth:`finished` is called for them.  ``load(worker)`` (optional) ranks free
        workers: a flexible configuration takes the least loaded one."""
        out: List[Launch] = []
        waiting = sorted((self._visits[t], t) for t in self._left if t not in self._running)
        for _, tid in waiting:
            left = self._left[tid]
            cands = left if self.flexible else left[:1]
            free = [(pos, s) for pos, s in enumerate(cands) if self.shard_workers[s] not in self._busy]
            if not free:
                continue
            if load is not None:
                free.sort(key=lambda ps: (load(self.shard_workers[ps[1]]), ps[0]))
            s = free[0][1]
            w = self.shard_workers[s]
            left.remove(s)
            self._running[tid], self._busy[w] = w, tid
            out.append((tid, self._epoch[tid], s))
        return out

    def finished(self, trial_id: int) -> bool:
        """Record that ``trial_id``'s visit in flight ended; True when it completed an epoch."""
        tid = int(trial_id)
        w = self._running.pop(tid)
        del self._busy[w]
        self._visits[tid] += 1
        if self._left.get(tid):
            return False
        self._epoch[tid] += 1
        if self._epoch[tid] < self._target[tid]:
            self._left[tid] = hop_order(self.seed, tid, self._epoch[tid], len(self.shard_workers))
        else:
            self._left.pop(tid, None)
        return True
