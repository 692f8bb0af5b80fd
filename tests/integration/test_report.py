"""groupml.report / scheduler_report and `installer/groupml report`: the pages open in a real
headless browser with no console error and no network request, and their plots hold the
series the catalog says they should; bad input is a clear ERROR; the caller's rights apply."""

import json
import os
import subprocess

import psycopg
import pytest
from psycopg import sql

from groupml.datagen import create_table, grouped_classification
from headless import Elements, load
from pg_helpers import sql_error

pytestmark = pytest.mark.integration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GRID = '{"l2": [0.001, 0.1, 3.0], "max_iter": 60, "epoch_iters": 3}'


@pytest.fixture
def run_id(db):
    create_table(db, "clicks", grouped_classification(4000, 5, 3, seed=12, exponent=0.8))
    return db.execute("CALL groupml.train_groups('clicks', ARRAY['country'], ARRAY['f1', 'f2', 'f3'], 'clicked', "
                      "'logistic', %s::jsonb)", [GRID]).fetchone()[0]


def _self_contained(page):
    low = page.lower()
    for bad in ("<script", " src=", " href=", "@import", "url(", "<link", "<iframe", "<img"):
        assert bad not in low, bad
    # the only address on the page is the SVG namespace, which is a name, not a request
    assert low.replace('xmlns="http://www.w3.org/2000/svg"', "").count("http") == 0


def _open(tmp_path, page, name="report.html"):
    path = tmp_path / name
    path.write_text(page, encoding="utf-8")
    dom, console = load(path)
    assert console == [], console
    return Elements(dom)


def test_the_console_check_sees_errors(tmp_path):
    # the detector itself: a page that logs a console error and one that throws
    path = tmp_path / "bad.html"
    path.write_text('<!DOCTYPE html><html><body><script>console.error("boom-4711")</script>'
                    '<script>null.f()</script></body></html>')
    _, console = load(path)
    assert any("boom-4711" in c for c in console), console
    assert any("TypeError" in c for c in console), console


def test_the_run_report_opens_in_a_browser_with_every_series(db, run_id, tmp_path):
    page = db.execute("SELECT groupml.report(%s)", [run_id]).fetchone()[0]
    assert page.startswith("<!DOCTYPE html>")
    _self_contained(page)
    els = _open(tmp_path, page)

    # learning curves: one series per configuration the run tried, named by its params
    params = {json.dumps(p, sort_keys=True) for (p,) in
              db.execute("SELECT DISTINCT params FROM groupml.trials WHERE run_id = %s", [run_id])}
    curves = els.find("polyline", data_series="learning-curve") + els.find("circle", data_series="learning-curve")
    assert len(params) == 3
    assert {c["data-params"] for c in curves} == params and len(curves) == 3
    assert {c["data-config"] for c in curves} == {"C1", "C2", "C3"}
    assert len(els.find("polyline", data_series="learning-curve")) >= 1      # several epoch blocks
    # the score histogram counts every group with a model
    ok = db.execute("SELECT count(*) FROM groupml.models WHERE run_id = %s AND (fit).status = 'ok'",
                    [run_id]).fetchone()[0]
    bins = els.find("rect", data_series="score-histogram")
    assert ok == 5 and bins and sum(int(b["data-count"]) for b in bins) == ok
    # the chosen configuration of every group, matching the catalog
    rows = {r["data-group"]: r["data-config"] for r in els.find("tr") if "data-group" in r}
    label = {c["data-params"]: c["data-config"] for c in curves}
    chosen = {g: label[json.dumps(p, sort_keys=True)] for g, p in
              db.execute("SELECT group_key::text, (fit).params FROM groupml.models WHERE run_id = %s", [run_id])}
    assert rows == chosen
    # time per phase
    phases = {b["data-label"]: float(b["data-value"]) for b in els.find("rect") if "data-label" in b}
    assert "training (measured)" in phases and phases["run (wall clock of its calls)"] > 0

    data = json.loads(db.execute("SELECT groupml.report(%s, 'json')", [run_id]).fetchone()[0])
    assert data["run"]["run_id"] == run_id and len(data["models"]) == 5
    assert len(data["trials"]) == 15 and all(t["epoch_scores"] for t in data["trials"])


