"""strategy 'auto' with workers: one backend when the planner prices it cheapest, worker
backends otherwise; the host's GLM passes are measured at first use."""

import json

import pytest

from groupml.datagen import create_table, grouped_classification

pytestmark = pytest.mark.integration

GRID = json.dumps({"l2": [0.001, 0.1], "max_iter": 20})
FEATS = "ARRAY['f1', 'f2', 'f3']"


@pytest.fixture
def small(db):
    create_table(db, "clicks", grouped_classification(3000, 6, 3, seed=7, exponent=1.1))
    db.execute("ANALYZE clicks")


def explain(db, workers, options="{}"):
    return db.execute(f"SELECT strategy, chosen, worker, estimated_seconds, explanation FROM "
                      f"groupml.explain_train_groups('clicks', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                      f"%s::jsonb, %s::jsonb, %s, 'auto')", [GRID, options, workers]).fetchall()


def test_explain_picks_one_backend_on_a_small_workload(db, small):
    assert db.execute("SELECT count(*) FROM groupml.cost_runs").fetchone()[0] == 0
    rows = explain(db, 2)
    chosen = {r[0] for r in rows if r[1]}
    assert chosen == {"backend"}, rows
    backend = [r for r in rows if r[0] == "backend"]
    assert all(r[3] >= 0 for r in backend)
    assert backend[0][4].startswith("one backend is cheapest: one backend (")
    assert "snapshot and coordination" in backend[0][4]
    # the worker strategies are still priced, none chosen
    assert {r[0] for r in rows if not r[1]} >= {"grouped", "gtp"}
    # first use measured this host's GLM passes into the catalog
    stored = db.execute("SELECT count(*), bool_and(family = 'logistic') FROM groupml.cost_runs "
                        "WHERE source = 'first use'").fetchone()
    assert stored[0] >= 3 and stored[1]
    explain(db, 2)                          # measured once, not at every call
    assert db.execute("SELECT count(*) FROM groupml.cost_runs WHERE source = 'first use'").fetchone()[0] == stored[0]


def test_workers_zero_can_pick_one_backend(db, small):
    rows = explain(db, 0)
    assert {r[0] for r in rows if r[1]} == {"backend"}
    assert rows[0][4].startswith("workers => 0: the planner chose")


def test_auto_with_workers_trains_in_one_backend_when_cheapest(db, small):
    notices = []
    db.add_notice_handler(lambda d: notices.append(d.message_primary))
    run_id = db.execute(f"CALL groupml.train_groups('clicks', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                        f"%s::jsonb, workers => 2)", [GRID]).fetchone()[0]
    assert any(n.startswith("groupml: one backend is cheapest") for n in notices), notices
    # a one-backend run: no executor record, no snapshot, every group's model stored
    assert db.execute("SELECT count(*) FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM groupml.snapshots").fetchone()[0] == 0
    assert db.execute("SELECT count(*) FROM groupml.models WHERE run_id = %s AND (fit).status = 'ok'",
                      [run_id]).fetchone()[0] == 6
    # the same models as a run asked for in one backend
    one = db.execute(f"CALL groupml.train_groups('clicks', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                     f"%s::jsonb)", [GRID]).fetchone()[0]
    got = db.execute("SELECT a.group_key::text, (a.fit).params = (b.fit).params, abs((a.fit).score - (b.fit).score) "
                     "FROM groupml.models a JOIN groupml.models b ON a.group_key = b.group_key "
                     "WHERE a.run_id = %s AND b.run_id = %s", [run_id, one]).fetchall()
    assert len(got) == 6 and all(same and diff < 1e-9 for _, same, diff in got), got


def test_worker_options_or_a_strategy_keep_worker_backends(db, small):
    """An option only worker backends take, a named strategy or a resumed run: no one-backend choice."""
    rows = explain(db, 2, json.dumps({"keep_snapshot": True}))
    assert "backend" not in {r[0] for r in rows}
    run_id = db.execute(f"CALL groupml.train_groups('clicks', ARRAY['country'], {FEATS}, 'clicked', 'logistic', "
                        f"%s::jsonb, workers => 2, strategy => 'gtp')", [GRID]).fetchone()[0]
    assert db.execute("SELECT strategy FROM groupml.grouped_runs WHERE run_id = %s", [run_id]).fetchone()[0] == "gtp"
    # the run's coordination beyond its training now prices the worker plans' overhead
    text = [r[4] for r in explain(db, 2) if r[0] == "backend"][0]
    assert "coordination measured from 1 earlier run(s))" in text
