"""Simulation harness: run the scheduler on a quality matrix and a cost matrix, no training.

* :func:`synthetic_dataset` -- our generator after the ease.ml appendix: baseline groups,
  correlated model fluctuations (hidden model feature, squared-exponential covariance
  with width ``sigma_m``, weight ``alpha``), optional correlated user fluctuations and
  white noise, clipped to [0, 1]; costs drawn uniformly from (0, 1] per (user, model).
* :func:`simulate` -- split users into a "training" part (the kernel is estimated from
  their full quality rows) and ``n_test`` scheduled tenants, then let the scheduler
  pick (tenant, model) until the budget is spent.
* :func:`loss_on_grid`, :func:`cost_to_reach` -- the accuracy-loss metric.
* :func:`tenant_sequences`, :func:`best_interleaving_cost` -- how much any tenant-picking
  policy could gain at most: with fixed priors every tenant's own sequence of trained
  models does not depend on the policy, only the interleaving does, and the cheapest
  interleaving that reaches a loss threshold can be computed exactly.

Accuracy loss of tenant i after some steps = best quality of any of its models minus
the best quality trained for it so far (its full best quality while nothing has been
trained). Per run we track the average and the maximum over tenants against the
cumulative cost (cost-aware) or number of runs (cost-oblivious).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import InvalidParameterError
from ..validation import check_bool, check_number, seeded_rng
from ._scheduler import Scheduler

OWNER = "simulate"


def _se_cov(features: np.ndarray, width: float) -> np.ndarray:
    d = features[:, None] - features[None, :]
    if width * width >= np.finfo(float).tiny:
        return np.exp(-(d * d) / (width * width))
    d = d / width                   # width**2 underflows (width < 1e-154): scale first (0/0 would be NaN)
    with np.errstate(over="ignore"):
        return np.exp(-(d * d))


def _correlated(rng: np.random.Generator, cov: np.ndarray, n: int) -> np.ndarray:
    """n draws from N(0, cov) as rows (eigen-decomposition handles near-singular cov)."""
    vals, vecs = np.linalg.eigh(cov)
    root = vecs * np.sqrt(np.maximum(vals, 0.0))
    return rng.standard_normal((n, cov.shape[0])) @ root.T


def synthetic_dataset(n_users: int = 200, n_models: int = 100, sigma_m: float = 0.5,
                      alpha: float = 0.1, *, baseline_groups: Sequence[Tuple[float, float]] = ((0.75, 0.05), (0.25, 0.05)),
                      sigma_u: Optional[float] = None, user_weight: float = 0.0,
                      noise: float = 0.0, cost_low: float = 0.0, cost_high: float = 1.0,
                      cost_per_model: bool = False, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
    """SYN(sigma_m, alpha): quality (n_users x n_models) in [0, 1] and cost matrices.

    quality[i, j] = b_i + alpha * m_ij + user_weight * u_ij + eps_ij, clipped to [0, 1]:

    * b_i ~ N(mu_b, sd_b) with users split evenly over ``baseline_groups`` (mu_b, sd_b);
    * every model j gets a hidden feature f_j ~ U(0, 1); per user the row (m_i1..m_iK)
      ~ N(0, S_M) with S_M[j, j'] = exp(-(f_j - f_j')^2 / sigma_m^2);
    * likewise users get hidden features g_i and per model the column
      (u_1j..u_Nj) ~ N(0, S_U) with width ``sigma_u`` (only when ``user_weight`` > 0);
    * eps ~ N(0, noise) i.i.d.;
    * cost[i, j] uniform on (cost_low, cost_high], one draw per (user, model) pair; the
      default (0, 1] is the paper's U(0, 1) (ease.ml section 6.1 draws synthetic costs from
      U(0, 1); the upper end is included so that no cost is exactly 0). With
      ``cost_per_model`` one draw per model, shared by all users (the other reading of
      "the generator does not model the scale of the datasets").
    """
    n_users = check_number(n_users, "n_users", "synthetic_dataset", ge=1, integer=True)
    n_models = check_number(n_models, "n_models", "synthetic_dataset", ge=1, integer=True)
    sigma_m = check_number(sigma_m, "sigma_m", "synthetic_dataset", gt=0)
    alpha = check_number(alpha, "alpha", "synthetic_dataset", ge=0)
    user_weight = check_number(user_weight, "user_weight", "synthetic_dataset", ge=0)
    noise = check_number(noise, "noise", "synthetic_dataset", ge=0)
    cost_low = check_number(cost_low, "cost_low", "synthetic_dataset", ge=0)
    cost_high = check_number(cost_high, "cost_high", "synthetic_dataset", gt=cost_low,
                             hint="Costs are drawn from (cost_low, cost_high]; e.g. cost_low 0, cost_high 1.")
    if not baseline_groups:
        raise InvalidParameterError("The 'baseline_groups' value of synthetic_dataset must be a non-empty list; got []",
                                    hint="Give (mean, sd) pairs, e.g. [(0.75, 0.05), (0.25, 0.05)].")
    rng = seeded_rng(seed, "synthetic_dataset")
    groups = np.arange(n_users) % len(baseline_groups)
    mu_b = np.array([baseline_groups[g][0] for g in groups], dtype=float)
    sd_b = np.array([baseline_groups[g][1] for g in groups], dtype=float)
    b = rng.normal(mu_b, sd_b)
    f = rng.uniform(0.0, 1.0, n_models)
    m = _correlated(rng, _se_cov(f, sigma_m), n_users)
    quality = b[:, None] + alpha * m
    if user_weight > 0:
        width = check_number(sigma_u if sigma_u is not None else 0.5, "sigma_u", "synthetic_dataset", gt=0)
        g = rng.uniform(0.0, 1.0, n_users)
        u = _correlated(rng, _se_cov(g, width), n_models).T
        quality = quality + user_weight * u
    if noise > 0:
        quality = quality + rng.normal(0.0, noise, quality.shape)
    quality = np.clip(quality, 0.0, 1.0)
    cost_per_model = check_bool(cost_per_model, "cost_per_model", "synthetic_dataset")
    shape = (1, n_models) if cost_per_model else (n_users, n_models)
    cost = cost_high - (cost_high - cost_low) * rng.uniform(0.0, 1.0, shape)
    return quality, np.broadcast_to(cost, (n_users, n_models)).copy()


@dataclass
class SimulationResult:
    """One simulated run. Arrays have one entry per step plus the starting point."""

    cum_cost: np.ndarray        # cumulative cost (or number of runs when cost-oblivious)
    avg_loss: np.ndarray        # mean accuracy loss over tenants
    max_loss: np.ndarray        # worst tenant's accuracy loss
    trace: List[Tuple[int, int, float, float]] = field(default_factory=list)  # (tenant, model, quality, cost)
    test_users: List[int] = field(default_factory=list)
    optimum: Optional[np.ndarray] = None  # best quality among each tenant's models


def simulate(quality, cost=None, policy: str = "hybrid", cost_aware: bool = True, seed: int = 0, *,
             n_test: int = 10, budget_fraction: float = 0.5, max_steps: Optional[int] = None,
             interrupt_check: Optional[Callable[[], None]] = None, **scheduler_options) -> SimulationResult:
    """Run the scheduler on ``quality`` (users x models) and ``cost`` without training.

    Users are shuffled with ``seed``; the first ``n_test`` become tenants, the rest form
    the history from which GP priors are estimated. Estimated costs equal the true
    costs. The run stops when the spent cost reaches ``budget_fraction`` of the tenants'
    total cost (cost of each run is 1 when ``cost_aware`` is false), after
    ``max_steps`` steps, or when every candidate was trained.
    """
    quality = np.asarray(quality, dtype=float)
    if quality.ndim != 2 or quality.size == 0 or not np.isfinite(quality).all():
        raise InvalidParameterError(f"The 'quality' value of {OWNER} must be a non-empty finite 2-D matrix; "
                                    f"got shape {quality.shape}", hint="Pass a users x models array.")
    if quality.min() < 0 or quality.max() > 1:
        # the accuracy loss (appendix A) starts every tenant at quality 0, before its first model
        raise InvalidParameterError(f"The 'quality' value of {OWNER} must lie in [0, 1]; got values in "
                                    f"[{quality.min():g}, {quality.max():g}]",
                                    hint="Pass accuracies (or rescale the metric to [0, 1]).")
    cost = np.ones_like(quality) if cost is None else np.asarray(cost, dtype=float)
    if cost.shape != quality.shape or not (cost > 0).all():
        raise InvalidParameterError(f"The 'cost' value of {OWNER} must be a positive matrix of shape "
                                    f"{quality.shape}; got shape {cost.shape}", hint="One positive cost per entry.")
    cost_aware = check_bool(cost_aware, "cost_aware", OWNER)
    n_users, n_models = quality.shape
    n_test = check_number(n_test, "n_test", OWNER, ge=1, le=n_users, integer=True)
    budget_fraction = check_number(budget_fraction, "budget_fraction", OWNER, gt=0, le=1)
    rng = seeded_rng(seed, OWNER)
    perm = rng.permutation(n_users)
    test, train = perm[:n_test], perm[n_test:]
    keys = [f"m{j}" for j in range(n_models)]
    history = [dict(zip(keys, quality[i].tolist())) for i in train]
    sched = Scheduler(policy, cost_aware=cost_aware, seed=int(seed), history=history, **scheduler_options)
    run_cost = cost[test] if cost_aware else np.ones((n_test, n_models))
    for t, i in enumerate(test):
        sched.add_tenant(f"u{t}", keys, cost[i].tolist() if cost_aware else None)
    best_possible = quality[test].max(axis=1)
    best = np.zeros(n_test)
    budget = budget_fraction * float(run_cost.sum())
    limit = n_test * n_models if max_steps is None else int(max_steps)
    spent = 0.0
    cum, avg, worst = [0.0], [float((best_possible - best).mean())], [float((best_possible - best).max())]
    trace = []
    while spent < budget - 1e-12 and len(trace) < limit:
        if interrupt_check is not None:
            interrupt_check()                   # a backend's cancel check, every step
        step = sched.next_step()
        if step is None:
            break
        tenant, key = step
        t, j = int(tenant[1:]), int(key[1:])
        q, c = float(quality[test[t], j]), float(run_cost[t, j])
        sched.observe(tenant, key, q, c)
        best[t] = max(best[t], q)
        spent += c
        trace.append((t, j, q, c))
        cum.append(spent)
        loss = best_possible - best
        avg.append(float(loss.mean()))
        worst.append(float(loss.max()))
    return SimulationResult(np.array(cum), np.array(avg), np.array(worst), trace, [int(i) for i in test],
                            best_possible.copy())


def loss_on_grid(result: SimulationResult, grid: np.ndarray, which: str = "avg") -> np.ndarray:
    """Step-function value of a run's loss curve at each cost in ``grid``."""
    curve = result.avg_loss if which == "avg" else result.max_loss
    pos = np.searchsorted(result.cum_cost, grid, side="right") - 1
    return curve[np.clip(pos, 0, len(curve) - 1)]


