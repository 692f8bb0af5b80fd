"""Which configuration visits which partition next: the model hopper's scheduler (MOP).

Pure decisions, no training and no I/O: the caller starts configurations, asks for the
visits to launch now, and reports each visit that finished (or failed).  Every driver
uses it -- the in-process :func:`groupml.learners.run_mop` (one thread per worker) and the
executor's :class:`groupml.executor.patterns.ShardedMLPTrainer` (worker backends) -- so the
rules are written once:

* every configuration visits every partition once per epoch (a *training unit* is one
  (configuration, partition) pair of an epoch; Cerebro, sections 3.1 and 4.2);
* a configuration runs on at most one worker at a time (model isolation) and a worker
  runs at most one of our visits at a time (worker exclusivity);
* a partition may be held by several workers (the *availability map*, Cerebro 5.5): a unit
  runs on any live holder of its partition.

Three policies choose among the units that may start:

* ``'ordered'``: a configuration takes its partitions exactly in its seeded :func:`hop_order`
  and waits for a busy holder, so the trained models do not depend on timing;
* ``'least_loaded'``: one whose next partition's holders are busy takes another unvisited
  partition of the epoch on a free worker (the least loaded one when the caller reports
  loads); configurations that have made the fewest visits are served first;
* ``'randomized'``: Cerebro's randomized scheduler (Alg. 1 with the replica-aware line 10):
  the idle workers, in a seeded random order, each take a seeded random unit among those
  whose configuration is idle and whose partition the worker holds.

In every policy the executed order is the visit log.  Faults (Cerebro 5.6): a unit in
flight is in Q' (``_running``); :meth:`HopScheduler.failed` moves it back to Q (the
configuration's unvisited partitions) so it reruns from the configuration's last
committed state; :meth:`HopScheduler.lose_worker` removes a dead worker from the map and
:meth:`HopScheduler.unreachable` names the partitions left without a live holder.
:meth:`HopScheduler.add_worker` adds a worker between visits (elasticity).
"""

from __future__ import annotations

from typing import Callable, Dict, Hashable, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import numpy as np

Launch = Tuple[int, int, int]        # (trial_id, epoch, shard)
Placed = Tuple[int, int, int, Hashable]   # (trial_id, epoch, shard, worker)
POLICIES = ("ordered", "least_loaded", "randomized")


def hop_order(seed: int, trial_id: int, epoch: int, n_shards: int) -> List[int]:
    """The seeded order in which config ``trial_id`` visits the shards in ``epoch``."""
    rng = np.random.default_rng([int(seed), int(trial_id), int(epoch), 0x4D4F50])
    return [int(s) for s in rng.permutation(n_shards)]


def replica_holders(shard_workers: Sequence[Hashable], replicas: int) -> List[List[Hashable]]:
    """The availability map of ``replicas`` copies per partition: partition ``s`` on its own
    worker and the next ``replicas - 1`` distinct workers of ``shard_workers`` (wrapping)."""
    ring = list(dict.fromkeys(shard_workers))
    r = max(1, min(int(replicas), len(ring)))
    out = []
    for w in shard_workers:
        i = ring.index(w)
        out.append([ring[(i + k) % len(ring)] for k in range(r)])
    return out


def joining_partitions(n_shards: int, holders: Sequence[Sequence[Hashable]]) -> List[int]:
    """The partitions a worker that joins a running model hopper holds a copy of: every one.
    A joining worker then can take any unit, so it relieves the busiest holders at once
    whatever the replica layout; its copies cost one more replica of the group's rows (it
    reads them from the run's snapshot, nothing moves between workers). ``holders`` (the
    availability map) is the input a narrower choice would weigh."""
    return list(range(int(n_shards)))