def test_report_rejects_bad_input(db, run_id):
    state, msg, hint = sql_error(db, "SELECT groupml.report(987654)")
    assert state == "42704" and "No run 987654" in msg and "FROM groupml.runs" in hint
    state, msg, hint = sql_error(db, "SELECT groupml.report(%s, 'pdf')", [run_id])
    assert state == "22023" and msg == "groupml: The 'format' value of report must be one of 'html', 'json'; got 'pdf'"
    assert hint
    assert sql_error(db, "SELECT groupml.report(%s, NULL)", [run_id])[0] == "22023"
    assert sql_error(db, "SELECT groupml.report(NULL)")[0] == "22023"
    assert sql_error(db, "SELECT groupml.scheduler_report('svg')")[0] == "22023"


def test_another_role_cannot_read_the_run(cluster, db, dbname, run_id):
    role = f"rep_{dbname}"
    db.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    try:
        with psycopg.connect(cluster.dsn(dbname, user=role), autocommit=True) as conn:
            # the catalog's own verdict, read as the caller: no privilege, or a run hidden by
            # row-level security (then reported as unknown)
            assert sql_error(conn, "SELECT groupml.report(%s)", [run_id])[0] in ("42501", "42704")
    finally:
        db.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
        db.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_the_command_writes_the_report_to_a_file(db, dsn, run_id, tmp_path):
    out = tmp_path / "run.html"
    cmd = ["python3", os.path.join(ROOT, "installer", "groupml_installer.py"), "report", "--dsn", dsn,
           "--run", str(run_id), "-o", str(out)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert out.read_text(encoding="utf-8") == db.execute("SELECT groupml.report(%s)", [run_id]).fetchone()[0] + "\n"
    bad = subprocess.run(cmd[:-4] + ["--run", "987654", "-o", str(tmp_path / "none.html")],
                         capture_output=True, text=True, timeout=300)
    assert bad.returncode != 0 and "No run 987654" in bad.stderr and "HINT" in bad.stderr
    assert not (tmp_path / "none.html").exists()


def test_the_scheduler_report_shows_its_loss_curve(db, dsn, tmp_path):
    jobs = []
    db.execute("SELECT groupml.create_tenant('acme')")
    for i in range(2):
        data = grouped_classification(n_rows=300, n_groups=1, n_features=3, seed=40 + i)
        create_table(db, f"tenant_data_{i}", data, group_col="grp", label_col="y", bool_label=True)
        jobs.append(db.execute("SELECT groupml.submit_job('acme', %s, ARRAY['f1','f2','f3'], 'y', %s)",
                               [f"tenant_data_{i}", json.dumps([{"model": "logistic",
                                                                 "search": {"l2": [0, 0.1, 1.0]}}])]).fetchone()[0])
    db.execute("CALL groupml.run_scheduler(max_steps => 4)")
    page = db.execute("SELECT groupml.scheduler_report()").fetchone()[0]
    _self_contained(page)
    els = _open(tmp_path, page, "scheduler.html")
    (loss,) = els.find("polyline", data_series="scheduler-loss")
    assert len(loss["points"].split()) == 4                               # one point per step
    served = {j for (j,) in db.execute("SELECT DISTINCT job_id FROM groupml.scheduler_log WHERE status = 'ok'")}
    best = els.find("polyline", data_series="job-best") + els.find("circle", data_series="job-best")
    assert {int(b["data-job"]) for b in best} == served and served <= set(jobs)
    steps = json.loads(db.execute("SELECT groupml.scheduler_report('json')").fetchone()[0])["observations"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
