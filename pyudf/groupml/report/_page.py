"""The report pages: a run (:func:`render_run`) and the multi-tenant scheduler
(:func:`render_scheduler`), from plain data."""

from __future__ import annotations

import json
import math
import statistics
from html import escape
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from ..errors import InvalidParameterError
from ..validation import shown
from . import _svg

FORMATS = ("html", "json")
#: groups listed in the table of chosen configurations (the rest are counted)
MAX_TABLE_ROWS = 500
#: per-configuration curves drawn (the configurations most often chosen first)
MAX_CURVES = 24

STYLE = """
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1000px}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;font-size:.85em}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
code{font-size:.85em}.chart text{font-size:11px;fill:#333}.axis{stroke:#333}.grid{stroke:#eee}
.legend{list-style:none;padding:0;font-size:.85em}.swatch{display:inline-block;width:12px;height:12px;margin-right:4px}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 12px}dt{font-weight:bold}
"""


def check_format(fmt: Any, owner: str = "report") -> str:
    if not isinstance(fmt, str) or fmt.strip().lower() not in FORMATS:
        raise InvalidParameterError(
            f"The 'format' value of {owner} must be one of {', '.join(repr(f) for f in FORMATS)}; got {shown(fmt)}",
            hint="'html' is a self-contained page (inline SVG); 'json' is the data the page is drawn from.")
    return fmt.strip().lower()


def _page(title: str, sections: Sequence[Tuple[str, str, str]]) -> str:
    body = "".join(f'<section id="{escape(sid)}"><h2>{escape(head)}</h2>{html}</section>'
                   for sid, head, html in sections)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{STYLE}</style></head>"
            f"<body><h1>{escape(title)}</h1>{body}</body></html>\n")


def _key(params: Any) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def _configurations(trials: Sequence[Mapping], models: Sequence[Mapping]) -> Dict[str, Dict[str, Any]]:
    """Every distinct configuration (its params' JSON) -> label C1, C2, ... in order of first
    trial id, with how many groups chose it."""
    configs: Dict[str, Dict[str, Any]] = {}
    for t in sorted(trials, key=lambda t: (int(t.get("trial_id") or 0))):
        k = _key(t.get("params"))
        if k not in configs:
            configs[k] = {"label": f"C{len(configs) + 1}", "params": t.get("params"), "chosen": 0}
    for m in models:
        if m.get("params") is None:
            continue
        k = _key(m["params"])
        if k not in configs:
            configs[k] = {"label": f"C{len(configs) + 1}", "params": m["params"], "chosen": 0}
        configs[k]["chosen"] += 1
    return configs


def _median_curve(curves: Sequence[Sequence[Any]]) -> List[Tuple[int, Optional[float]]]:
    """Per epoch block (1-based), the median over groups of the finite losses."""
    n = max((len(c) for c in curves), default=0)
    out = []
    for e in range(n):
        vals = [float(c[e]) for c in curves if e < len(c) and c[e] is not None and math.isfinite(float(c[e]))]
        out.append((e + 1, statistics.median(vals) if vals else None))
    return out


def _summary(run: Mapping[str, Any]) -> str:
    rows = [(k, run.get(k)) for k in ("run_id", "kind", "status", "source", "group_by", "features", "label",
                                      "family", "strategy", "workers", "n_groups", "groups_done", "started_at",
                                      "finished_at", "created_by") if run.get(k) is not None]
    return "<dl>" + "".join(f"<dt>{escape(k)}</dt><dd>{escape(str(v))}</dd>" for k, v in rows) + "</dl>"


def render_run(data: Mapping[str, Any]) -> str:
    """The HTML page of one run. ``data``: ``run`` (the runs row, plus ``strategy`` and
    ``workers`` of a planner-driven run), ``trials`` (group_key, trial_id, params, status,
    score, epoch_scores), ``models`` (group_key, status, params, metric, score, message) and
    ``phases`` ([label, seconds], ...)."""
    run, trials, models = data["run"], list(data.get("trials") or []), list(data.get("models") or [])
    configs = _configurations(trials, models)
    ranked = sorted(configs.items(), key=lambda kv: (-kv[1]["chosen"], int(kv[1]["label"][1:])))
    drawn = ranked[:MAX_CURVES]
    series, entries = [], []
    for i, (k, c) in enumerate(drawn):
        curves = [t.get("epoch_scores") or [] for t in trials if _key(t.get("params")) == k]
        pts = _median_curve(curves)
        series.append({"name": f"{c['label']}: median over {len(curves)} group(s)", "points": pts,
                       "colour": _svg.colour(i),
                       "attrs": {"series": "learning-curve", "config": c["label"], "params": k, "groups": len(curves)}})
        entries.append((_svg.colour(i), f"{c['label']} (chosen by {c['chosen']})", k))
    curves_html = _svg.line_chart("Validation loss per epoch block, per configuration (median over groups)",
                                  "learning-curves", series, x_label="epoch block", y_label="validation loss")
    curves_html += _svg.legend(entries)
    if len(ranked) > len(drawn):
        curves_html += f"<p>{len(ranked) - len(drawn)} more configuration(s) not drawn.</p>"

    metric = next((m.get("metric") for m in models if m.get("metric")), None)
    scores = [m.get("score") for m in models if m.get("status") == "ok"]
    hist = _svg.histogram(f"Validation {metric or 'score'} of the selected model, per group", "score-histogram",
                          scores, x_label=f"validation {metric or 'score'}", attrs={"series": "score-histogram"})
    not_ok: Dict[str, int] = {}
    for m in models:
        if m.get("status") != "ok":
            not_ok[str(m.get("status"))] = not_ok.get(str(m.get("status")), 0) + 1
    if not_ok:
        hist += "<p>Groups without a model: " + escape(", ".join(f"{k}: {v}" for k, v in sorted(not_ok.items()))) + "</p>"

    rows, attrs = [], []
    for m in sorted(models, key=lambda m: str(m.get("group_key")))[:MAX_TABLE_ROWS]:
        label = configs[_key(m["params"])]["label"] if m.get("params") is not None else ""
        score = m.get("score")
        rows.append([m.get("group_key"), m.get("status"), label, "" if m.get("params") is None else _key(m["params"]),
                     "" if score is None else f"{float(score):.6g}", m.get("message") or ""])
        attrs.append({"group": str(m.get("group_key")), "config": label})
    chosen = _svg.table(["group", "status", "configuration", "params", f"validation {metric or 'score'}", "message"],
                        rows, kind="chosen", row_attrs=attrs)
    if len(models) > MAX_TABLE_ROWS:
        chosen += f"<p>{len(models) - MAX_TABLE_ROWS} more group(s) not listed.</p>"

    phases = _svg.bars("Time per phase", "phases", [(str(k), v) for k, v in data.get("phases") or []])
    title = f"groupml run {run.get('run_id')}: {run.get('family')} on {run.get('source')}"
    return _page(title, [("summary", "Run", _summary(run)),
                         ("learning-curves", "Learning curves", curves_html),
                         ("scores", "Validation scores", hist),
                         ("chosen", "Chosen configuration per group", chosen),
                         ("phases", "Time per phase", phases)])