def aggregate(results: Sequence[SimulationResult], grid: np.ndarray) -> Dict[str, np.ndarray]:
    """Across seeds: mean of the average loss, mean of the per-run worst tenant's loss,
    and the worst run's average loss (the paper's "worst case across runs")."""
    avg = np.array([loss_on_grid(r, grid, "avg") for r in results])
    mx = np.array([loss_on_grid(r, grid, "max") for r in results])
    return {"avg": avg.mean(axis=0), "worst_tenant": mx.mean(axis=0), "worst_run": avg.max(axis=0)}


def cost_to_reach(grid: np.ndarray, curve: np.ndarray, threshold: float) -> float:
    """First grid cost where ``curve`` is at or below ``threshold`` (inf if never)."""
    hit = np.nonzero(curve <= threshold)[0]
    return float(grid[hit[0]]) if hit.size else float("inf")


def tenant_sequences(results: Sequence[SimulationResult]) -> List[List[Tuple[float, float]]]:
    """Each tenant's own sequence of trained models, ``[(cost, quality), ...]`` in order.

    ``results`` are runs of the same dataset and seed under different policies. With fixed
    priors (``refresh_every`` = 0, as in :func:`simulate`) a tenant's GP-UCB depends only
    on its own outcomes, so the runs differ only in how the tenants' sequences are
    interleaved; every run must therefore show a prefix of the same sequence. The longest
    prefix seen in any run is returned. Raises InvalidParameterError when the runs disagree.
    """
    if not results:
        raise InvalidParameterError("The 'results' value of tenant_sequences must list at least one run; got []",
                                    hint="Pass the runs of one seed, e.g. one per policy.")
    users = results[0].test_users
    seqs: List[List[Tuple[float, float, int]]] = [[] for _ in users]
    for r in results:
        if r.test_users != users:
            raise InvalidParameterError("The runs given to tenant_sequences have different tenants",
                                        hint="Pass runs of the same dataset and seed.")
        per: List[List[Tuple[float, float, int]]] = [[] for _ in users]
        for t, j, q, c in r.trace:
            per[t].append((c, q, j))
        for t, mine in enumerate(per):
            common = min(len(mine), len(seqs[t]))
            if mine[:common] != seqs[t][:common]:
                raise InvalidParameterError(
                    f"Tenant {t} trains its models in a different order in two of the runs given to "
                    "tenant_sequences", hint="Per-tenant sequences are policy-independent only with fixed priors "
                    "(refresh_every = 0) and the same scheduler options.")
            if len(mine) > len(seqs[t]):
                seqs[t] = mine
    return [[(c, q) for c, q, _j in seq] for seq in seqs]


