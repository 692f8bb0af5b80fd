"""Benchmark of the multi-tenant scheduler core (groupml.tenancy) in simulation.

For each synthetic dataset SYN(sigma_M, alpha) and each mode (cost-oblivious /
cost-aware) it runs GREEDY, HYBRID, ROUNDROBIN and RANDOM, and our EIRATE (expected
improvement per unit of cost; "eirate_q1" = with quality_max 1, the generator's upper
clip) over N seeds (a fresh dataset
and train/test split per seed), averages the accuracy-loss curves over seeds on a common
cost grid, and reports the cost needed for the average accuracy loss to fall below 0.05
and 0.02, plus the speed-up of each policy over ROUNDROBIN (RR cost / policy cost; > 1
means faster than round-robin).

Two diagnostics explain the speed-ups:

* "bound": with fixed priors each tenant's own GP-UCB sequence does not depend on the
  tenant-picking policy, only the interleaving does. The cheapest interleaving of the
  same per-tenant sequences that reaches the threshold is computed exactly per seed
  (groupml.tenancy.best_interleaving_cost); "x RR" of the bound is the most any
  tenant-picking policy could gain over ROUNDROBIN (ratio of per-seed means).
* "solved": share of the spend, until the run's own average loss first reaches 0.02,
  that went to tenants which already held their best model.

It also times scheduling decisions for 50 tenants x 100 candidates (goal <= 20 ms).

    python bench/bench_tenancy_sim.py            # 20 seeds, 200 users x 100 models (~5 min)
    python bench/bench_tenancy_sim.py --quick    # 3 seeds, small sizes, < 30 s
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "pyudf"))

from groupml.tenancy import (Scheduler, aggregate, best_interleaving_cost, cost_to_reach,  # noqa: E402
                             simulate, synthetic_dataset, tenant_sequences)

DATASETS = [(0.01, 0.1), (0.01, 1.0), (0.5, 0.1), (0.5, 1.0)]
# label -> (policy, scheduler options)
VARIANTS = {"greedy": ("greedy", {}), "hybrid": ("hybrid", {}), "eirate": ("eirate", {}),
            "eirate_q1": ("eirate", {"quality_max": 1.0}), "roundrobin": ("roundrobin", {}),
            "random": ("random", {})}
POLICIES = list(VARIANTS)
THRESHOLDS = [0.05, 0.02]
GOAL = 2.0


def first_reach(result, threshold):
    """Cumulative cost at which one run's average loss first is <= threshold (inf if never)."""
    hit = np.nonzero(result.avg_loss <= threshold)[0]
    return float(result.cum_cost[hit[0]]) if hit.size else float("inf")


def solved_share(result, threshold=0.02):
    """Share of the spend (until the run's average loss first is <= threshold) on tenants
    that already held their best model."""
    best = np.zeros(len(result.optimum))
    wasted = total = 0.0
    for step, (t, _j, q, c) in enumerate(result.trace):
        if result.avg_loss[step] <= threshold:
            break
        if best[t] >= result.optimum[t]:
            wasted += c
        total += c
        best[t] = max(best[t], q)
    return wasted / total if total > 0 else 0.0