class HopScheduler:
    """Visit decisions for configurations hopping over partitions held by workers.

    ``shard_workers[s]`` names the worker (any hashable) holding partition ``s``;
    ``holders[s]`` (optional) lists every worker holding a copy of it (the first is its home).
    ``flexible`` chooses the policy 'least_loaded' (True) or 'ordered' (False) unless
    ``policy`` names one; 'randomized' draws from a ``numpy`` generator seeded by ``seed``.
    """

    def __init__(self, shard_workers: Sequence[Hashable], *, seed: int, flexible: bool = True,
                 policy: Optional[str] = None, holders: Optional[Sequence[Sequence[Hashable]]] = None):
        self.shard_workers = list(shard_workers)
        self.seed = int(seed)
        policy = policy if policy is not None else ("least_loaded" if flexible else "ordered")
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {', '.join(POLICIES)}; got {policy!r}")
        self.policy = policy
        self.flexible = policy != "ordered"
        if holders is None:
            holders = [[w] for w in self.shard_workers]
        if len(holders) != len(self.shard_workers) or any(not h for h in holders):
            raise ValueError("holders must name at least one worker for every partition")
        self.holders: List[List[Hashable]] = [list(dict.fromkeys(h)) for h in holders]
        self.dead: Set[Hashable] = set()
        self._rng = np.random.default_rng([self.seed, 0x43524231])
        self._epoch: Dict[int, int] = {}          # trial -> epoch it is in
        self._target: Dict[int, int] = {}         # trial -> epochs it stops at
        self._left: Dict[int, List[int]] = {}     # trial -> partitions not yet visited this epoch (Q)
        self._visits: Dict[int, int] = {}         # trial -> visits made (fairness)
        self._running: Dict[int, Tuple[Hashable, int]] = {}   # trial -> (worker, partition) in flight (Q')
        self._busy: Dict[Hashable, int] = {}      # worker -> trial visiting it

    # ---------------------------------------------------------------- configurations
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

    def stop(self, trial_id: int) -> None:
        """End ``trial_id``'s hopping at the end of the epoch it finished last (called between
        its units: when :meth:`finished` returned True); its queue of units empties."""
        tid = int(trial_id)
        if tid in self._running:
            raise ValueError(f"config {tid} has a visit in flight")
        self._target[tid] = self._epoch.get(tid, 0)
        self._left.pop(tid, None)

    def pending(self) -> bool:
        """True while a started configuration has epochs or a visit in flight left."""
        return bool(self._left) or bool(self._running)

    def epoch(self, trial_id: int) -> int:
        return self._epoch[int(trial_id)]

    def sub_epoch(self, trial_id: int) -> int:
        """Partitions ``trial_id`` has finished in its current epoch."""
        tid = int(trial_id)
        left = len(self._left.get(tid, ())) + (1 if tid in self._running else 0)
        return len(self.shard_workers) - left if tid in self._left or tid in self._running else 0

    # ---------------------------------------------------------------- workers
    def live_holders(self, shard: int) -> List[Hashable]:
        return [w for w in self.holders[shard] if w not in self.dead]

    def lose_worker(self, worker: Hashable) -> None:
        """``worker`` is gone: it holds nothing any more (its unit in flight, if any, must be
        reported with :meth:`failed`)."""
        self.dead.add(worker)

    def add_worker(self, worker: Hashable, shards: Iterable[int]) -> None:
        """``worker`` (new, or back) holds ``shards`` from now on (elasticity)."""
        self.dead.discard(worker)
        for s in shards:
            if worker not in self.holders[int(s)]:
                self.holders[int(s)].append(worker)

    def unreachable(self) -> List[int]:
        """Partitions some configuration still has to visit that no live worker holds."""
        need = {s for left in self._left.values() for s in left}
        return sorted(s for s in need if not self.live_holders(s))

    # ---------------------------------------------------------------- decisions
    def next_visits(self, load: Optional[Callable[[Hashable], float]] = None) -> List[Launch]:
        """The visits to launch now, as ``(trial_id, epoch, shard)``; they count as running
        until :meth:`finished` (or :meth:`failed`) is called for them.  ``load(worker)``
        (optional) ranks free workers under 'least_loaded'."""
        return [(t, e, s) for t, e, s, _ in self.next_placements(load)]

    def next_placements(self, load: Optional[Callable[[Hashable], float]] = None) -> List[Placed]:
        """As :meth:`next_visits`, with the worker each visit runs on."""
        if self.policy == "randomized":
            return self._randomized()
        out: List[Placed] = []
        waiting = sorted((self._visits[t], t) for t in self._left if t not in self._running)
        for _, tid in waiting:
            left = self._left[tid]
            cands = left if self.flexible else left[:1]
            free = [(pos, s, w) for pos, s in enumerate(cands) for w in self.live_holders(s)
                    if w not in self._busy]
            if not free:
                continue
            if load is not None:
                free.sort(key=lambda psw: (load(psw[2]), psw[0]))
            _, s, w = free[0]
            out.append(self._place(tid, s, w))
        return out

    def _randomized(self) -> List[Placed]:
        """Cerebro's Alg. 1, one sweep: every idle worker (in a random order) takes a random
        unit of an idle configuration whose partition it holds."""
        out: List[Placed] = []
        live = sorted({w for h in self.holders for w in h if w not in self.dead}, key=repr)
        idle = [live[i] for i in self._rng.permutation(len(live)) if live[i] not in self._busy]
        for w in idle:
            units = [(t, s) for t in sorted(self._left) if t not in self._running
                     for s in self._left[t] if w in self.holders[s]]
            if not units:
                continue
            t, s = units[int(self._rng.integers(len(units)))]
            out.append(self._place(t, s, w))
        return out

    def _place(self, tid: int, s: int, w: Hashable) -> Placed:
        self._left[tid].remove(s)
        self._running[tid], self._busy[w] = (w, s), tid
        return (tid, self._epoch[tid], s, w)

    def finished(self, trial_id: int) -> bool:
        """Record that ``trial_id``'s visit in flight ended; True when it completed an epoch."""
        tid = int(trial_id)
        w, _ = self._running.pop(tid)
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

    def failed(self, trial_id: int) -> Tuple[Hashable, int]:
        """``trial_id``'s visit in flight did not finish (its worker died): the unit goes back
        from Q' to Q, first in the configuration's order; returns (worker, partition)."""
        tid = int(trial_id)
        w, s = self._running.pop(tid)
        del self._busy[w]
        self._left.setdefault(tid, []).insert(0, s)
        return w, s


