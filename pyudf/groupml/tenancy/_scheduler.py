"""The multi-tenant scheduler: a tenant-picking policy plus one cost-aware GP-UCB per tenant.

Whole state is a JSON-serializable dict (:meth:`Scheduler.state_dict`). Decisions are a
pure function of that state: :meth:`Scheduler.next_step` mutates nothing (its random
generator is derived from ``(seed, number of recorded outcomes)``), so a coordinator
that crashes between deciding and recording simply asks again and gets the same answer.
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..errors import InvalidParameterError, PrerequisiteStateError, UndefinedObjectError
from ..validation import check_bool, check_keys, check_number
from ._bandit import TenantBandit, beta
from ._gp import TenantGP, estimate_prior, history_matrix
from ._policies import TenantView, make_policy

OWNER = "the scheduler"
BETA_RULES = ["theorem1", "theorem", "algorithm"]
STATE_VERSION = 1
CONFIG_KEYS = ["policy", "cost_aware", "delta", "noise", "beta_scale", "beta_rule", "refresh_every", "seed", "shrinkage",
               "cost_floor", "patience", "quality_max"]


def _num_or_none(x: float) -> Optional[float]:
    return None if x is None or not math.isfinite(x) else float(x)


class Scheduler:
    """Decide, step by step, which tenant to serve and which candidate to train for it.

    Parameters
    ----------
    policy: 'hybrid' (default), 'greedy', 'eirate', 'roundrobin', 'random' or 'fcfs'.
    cost_aware: use sqrt(beta / c) instead of sqrt(beta) (costs normalized by the
        largest estimated cost over all tenants).
    delta: confidence parameter of beta (0 < delta < 1).
    noise: observation noise standard deviation of the GP (quality units).
    beta_scale: multiplies the theoretical beta (1.0 = Theorem 1/2 as written).
    beta_rule: 'theorem1' (default): beta_t = 2 c_max log(pi^2 K_i t^2 / (6 delta)), Theorem 1
        applied to tenant i's own GP-UCB (K_i its candidate count, t its own pick count);
        'theorem': beta_t = 2 c_max log(pi^2 n K_max t^2 / (6 delta)) of the multi-tenant
        Theorems 2-3 (union bound over the n tenants: log n larger); 'algorithm':
        beta_t = log(K_i t^2 / delta), the line the paper's Algorithms 1 and 2 list
        (smallest). c_max = 1 because costs are normalized by the largest estimate.
    refresh_every: when > 0, re-estimate every tenant's prior from all outcomes recorded so
        far after every ``refresh_every``-th outcome (0: priors are fixed when a tenant is
        added). Tenants that arrive together see nothing of each other otherwise.
    seed: integer seed of the per-step random generator (RANDOM policy).
    history: optional list of past jobs, each ``{candidate_key: quality}``; used with
        the other tenants' observations to estimate each tenant's GP prior.
    shrinkage: weight pulling estimated off-diagonal covariances toward 0.
    cost_floor: smallest normalized cost (guards against zero cost estimates).
    patience: HYBRID's s (stalled steps before switching to round-robin).
    quality_max: the largest quality the metric allows (1.0 for accuracy or r2), or None
        (default: unbounded). Only EIRATE uses it: the expected improvement is that of the
        quality clipped at quality_max, so a tenant holding a model at quality_max has
        nothing left to gain. Model picking (GP-UCB) ignores it.
    """

    def __init__(self, policy: str = "hybrid", *, cost_aware: bool = True, delta: float = 0.1,
                 noise: float = 0.02, beta_scale: float = 1.0, beta_rule: str = "theorem1",
                 refresh_every: int = 0, seed: int = 0,
                 history: Optional[Sequence[Mapping[str, float]]] = None,
                 shrinkage: float = 0.05, cost_floor: float = 1e-3, patience: int = 10,
                 quality_max: Optional[float] = None):
        self.cost_aware = check_bool(cost_aware, "cost_aware", OWNER)
        self.delta = check_number(delta, "delta", OWNER, gt=0, lt=1,
                                  hint="delta is a failure probability, e.g. 0.1.")
        self.noise = check_number(noise, "noise", OWNER, gt=0,
                                  hint="Give the noise standard deviation of a quality, e.g. 0.02.")
        self.beta_scale = check_number(beta_scale, "beta_scale", OWNER, gt=0)
        from ..validation import check_choice
        self.beta_rule = check_choice(beta_rule, "beta_rule", OWNER, BETA_RULES,
                                      hint="'theorem1' is beta of Theorem 1 (per tenant), 'theorem' the one of the "
                                           "multi-tenant Theorems 2-3, 'algorithm' the line of Algorithms 1-2.")
        self.seed = check_number(seed, "seed", OWNER, ge=0, integer=True)
        self.refresh_every = check_number(refresh_every, "refresh_every", OWNER, ge=0, integer=True,
                                          hint="0 keeps priors fixed; e.g. 10 re-estimates them every 10 outcomes.")
        self.shrinkage = check_number(shrinkage, "shrinkage", OWNER, ge=0, le=1)
        self.cost_floor = check_number(cost_floor, "cost_floor", OWNER, gt=0, le=1)
        self.patience = check_number(patience, "patience", OWNER, ge=1, integer=True)
        self.quality_max = None if quality_max is None else check_number(
            quality_max, "quality_max", OWNER,
            hint="Give the largest value the quality metric can take (1.0 for accuracy or r2), or null for none.")
        self.policy_name = policy
        self.policy = make_policy(policy, **({"patience": self.patience} if policy == "hybrid" else {}))
        self.history: List[Dict[str, float]] = self._check_history(history or [])
        self.tenants: Dict[str, TenantBandit] = {}
        self._prior_upto: Dict[str, int] = {}
        self._added_at: Dict[str, int] = {}   # log length when each tenant was added
        self.log: List[list] = []          # [tenant, candidate, quality or None (failed), cost]
        self._prior_cache: Dict[tuple, Tuple[np.ndarray, np.ndarray]] = {}
        self._c_max: Optional[float] = None    # caches, reset when tenants change
        self._k_max: Optional[int] = None

    # ------------------------------------------------------------------ input checks
    @staticmethod
    def _check_history(history) -> List[Dict[str, float]]:
        out = []
        for i, row in enumerate(history):
            if not isinstance(row, Mapping):
                raise InvalidParameterError(
                    f"Row {i} of the scheduler history must be an object of candidate -> quality; got {row!r}",
                    hint="Pass a list like [{'logistic': 0.81, 'tree': 0.77}, ...].")
            clean = {}
            for key, value in row.items():
                if value is None:
                    continue
                clean[str(key)] = check_number(value, f"history[{i}][{key}]", OWNER)
            out.append(clean)
        return out

    def _tenant(self, name: str) -> TenantBandit:
        bandit = self.tenants.get(name)
        if bandit is None:
            raise UndefinedObjectError(f"Tenant {name!r} is not known to the scheduler",
                                       hint="Add it with add_tenant first.")
        return bandit

    # ------------------------------------------------------------------ tenants & priors
    def add_tenant(self, name: str, candidates: Sequence[str],
                   costs: Optional[Sequence[float]] = None) -> None:
        """Register a tenant with its candidate keys and estimated costs (default 1)."""
        if not isinstance(name, str) or not name:
            raise InvalidParameterError(f"The 'tenant' value of {OWNER} must be a non-empty string; got {name!r}",
                                        hint="Name the tenant, e.g. 'astro'.")
        if name in self.tenants:
            raise InvalidParameterError(f"Tenant {name!r} is already registered with {OWNER}",
                                        hint="Use a different name or keep the existing tenant.")
        candidates = [str(c) for c in candidates]
        if not candidates:
            raise InvalidParameterError(f"The 'candidates' value of tenant {name!r} must be a non-empty list; got []",
                                        hint="Give at least one candidate model.")
        if len(set(candidates)) != len(candidates):
            raise InvalidParameterError(f"The 'candidates' value of tenant {name!r} must not repeat a key; "
                                        f"got {candidates!r}", hint="Give each candidate a unique key.")
        if costs is None:
            costs = [1.0] * len(candidates)
        costs = list(costs)
        if len(costs) != len(candidates):
            raise InvalidParameterError(
                f"The 'costs' value of tenant {name!r} must have one entry per candidate ({len(candidates)}); "
                f"got {len(costs)}", hint="Give one estimated cost per candidate.")
        costs = [check_number(c, "cost", f"tenant {name!r}", gt=0,
                              hint="Estimated costs are positive (e.g. seconds).") for c in costs]
        bandit = TenantBandit(name, candidates, costs, order=len(self.tenants))
        self.tenants[name] = bandit
        self._c_max = self._k_max = None
        self._prior_upto[name] = len(self.log)
        self._added_at[name] = len(self.log)
        self._build_gp(bandit)
        self.policy.on_tenant_added()

    def _prior(self, bandit: TenantBandit, upto: int) -> Tuple[np.ndarray, np.ndarray]:
        own_in_prefix = any(e[0] == bandit.name for e in self.log[:upto])
        cache_key = (upto, bandit.name if own_in_prefix else None, tuple(bandit.keys))
        hit = self._prior_cache.get(cache_key)
        if hit is not None:
            return hit
        rows = list(self.history)
        others: Dict[str, Dict[str, float]] = {}
        for tenant, key, quality, _cost in self.log[:upto]:
            if tenant != bandit.name and quality is not None:
                others.setdefault(tenant, {})[key] = quality
        rows.extend(others[t] for t in sorted(others))
        mean, cov = estimate_prior(history_matrix(rows, bandit.keys), shrinkage=self.shrinkage)
        self._prior_cache[cache_key] = (mean, cov)
        return mean, cov

    def _build_gp(self, bandit: TenantBandit) -> None:
        mean, cov = self._prior(bandit, self._prior_upto[bandit.name])
        bandit.gp = TenantGP(mean, cov, self.noise ** 2)
        for tenant, key, quality, _cost in self.log:
            if tenant == bandit.name and quality is not None:
                bandit.gp.add(bandit.index[key], quality)

    def refresh_priors(self) -> None:
        """Re-estimate every tenant's prior from all observations recorded so far."""
        self._prior_cache.clear()
        for bandit in self.tenants.values():
            self._prior_upto[bandit.name] = len(self.log)
            self._build_gp(bandit)

    # ------------------------------------------------------------------ scoring
    def _norm_costs(self, bandit: TenantBandit) -> np.ndarray:
        """Estimated costs divided by the largest estimate of any tenant (floored)."""
        if not self.cost_aware:
            return np.ones(len(bandit.keys))
        c_max = max(float(b.est_costs.max()) for b in self.tenants.values()) if self._c_max is None \
            else self._c_max
        self._c_max = c_max
        return np.maximum(bandit.est_costs / c_max, self.cost_floor)

    def _beta(self, bandit: TenantBandit) -> float:
        if self._k_max is None:
            self._k_max = max(len(b.keys) for b in self.tenants.values())
        t = int(bandit.tried.sum()) + 1
        if self.beta_rule == "algorithm":
            return self.beta_scale * math.log(len(bandit.keys) * t * t / self.delta)
        if self.beta_rule == "theorem1":
            return beta(t, 1, len(bandit.keys), self.delta, 1.0, self.beta_scale)
        return beta(t, len(self.tenants), self._k_max, self.delta, 1.0, self.beta_scale)

    def ucb_scores(self, tenant: str) -> Dict[str, Optional[float]]:
        """Current UCB score of every candidate of ``tenant`` (None for tried ones)."""
        bandit = self._tenant(tenant)
        s = bandit.scores(self._beta(bandit), self._norm_costs(bandit))
        return {k: (float(v) if np.isfinite(v) else None) for k, v in zip(bandit.keys, s)}

    def _view(self, with_scores: bool) -> List[TenantView]:
        out = []
        with_gain = with_scores and self.policy.needs_gain
        for b in self.tenants.values():
            if not b.active:
                continue
            top, cand, gain = None, None, None
            if with_scores:
                costs = self._norm_costs(b)
                s = b.scores(self._beta(b), costs)
                j = int(np.argmax(s))
                top, cand = float(s[j]), b.keys[j]
                if with_gain and math.isfinite(b.best):
                    gain = float(np.max(b.gain_rates(costs, self.quality_max)))
            out.append(TenantView(b.name, b.order, b.n_obs, b.gap, _num_or_none(b.best), top, cand, gain))
        return out

    def _total_best(self) -> float:
        return float(sum(b.best for b in self.tenants.values() if math.isfinite(b.best)))

    # ------------------------------------------------------------------ decisions
    def next_step(self) -> Optional[Tuple[str, str]]:
        """(tenant, candidate) to train next, or None when every candidate is done."""
        view = self._view(with_scores=True)
        if not view:
            return None
        rng = np.random.default_rng([self.seed, len(self.log)])
        name = self.policy.select(view, rng)
        chosen = next(v for v in view if v.name == name)
        return name, chosen.candidate

    def _check_untried(self, bandit: TenantBandit, candidate: str) -> int:
        idx = bandit.index.get(candidate)
        if idx is None:
            raise UndefinedObjectError(f"Candidate {candidate!r} is not a candidate of tenant {bandit.name!r}",
                                       hint="Use one of the keys given to add_tenant.")
        if bandit.tried[idx]:
            raise PrerequisiteStateError(
                f"Candidate {candidate!r} of tenant {bandit.name!r} was already trained",
                hint="A candidate is trained at most once per tenant; ask next_step for a new one.")
        return idx

    def observe(self, tenant: str, candidate: str, quality: float, cost: Optional[float] = None) -> None:
        """Record the validation quality (higher is better) and measured cost of a trained candidate."""
        bandit = self._tenant(tenant)
        idx = self._check_untried(bandit, candidate)
        quality = check_number(quality, "quality", f"tenant {tenant!r}",
                               hint="Report a finite validation quality (higher is better).")
        if cost is not None:
            cost = check_number(cost, "cost", f"tenant {tenant!r}", ge=0)
        ucb_at_pick = float(bandit.scores(self._beta(bandit), self._norm_costs(bandit))[idx])
        bandit.record(idx, quality, ucb_at_pick)
        self.log.append([tenant, candidate, quality, cost])
        self.policy.after_observe(self._view(False), tenant, bandit.order, self._total_best())
        self._maybe_refresh()

    def observe_failure(self, tenant: str, candidate: str, cost: Optional[float] = None) -> None:
        """Record that training a candidate failed: it is never proposed again, the GP is unchanged."""
        bandit = self._tenant(tenant)
        idx = self._check_untried(bandit, candidate)
        if cost is not None:
            cost = check_number(cost, "cost", f"tenant {tenant!r}", ge=0)
        bandit.record_failure(idx)
        self.log.append([tenant, candidate, None, cost])
        self.policy.after_observe(self._view(False), tenant, bandit.order, self._total_best())
        self._maybe_refresh()

    def retire(self, tenant: str, candidates: Sequence[str]) -> List[str]:
        """Withdraw untried ``candidates`` of ``tenant`` without training them (their job or
        candidate rows were deleted, or they were trained before the state was rebuilt):
        never proposed again. Not an outcome: no log entry, no step, the policy is not told
        (a deleted job's candidates do not count as failed steps, against max_steps or
        HYBRID's stall counter). Returns the keys withdrawn."""
        bandit = self._tenant(tenant)
        out = []
        for key in candidates:
            idx = bandit.index.get(key)
            if idx is not None and not bandit.tried[idx]:
                bandit.retire(idx)
                out.append(key)
        return out

    def untried(self, tenant: str) -> List[str]:
        """Keys of ``tenant``'s candidates not trained, failed or withdrawn yet."""
        bandit = self._tenant(tenant)
        return [k for k, t in zip(bandit.keys, bandit.tried) if not t]

    def _maybe_refresh(self) -> None:
        if self.refresh_every and len(self.log) % self.refresh_every == 0:
            self.refresh_priors()

    # ------------------------------------------------------------------ introspection
    def summary(self) -> Dict[str, Dict[str, Any]]:
        """Per tenant: observations, best quality, empirical gap, remaining candidates."""
        return {b.name: {"n_obs": b.n_obs, "best": _num_or_none(b.best), "gap": b.gap,
                         "remaining": int((~b.tried).sum()), "failed": list(b.failed),
                         "retired": list(b.retired)}
                for b in self.tenants.values()}

    @property
    def mode(self) -> str:
        """HYBRID's current mode ('greedy' or 'roundrobin'); the policy name otherwise."""
        return getattr(self.policy, "mode", self.policy_name)

    # ------------------------------------------------------------------ persistence
    def config(self) -> Dict[str, Any]:
        return {"policy": self.policy_name, "cost_aware": self.cost_aware, "delta": self.delta,
                "noise": self.noise, "beta_scale": self.beta_scale, "beta_rule": self.beta_rule,
                "refresh_every": self.refresh_every, "seed": self.seed,
                "shrinkage": self.shrinkage, "cost_floor": self.cost_floor, "patience": self.patience,
                "quality_max": self.quality_max}

    def state_dict(self) -> Dict[str, Any]:
        return {
            "version": STATE_VERSION,
            "config": self.config(),
            "history": [dict(r) for r in self.history],
            "tenants": [{"name": b.name, "candidates": list(b.keys),
                         "costs": [float(c) for c in b.est_costs],
                         "prior_upto": self._prior_upto[b.name],
                         "added_at": self._added_at.get(b.name, self._prior_upto[b.name]),
                         "ecb": _num_or_none(b.ecb), "gap": b.gap, "retired": list(b.retired)}
                        for b in sorted(self.tenants.values(), key=lambda b: b.order)],
            "log": [list(e) for e in self.log],
            "policy": self.policy.state_dict(),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> "Scheduler":
        check_keys(state, "scheduler state", ["version", "config", "history", "tenants", "log", "policy"],
                   cls=InvalidParameterError)
        if state.get("version") != STATE_VERSION:
            raise InvalidParameterError(
                f"The 'version' value of scheduler state must be {STATE_VERSION}; got {state.get('version')!r}",
                hint="The state was written by another groupml version; start a new scheduler.")
        config = dict(state["config"])
        check_keys(config, "scheduler state config", CONFIG_KEYS, cls=InvalidParameterError)
        policy = config.pop("policy")
        sched = cls(policy, history=state.get("history") or [], **config)
        sched.log = [list(e) for e in state.get("log", [])]
        for t in state.get("tenants", []):
            b = TenantBandit(t["name"], t["candidates"], t["costs"], order=len(sched.tenants))
            sched.tenants[b.name] = b
            sched._prior_upto[b.name] = int(t["prior_upto"])
            sched._added_at[b.name] = int(t.get("added_at", t["prior_upto"]))
        for tenant, key, quality, _cost in sched.log:
            b = sched._tenant(tenant)
            b.tried[b.index[key]] = True
            if quality is None:
                b.failed.append(key)
            else:
                b.best = max(b.best, quality)
                b.last_y = quality
        for t in state.get("tenants", []):
            b = sched.tenants[t["name"]]
            for key in t.get("retired") or []:
                b.retire(b.index[key])
            b.ecb = math.inf if t.get("ecb") is None else float(t["ecb"])
            b.gap = t.get("gap")
            sched._build_gp(b)
        sched.policy.load_state(dict(state.get("policy") or {}))
        return sched

    @classmethod
    def replay(cls, state: Mapping[str, Any], **config: Any) -> "Scheduler":
        """A scheduler with another configuration (e.g. policy, cost_aware) that has seen the
        same tenants and outcomes as ``state``: tenants are added at the log position where
        they were originally added, and every logged outcome is observed again in order.

        The policy's own state (HYBRID's mode, the round-robin pointer) is rebuilt by the
        replay, as if the new policy had been in charge from the start; GREEDY's empirical
        bounds use the new configuration's UCB scores.
        """
        check_keys(state, "scheduler state", ["version", "config", "history", "tenants", "log", "policy"],
                   cls=InvalidParameterError)
        base = dict(state.get("config") or {})
        check_keys(config, "scheduler configuration", CONFIG_KEYS, cls=InvalidParameterError)
        base.update(config)
        policy = base.pop("policy")
        sched = cls(policy, history=state.get("history") or [], **base)
        log = list(state.get("log", []))
        first = {}
        for pos, entry in enumerate(log):
            first.setdefault(entry[0], pos)
        tenants = list(state.get("tenants", []))
        add_at = {t["name"]: min(int(t.get("added_at", t["prior_upto"])), first.get(t["name"], len(log)))
                  for t in tenants}
        pending = sorted(tenants, key=lambda t: add_at[t["name"]])
        for pos, (tenant, key, quality, cost) in enumerate(log):
            while pending and add_at[pending[0]["name"]] <= pos:
                t = pending.pop(0)
                sched.add_tenant(t["name"], t["candidates"], t["costs"])
            if quality is None:
                sched.observe_failure(tenant, key, cost)
            else:
                sched.observe(tenant, key, quality, cost)
        for t in pending:
            sched.add_tenant(t["name"], t["candidates"], t["costs"])
        for t in tenants:
            sched.retire(t["name"], t.get("retired") or [])
        # The priors exactly as recorded (they depend only on the log, not on the policy).
        sched._prior_cache.clear()
        for t in tenants:
            sched._prior_upto[t["name"]] = int(t["prior_upto"])
            sched._build_gp(sched.tenants[t["name"]])
        return sched