def _tenant_options(seq: Sequence[Tuple[float, float]], optimum: float) -> List[Tuple[float, float]]:
    """(cost of a prefix, loss after it) for the prefixes that lower the tenant's loss."""
    out = [(0.0, float(optimum))]
    spent, best = 0.0, 0.0
    for c, q in seq:
        spent += c
        if q > best:
            best = q
            out.append((spent, float(optimum) - best))
    return out


def best_interleaving_cost(sequences: Sequence[Sequence[Tuple[float, float]]], optimum: Sequence[float],
                           threshold: float) -> float:
    """Least cumulative cost at which *some* interleaving of the tenants' sequences has an
    average accuracy loss <= ``threshold`` (inf when no prefixes get there).

    The interleaving only decides how long a prefix of each tenant's sequence has been
    trained, so this is: choose one prefix per tenant minimising the summed cost subject
    to summed loss <= n * threshold. Solved exactly by merging per-tenant (cost, loss)
    Pareto fronts. It bounds what any tenant-picking policy (with the same per-tenant
    GP-UCB) can achieve on these prefixes; a policy that trained a tenant beyond the
    longest observed prefix is not covered.
    """
    optimum = [float(o) for o in optimum]
    if len(optimum) != len(sequences):
        raise InvalidParameterError(f"The 'optimum' value of best_interleaving_cost must have one entry per tenant "
                                    f"({len(sequences)}); got {len(optimum)}", hint="Pass SimulationResult.optimum.")
    front = np.zeros((1, 2))                          # rows (cost, summed loss), Pareto-optimal
    for seq, opt in zip(sequences, optimum):
        opts = np.array(_tenant_options(seq, opt))
        merged = (front[:, None, :] + opts[None, :, :]).reshape(-1, 2)
        merged = merged[np.lexsort((merged[:, 1], merged[:, 0]))]
        keep = merged[:, 1] < np.minimum.accumulate(np.concatenate([[np.inf], merged[:-1, 1]]))
        front = merged[keep]
    ok = front[:, 1] <= len(optimum) * threshold + 1e-12
    return float(front[ok, 0].min()) if ok.any() else float("inf")


def regret_trace(steps: Sequence[Tuple[int, float]], optimum: Sequence[float], *,
                 costs: Optional[Sequence[float]] = None, best_so_far: bool = False) -> List[float]:
    """Cumulative multi-tenant regret after each step.

    ``steps`` lists (tenant index, observed quality). At each step every tenant pays
    optimum - (quality of its most recent model, or its best model when
    ``best_so_far``; 0 before it was ever served), weighted by the step's cost
    (1 when ``costs`` is None).
    """
    optimum = np.asarray(optimum, dtype=float)
    held = np.zeros_like(optimum)
    total, out = 0.0, []
    for s, (tenant, q) in enumerate(steps):
        held[tenant] = max(held[tenant], q) if best_so_far else q
        weight = 1.0 if costs is None else float(costs[s])
        total += weight * float((optimum - held).sum())
        out.append(total)
    return out