def run_suite(args):
    rows = []
    for sigma_m, alpha in DATASETS:
        for aware in args.modes:
            results = {p: [] for p in POLICIES}
            bound = {thr: [] for thr in THRESHOLDS}
            for seed in range(args.seeds):
                q, c = synthetic_dataset(args.users, args.models, sigma_m, alpha, seed=1000 + seed,
                                         cost_low=args.cost_low, cost_per_model=args.cost_per_model)
                runs = [simulate(q, c, VARIANTS[p][0], aware, seed=seed, n_test=args.tenants,
                                 budget_fraction=args.budget, beta_scale=args.beta_scale, beta_rule=args.beta_rule,
                                 noise=args.gp_noise, **VARIANTS[p][1])
                        for p in POLICIES]
                for p, r in zip(POLICIES, runs):
                    results[p].append(r)
                seqs = tenant_sequences(runs)    # raises if the policies' per-tenant sequences differed
                for thr in THRESHOLDS:
                    bound[thr].append(best_interleaving_cost(seqs, runs[0].optimum, thr))
            end = max(r.cum_cost[-1] for rs in results.values() for r in rs)
            # The seed-averaged loss is a step function that changes only at the runs' cumulative
            # costs, so evaluating it at every breakpoint gives exact crossing costs. (A uniform
            # grid of --grid points quantises cost-aware crossings, which happen within the first
            # percent of the budget, to whole grid steps.)
            grid = np.linspace(0.0, end, args.grid)
            if not args.uniform_grid:
                grid = np.unique(np.concatenate([grid] + [r.cum_cost for rs in results.values() for r in rs]))
            reach = {}
            for p in POLICIES:
                agg = aggregate(results[p], grid)
                reach[p] = {thr: cost_to_reach(grid, agg["avg"], thr) for thr in THRESHOLDS}
                for thr in THRESHOLDS:
                    reach[p][f"seed_mean_{thr}"] = float(np.mean([first_reach(r, thr) for r in results[p]]))
                # mean average-loss over the first 10% of the budget (area / cost; exact for steps)
                cut = 0.1 * end
                g = np.append(grid[grid < cut], cut)
                vals = aggregate(results[p], g)["avg"]
                reach[p]["early_mean"] = float(np.sum(vals[:-1] * np.diff(g)) / cut)
                reach[p]["solved_share"] = float(np.mean([solved_share(r) for r in results[p]]))
                reach[p]["final_avg"] = float(agg["avg"][-1])
                reach[p]["final_worst_tenant"] = float(agg["worst_tenant"][-1])
                reach[p]["final_worst_run"] = float(agg["worst_run"][-1])
            reach["bound"] = {f"seed_mean_{thr}": float(np.mean(bound[thr])) for thr in THRESHOLDS}
            rows.append({"dataset": f"SYN({sigma_m},{alpha})", "cost_aware": aware, "reach": reach})
    return rows


def _fmt_cost(x):
    return "   never" if not np.isfinite(x) else f"{x:8.2f}"


def _r(rr, p):
    """RR cost / policy cost as a number (nan when undefined, inf when only the policy got there)."""
    if not np.isfinite(p) or p <= 0:
        return float("nan")
    return float("inf") if not np.isfinite(rr) else rr / p


def _fmt_ratio(x):
    if np.isnan(x):
        return "   -  "
    return "  >max" if np.isinf(x) else f"{x:6.2f}"