def scheduler_loss(observations: Sequence[Mapping[str, Any]]) -> Tuple[List[Tuple[int, float]], Dict[Any, List]]:
    """The scheduler's loss after every step and each job's best quality so far.

    The loss at step t is the sum over jobs of (the job's best quality in the log - its best
    quality up to step t); a job with no finished candidate yet counts from its worst quality
    in the log. It ends at 0: how fast it falls is how well the scheduler served the jobs."""
    ok = sorted((o for o in observations if o.get("status") == "ok" and o.get("quality") is not None
                 and math.isfinite(float(o["quality"]))), key=lambda o: int(o["step"]))
    best_final: Dict[Any, float] = {}
    worst: Dict[Any, float] = {}
    for o in ok:
        q = float(o["quality"])
        best_final[o["job_id"]] = max(best_final.get(o["job_id"], q), q)
        worst[o["job_id"]] = min(worst.get(o["job_id"], q), q)
    so_far = dict(worst)
    loss, per_job = [], {j: [] for j in best_final}
    for o in ok:
        j = o["job_id"]
        so_far[j] = max(so_far[j], float(o["quality"])) if j in so_far else float(o["quality"])
        per_job[j].append((int(o["step"]), so_far[j]))
        loss.append((int(o["step"]), sum(best_final[k] - so_far[k] for k in best_final)))
    return loss, per_job


def render_scheduler(data: Mapping[str, Any]) -> str:
    """The HTML page of the multi-tenant scheduler. ``data``: ``observations`` (step, job_id,
    tenant, candidate, status, quality, metric, cost_seconds, policy), as scheduler_log shows them."""
    obs = list(data.get("observations") or [])
    loss, per_job = scheduler_loss(obs)
    loss_html = _svg.line_chart("Scheduler loss after every step", "scheduler-loss",
                                [{"name": "loss", "points": loss, "attrs": {"series": "scheduler-loss"}}],
                                x_label="scheduler step", y_label="sum over jobs of (best - best so far)")
    tenants = {o["job_id"]: o.get("tenant") for o in obs}
    metrics = {o["job_id"]: o.get("metric") for o in obs}
    jobs = sorted(per_job)[:MAX_CURVES]
    series = [{"name": f"job {j} ({tenants.get(j)}, {metrics.get(j)})", "points": per_job[j],
               "colour": _svg.colour(i), "attrs": {"series": "job-best", "job": j}} for i, j in enumerate(jobs)]
    best_html = _svg.line_chart("Best quality so far, per job", "job-best", series, x_label="scheduler step",
                                y_label="validation quality (higher is better)")
    best_html += _svg.legend([(_svg.colour(i), f"job {j}", f"{tenants.get(j)}: {metrics.get(j)}")
                              for i, j in enumerate(jobs)])
    rows = [[o.get("step"), o.get("tenant"), o.get("job_id"), o.get("candidate"), o.get("status"),
             "" if o.get("quality") is None else f"{float(o['quality']):.6g}",
             "" if o.get("cost_seconds") is None else f"{float(o['cost_seconds']):.3g}", o.get("policy")]
            for o in sorted(obs, key=lambda o: int(o["step"]))[:MAX_TABLE_ROWS]]
    steps = _svg.table(["step", "tenant", "job", "candidate", "status", "quality", "seconds", "policy"], rows,
                       kind="steps")
    cost = sum(float(o.get("cost_seconds") or 0.0) for o in obs)
    summary = (f"<dl><dt>steps</dt><dd>{len(obs)}</dd><dt>jobs</dt><dd>{len(tenants)}</dd>"
               f"<dt>training seconds</dt><dd>{cost:.3g}</dd></dl>")
    return _page("groupml multi-tenant scheduler", [("summary", "Scheduler", summary),
                                                     ("scheduler-loss", "Loss curve", loss_html),
                                                     ("job-best", "Best quality per job", best_html),
                                                     ("steps", "Steps", steps)])
