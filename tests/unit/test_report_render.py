"""The report pages from plain data: series per configuration, histogram counts, the table
of chosen configurations, escaping, the scheduler's loss and the format check."""

import html.parser
import json
import math

import pytest

from groupml.errors import InvalidParameterError
from groupml.report import check_format, render_run, render_scheduler
from groupml.report._page import scheduler_loss


class _Tags(html.parser.HTMLParser):
    def __init__(self, text):
        super().__init__()
        self.tags = []
        self.text = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def all(self, tag, **want):
        return [a for t, a in self.tags if t == tag and all(a.get(k.replace("_", "-")) == v for k, v in want.items())]


def _run():
    trials, models = [], []
    for g in range(6):
        key = json.dumps({"country": f"c{g}"})
        for tid, l2 in enumerate((0.0, 0.1, 1.0)):
            curve = [0.7 - 0.05 * e * (1 + tid) for e in range(3 if tid else 1)]
            trials.append({"group_key": key, "trial_id": tid, "params": {"l2": l2}, "status": "converged",
                           "score": 0.8, "epoch_scores": curve})
        models.append({"group_key": key, "status": "ok", "params": {"l2": 0.1 if g % 2 else 1.0},
                       "metric": "accuracy", "score": 0.7 + 0.03 * g, "message": None})
    models.append({"group_key": json.dumps({"country": "<script>x</script>"}), "status": "too_small",
                   "params": None, "metric": None, "score": None, "message": "the group has 1 usable rows"})
    return {"run": {"run_id": 4, "family": "logistic", "source": "public.clicks", "status": "done"},
            "trials": trials, "models": models,
            "phases": [["training (measured)", 1.5], ["reading, planning and writing", 0.25]]}


def test_a_run_page_holds_a_series_per_configuration_and_a_row_per_group():
    page = render_run(_run())
    doc = _Tags(page)
    curves = doc.all("polyline", data_series="learning-curve") + doc.all("circle", data_series="learning-curve")
    assert sorted(c["data-config"] for c in curves) == ["C1", "C2", "C3"]
    assert {c["data-params"] for c in curves} == {'{"l2": 0.0}', '{"l2": 0.1}', '{"l2": 1.0}'}
    assert len(doc.all("circle", data_series="learning-curve")) == 1       # one epoch block: a dot
    bins = doc.all("rect", data_series="score-histogram")
    assert sum(int(b["data-count"]) for b in bins) == 6
    rows = [a for t, a in doc.tags if t == "tr" and "data-group" in a]
    assert len(rows) == 7
    chosen = {r["data-group"]: r["data-config"] for r in rows}
    assert chosen['{"country": "c1"}'] == "C2" and chosen['{"country": "c0"}'] == "C3"
    assert {b["data-label"] for b in doc.all("rect") if "data-label" in b} == \
        {"training (measured)", "reading, planning and writing"}
    assert "too_small: 1" in page


def test_text_from_the_catalog_is_escaped_and_nothing_is_loaded():
    page = render_run(_run())
    assert "<script>" not in page and "&lt;script&gt;" in page
    low = page.lower()
    assert " src=" not in low and " href=" not in low and "url(" not in low


def test_the_median_curve_skips_non_finite_losses_and_empty_runs_still_render():
    data = _run()
    for t in data["trials"]:
        if t["trial_id"] == 1:
            t["epoch_scores"] = [math.nan, 0.5, math.inf]
    doc = _Tags(render_run(data))
    c2 = [c for c in doc.all("circle", data_series="learning-curve")] + \
         [c for c in doc.all("polyline", data_series="learning-curve") if c["data-config"] == "C2"]
    assert any(c["data-config"] == "C2" for c in c2)
    empty = render_run({"run": {"run_id": 1}, "trials": [], "models": [], "phases": []})
    assert "no finite values to plot" in empty and "nothing measured" in empty


def test_the_scheduler_loss_falls_to_zero():
    obs = [{"step": 1, "job_id": 1, "status": "ok", "quality": 0.6},
           {"step": 2, "job_id": 2, "status": "ok", "quality": 0.5},
           {"step": 3, "job_id": 1, "status": "failed", "quality": None},
           {"step": 4, "job_id": 2, "status": "ok", "quality": 0.9},
           {"step": 5, "job_id": 1, "status": "ok", "quality": 0.8}]
    loss, per_job = scheduler_loss(obs)
    assert loss == [(1, pytest.approx(0.6)), (2, pytest.approx(0.6)), (4, pytest.approx(0.2)), (5, 0.0)]
    assert per_job[1] == [(1, 0.6), (5, 0.8)] and per_job[2] == [(2, 0.5), (4, 0.9)]
    doc = _Tags(render_scheduler({"observations": obs}))
    (line,) = doc.all("polyline", data_series="scheduler-loss")
    assert len(line["points"].split()) == 4
    assert sorted(p["data-job"] for p in doc.all("polyline", data_series="job-best")) == ["1", "2"]


@pytest.mark.parametrize("bad", ["pdf", "", None, 3, "svg"])
def test_the_format_must_be_html_or_json(bad):
    with pytest.raises(InvalidParameterError) as info:
        check_format(bad)
    assert info.value.sqlstate == "22023" and "'html', 'json'" in info.value.message and info.value.hint
    assert check_format(" HTML ") == "html" and check_format("json") == "json"