def print_suite(rows, args):
    print(f"\nAccuracy-loss benchmark: {args.seeds} seeds, {args.users} users x {args.models} models, "
          f"{args.tenants} tenants, budget {args.budget:.0%} of the tenants' total cost, "
          f"beta {args.beta_rule} x {args.beta_scale:g}, GP noise {args.gp_noise:g}, "
          f"costs U({args.cost_low:g}, 1] per {'model' if args.cost_per_model else '(user, model)'}")
    print("cost to reach = first point of the seed-averaged average-loss curve <= threshold;"
          " x RR = ROUNDROBIN cost / policy cost")
    header = (f"{'dataset':<14} {'mode':<9} {'policy':<10} {'<=0.05':>8} {'<=0.02':>8} "
              f"{'x RR .05':>8} {'x RR .02':>8} {'early':>7} {'x RR':>6} {'solved':>6} "
              f"{'final avg':>9} {'final wT':>8} {'final wR':>8}")
    print(header)
    print("-" * len(header))
    for row in rows:
        rr = row["reach"]["roundrobin"]
        for p in POLICIES:
            r = row["reach"][p]
            print(f"{row['dataset']:<14} {('aware' if row['cost_aware'] else 'oblivious'):<9} {p:<10} "
                  f"{_fmt_cost(r[0.05])} {_fmt_cost(r[0.02])} {_fmt_ratio(_r(rr[0.05], r[0.05])):>8} "
                  f"{_fmt_ratio(_r(rr[0.02], r[0.02])):>8} {r['early_mean']:7.4f} "
                  f"{_fmt_ratio(_r(rr['early_mean'], r['early_mean'])):>6} {r['solved_share']:6.2f} "
                  f"{r['final_avg']:9.4f} {r['final_worst_tenant']:8.4f} {r['final_worst_run']:8.4f}")
        b = row["reach"]["bound"]
        parts = []
        for thr in THRESHOLDS:
            key = f"seed_mean_{thr}"
            others = "".join(f", {p} {_fmt_cost(row['reach'][p][key]).strip()}"
                             f" (x{_fmt_ratio(_r(rr[key], row['reach'][p][key])).strip()})"
                             for p in POLICIES if p in ("greedy", "eirate_q1"))
            parts.append(f"<= {thr}: RR {_fmt_cost(rr[key]).strip()}{others}, best interleaving "
                         f"{_fmt_cost(b[key]).strip()} (x{_fmt_ratio(_r(rr[key], b[key])).strip()})")
        print(f"{'':<25}per-seed means: " + "; ".join(parts))
        print()
    print("(cost unit: number of runs when cost-oblivious, synthetic cost units when cost-aware;"
          " early = mean of the average loss over the first 10% of the budget, x RR its ratio RR/policy;"
          " solved = share of spend before the run reaches 0.02 on tenants already holding their best model;"
          " wT = mean over seeds of the worst tenant's loss, wR = worst seed's average loss)")
    print(f"\nGoal: cost-aware GREEDY/HYBRID (and our EIRATE) >= {GOAL:g}x ROUNDROBIN (seed-averaged curve; the bound is the"
          " most any tenant-picking policy could get, per-seed means)")
    shown = [p for p in POLICIES if p not in ("roundrobin", "random")]
    print(f"{'dataset':<14} {'thr':>5} " + " ".join(f"{p:>9}" for p in shown) + f" {'bound':>7}  met?")
    for row in rows:
        if not row["cost_aware"]:
            continue
        rr, b = row["reach"]["roundrobin"], row["reach"]["bound"]
        for thr in THRESHOLDS:
            ratios = {p: _r(rr[thr], row["reach"][p][thr]) for p in shown}
            bo = _r(rr[f"seed_mean_{thr}"], b[f"seed_mean_{thr}"])
            met = [p for p, x in ratios.items() if x >= GOAL]
            print(f"{row['dataset']:<14} {thr:>5} " + " ".join(f"{_fmt_ratio(ratios[p]):>9}" for p in shown)
                  + f" {_fmt_ratio(bo):>7}  {'yes: ' + ', '.join(met) if met else 'no'}")