def visit_log_violations(visits: Iterable[Mapping], n_shards: int,
                         epochs: Optional[Mapping[int, int]] = None) -> List[str]:
    """What an executed visit log breaks of MOP's rules (empty: sound).

    ``visits``: mappings with ``trial``, ``epoch``, ``shard``, ``worker``, ``start``, ``end``.
    Checks: every configuration visits every partition exactly once in every epoch it
    started (and, with ``epochs``, runs exactly ``epochs[trial]`` of them, in order); no
    configuration and no worker is in two visits at once."""
    visits = list(visits)
    out: List[str] = []
    per: Dict[Tuple[int, int], List[int]] = {}
    for v in visits:
        per.setdefault((int(v["trial"]), int(v["epoch"])), []).append(int(v["shard"]))
    for (t, e), shards in sorted(per.items()):
        if sorted(shards) != list(range(n_shards)):
            out.append(f"config {t} epoch {e} visited partitions {sorted(shards)}; every partition "
                       f"0..{n_shards - 1} exactly once is the rule")
    trials = sorted({t for t, _ in per})
    for t in trials:
        eps = sorted(e for tt, e in per if tt == t)
        want = list(range(epochs[t])) if epochs is not None and t in epochs else list(range(len(eps)))
        if eps != want:
            out.append(f"config {t} ran epochs {eps}; expected {want}")
        mine = sorted((v for v in visits if int(v["trial"]) == t), key=lambda v: v["start"])
        if [int(v["epoch"]) for v in mine] != sorted(int(v["epoch"]) for v in mine):
            out.append(f"config {t} started a visit of a later epoch before finishing an earlier one")
    for key, what in (("trial", "config"), ("worker", "worker")):
        by: Dict[Hashable, List[Mapping]] = {}
        for v in visits:
            by.setdefault(v[key], []).append(v)
        for k, vs in by.items():
            vs = sorted(vs, key=lambda v: v["start"])
            for a, b in zip(vs, vs[1:]):
                if b["start"] < a["end"]:
                    out.append(f"{what} {k} was in two visits at once: partition {b['shard']} started before "
                               f"partition {a['shard']} ended")
    return out