def latency(args):
    q, c = synthetic_dataset(150, 100, 0.5, 0.1, seed=7)
    history = [{f"m{j}": float(q[i, j]) for j in range(100)} for i in range(50, 150)]
    out = {}
    print(f"\nDecision latency, 50 tenants x 100 candidates, {args.decisions} decisions (goal <= 20 ms):")
    for policy, options in (("hybrid", {}), ("eirate", {"quality_max": 1.0})):
        t0 = time.perf_counter()
        sched = Scheduler(policy, history=history, **options)
        for i in range(50):
            sched.add_tenant(f"u{i}", [f"m{j}" for j in range(100)], c[i].tolist())
        setup = time.perf_counter() - t0
        dec, obs = [], []
        for _ in range(args.decisions):
            t = time.perf_counter()
            tenant, model = sched.next_step()
            dec.append(time.perf_counter() - t)
            t = time.perf_counter()
            sched.observe(tenant, model, float(q[int(tenant[1:]), int(model[1:])]), 1.0)
            obs.append(time.perf_counter() - t)
        t = time.perf_counter()
        state = json.dumps(sched.state_dict())
        Scheduler.from_state(json.loads(state))
        resume = time.perf_counter() - t
        dec, obs = np.array(dec) * 1e3, np.array(obs) * 1e3
        print(f"  {policy}:")
        print(f"    setup (50 priors)       {setup * 1e3:8.2f} ms")
        print(f"    next_step  median/p95   {np.median(dec):8.3f} / {np.percentile(dec, 95):.3f} ms")
        print(f"    observe    median/p95   {np.median(obs):8.3f} / {np.percentile(obs, 95):.3f} ms")
        print(f"    state_dict->from_state  {resume * 1e3:8.2f} ms  ({len(state) / 1024:.0f} KiB JSON)")
        prefix = "" if policy == "hybrid" else f"{policy}_"
        out.update({f"{prefix}next_step_median_ms": float(np.median(dec)),
                    f"{prefix}next_step_p95_ms": float(np.percentile(dec, 95)),
                    f"{prefix}observe_median_ms": float(np.median(obs)), f"{prefix}resume_ms": resume * 1e3})
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="3 seeds, small sizes (< 30 s)")
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--users", type=int, default=None)
    ap.add_argument("--models", type=int, default=None)
    ap.add_argument("--tenants", type=int, default=10)
    ap.add_argument("--budget", type=float, default=0.5, help="fraction of the tenants' total cost")
    ap.add_argument("--beta-scale", type=float, default=1.0)
    ap.add_argument("--beta-rule", choices=["theorem1", "theorem", "algorithm"], default="theorem1",
                    help="theorem1: 2 log(pi^2 K t^2 / (6 delta)) of Theorem 1 (the scheduler's default); "
                         "theorem: with n K_max, Theorems 2-3; algorithm: log(K t^2 / delta) of Algorithms 1-2")
    ap.add_argument("--gp-noise", type=float, default=0.02, help="observation noise sd of the GP")
    ap.add_argument("--cost-low", type=float, default=0.0,
                    help="synthetic costs are uniform on (cost-low, 1]; 0 = the paper's U(0, 1)")
    ap.add_argument("--cost-per-model", action="store_true",
                    help="one cost per model shared by all users (default: one per user and model)")
    ap.add_argument("--policies", default=",".join(POLICIES),
                    help="comma-separated subset of " + ", ".join(POLICIES) + " (roundrobin is always run)")
    ap.add_argument("--grid", type=int, default=400)
    ap.add_argument("--uniform-grid", action="store_true",
                    help="evaluate only on the uniform grid (the old, quantised measurement)")
    ap.add_argument("--decisions", type=int, default=None)
    ap.add_argument("--json", default=None, help="also write the results to this file")
    args = ap.parse_args(argv)
    args.seeds = args.seeds or (3 if args.quick else 20)
    args.users = args.users or (60 if args.quick else 200)
    args.models = args.models or (30 if args.quick else 100)
    args.decisions = args.decisions or (200 if args.quick else 1000)
    args.modes = [False, True]          # cost-oblivious, cost-aware
    chosen = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in chosen if p not in VARIANTS]
    if unknown:
        ap.error(f"unknown --policies {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
    POLICIES[:] = [p for p in VARIANTS if p in chosen or p == "roundrobin"]
    return args


def main(argv=None):
    args = parse_args(argv)
    t0 = time.perf_counter()
    rows = run_suite(args)
    print_suite(rows, args)
    lat = latency(args)
    print(f"\ntotal wall time {time.perf_counter() - t0:.1f} s")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"suite": [{**r, "reach": {p: {str(k): v for k, v in d.items()} for p, d in r["reach"].items()}}
                                 for r in rows], "latency": lat, "args": vars(args)}, fh, indent=1)


if __name__ == "__main__":
    main()
