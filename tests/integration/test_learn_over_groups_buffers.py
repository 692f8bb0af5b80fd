"""learn_over_groups' row buffers (the C transition function) on a real server: what a row
breaks is raised by the final function with the same SQLSTATE, message and HINT; buffers never
outlive their statement (error, rollback, closed cursor, cancel); plans and query shapes that
call the transition differently give the same fits."""

import json
import time

import psycopg
import pytest

from groupml.datagen import create_table, grouped_classification

from pg_helpers import sql_error

pytestmark = pytest.mark.integration

GRID = {"l2": [0.001, 0.1], "class_weight": [None, "balanced"]}
FEATS = "ARRAY[f1, f2, f3, f4]"
FIT_COLS = "(f).status, (f).params, (f).score, (f).n_train, (f).n_validation, (f).n_skipped, (f).model"


@pytest.fixture
def clicks(db):
    create_table(db, "clicks", grouped_classification(6000, 6, 4, seed=11, exponent=0.8))


def live_buffers(conn) -> int:
    return conn.execute("SELECT count(*) FROM groupml._learn_buffers()").fetchone()[0]


def per_group(conn, sql, *params):
    return {r[0]: r[1:] for r in conn.execute(sql, params).fetchall()}


AGG = (f"SELECT country, {FIT_COLS} FROM (SELECT country, groupml.learn_over_groups({FEATS}, clicked, 'logistic', "
       "%s::jsonb) AS f FROM clicks GROUP BY country) s")


@pytest.mark.parametrize("rows,state,message,hint", [
    ("(ARRAY[1,2,3], 1), (ARRAY[1,2], 0)", "2202E",
     "Every features array of a group must have the same length; expected 3 values, found 2", "same columns"),
    ("('{}'::float8[], 1), (ARRAY[1,2], 0)", "2202E",
     "The features array of learn_over_groups must not be empty; got an empty array", "ARRAY[f1, f2"),
    ("(ARRAY[1,2], 1), ('{}'::float8[], 0)", "2202E",
     "Every features array of a group must have the same length; expected 2 values, found 0", "same columns"),
    ("(ARRAY[[1,2],[3,4]], 1)", "22000",
     "The features array of learn_over_groups must be one-dimensional; got a nested array", "one value per feature"),
    ("(ARRAY[1,2], 1), (ARRAY[[1,2],[3,4]], 0)", "22000",
     "The features array of learn_over_groups must be one-dimensional; got a nested array", "one value per feature"),
    ("(ARRAY[1,2], 1), (ARRAY[[1,2],[3,4],[5,6]], 0)", "2202E",
     "Every features array of a group must have the same length; expected 2 values, found 3", "same columns"),
])
def test_what_a_row_breaks_is_an_error_and_leaves_no_buffer(db, rows, state, message, hint):
    db.execute("CREATE TABLE t (x float8[], y float8)")
    db.execute(f"INSERT INTO t VALUES {rows}")
    got_state, msg, got_hint = sql_error(db, "SELECT groupml.learn_over_groups(x, y, 'logistic', '{}') FROM t")
    assert (got_state, msg) == (state, "groupml: " + message)
    assert hint in got_hint
    assert live_buffers(db) == 0


def test_null_elements_labels_and_arrays_are_skipped_and_counted(db):
    db.execute("CREATE TABLE t (x float8[], y boolean)")
    db.execute("INSERT INTO t SELECT ARRAY[i % 7, i % 5], (i % 7) > 3 FROM generate_series(1, 300) i")
    db.execute("INSERT INTO t VALUES (ARRAY[1, NULL], true), (ARRAY[NULL, NULL]::float8[], false), "
               "(NULL, true), (ARRAY[1, 2], NULL)")
    fit = db.execute("SELECT (f).status, (f).n_skipped, (f).n_train + (f).n_validation FROM (SELECT "
                     "groupml.learn_over_groups(x, y, 'logistic', '{}') AS f FROM t) s").fetchone()
    assert fit == ("ok", 4, 300)
    # every row skipped: no_rows with the count; a NULL model is the final's error
    fit = db.execute("SELECT (f).status, (f).n_skipped FROM (SELECT groupml.learn_over_groups(x, y, 'logistic', "
                     "'{}') AS f FROM t WHERE y IS NULL OR x IS NULL) s").fetchone()
    assert fit == ("no_rows", 2)
    state, msg, hint = sql_error(db, "SELECT groupml.learn_over_groups(x, y, NULL::text, '{}') FROM t")
    assert state == "22023" and msg.startswith("groupml: The 'model' value of learn_over_groups must be") and hint
    assert live_buffers(db) == 0


def _rows_of(values: str) -> str:
    return f"SELECT groupml._pack_rows(x, y) FROM (VALUES {values}) v(x, y)"


def _values(call: str) -> str:
    return f"SELECT {call} FROM generate_series(1, 3)"


@pytest.mark.parametrize("query,state,message,hint", [
    # train_groups' packing aggregates share the C buffers: a group whose rows stopped at an
    # anomaly is an error, never a block of part of its rows
    (_rows_of("(ARRAY[1,2,3], 1), (ARRAY[1,2], 0)"), "2202E",
     "groupml: Every features array of a group must have the same length; expected 3 values, found 2", "same columns"),
    (_rows_of("('{}'::float8[], 1), (ARRAY[1,2], 0)"), "2202E",
     "groupml: The features array of a group must not be empty; got an empty array", "ARRAY[f1, f2"),
    (_rows_of("(ARRAY[[1,2],[3,4]], 1)"), "22000",
     "groupml: The features array of a group must be one-dimensional; got a nested array", "one value per feature"),
    # _pack_values takes separate float8 values
    (_values("groupml._pack_values(1::int, 2::float8)"), "42804",
     "Every value of groupml._pack_values must be float8; value 1 is integer", "value::float8"),
    (_values("groupml._pack_values(1::float8)"), "22023",
     "groupml._pack_values takes at least one feature and the label; got 1 value(s)", "f1, f2, ..., label"),
    (_values("groupml._pack_values(VARIADIC ARRAY[1, 2]::float8[])"), "22023",
     "groupml._pack_values takes a row's values as separate arguments, not a VARIADIC array", "_pack_rows"),
])
def test_the_packing_aggregates_refuse_what_they_cannot_pack(db, query, state, message, hint):
    got = sql_error(db, query)
    assert got[0] == state and got[1] == message and hint in got[2], got
    assert live_buffers(db) == 0


def test_pack_rows_packs_native_rows_and_leaves_out_a_row_with_a_null(db):
    import numpy as np

    block = db.execute("SELECT groupml._pack_read(groupml._pack_rows(x, y)) FROM (VALUES "
                       "(ARRAY[1.5, 2]::float8[], 1::float8), (ARRAY[3, NULL]::float8[], 0), (NULL, 1), "
                       "(ARRAY[4, 5]::float8[], NULL), (ARRAY[6, 7]::float8[], 0)) v(x, y)").fetchone()[0]
    rows = np.frombuffer(bytes(block), dtype="=f8").reshape(-1, 3)
    assert rows.tolist() == [[1.5, 2.0, 1.0], [6.0, 7.0, 0.0]]
    assert db.execute("SELECT groupml._pack_rows(x, y) FROM (VALUES (ARRAY[1]::float8[], 1::float8)) v(x, y) "
                      "WHERE false").fetchone()[0] is None
    assert live_buffers(db) == 0


def test_pack_values_writes_each_group_to_its_own_range_of_one_load_arena(db):
    import numpy as np

    db.execute("CREATE TABLE p (g int, a float8, b float8, y float8)")
    db.execute("INSERT INTO p SELECT i % 3, i, -i, i % 2 FROM generate_series(1, 3000) i")
    db.execute("INSERT INTO p VALUES (0, NULL, 1, 1), (1, 1, 1, NULL), (5, NULL, NULL, NULL)")
    got = db.execute("SELECT g, r, groupml._pack_read(r) FROM (SELECT g, groupml._pack_values(a, b, y) AS r "
                     "FROM p GROUP BY g) s ORDER BY g").fetchall()
    fds = {r[0] for _, r, _ in got if r[2] > 0}
    assert len(fds) == 1 and fds.pop() >= 0                 # one memory file for the statement
    ranges = sorted((r[1], r[1] + r[2]) for _, r, _ in got if r[2] > 0)
    assert all(a[1] <= b[0] for a, b in zip(ranges, ranges[1:]))     # disjoint ranges
    for g, ref, block in got[:3]:
        rows = np.frombuffer(bytes(block), dtype="=f8").reshape(-1, 3)
        i = np.sort(rows[:, 0])
        assert ref[2] == len(bytes(block)) and np.array_equal(i, np.arange(g if g else 3, 3001, 3))
        assert np.array_equal(rows[:, 1], -rows[:, 0]) and np.array_equal(rows[:, 2], rows[:, 0] % 2)
    assert got[3][0] == 5 and got[3][1] == [-1, 0, 0] and bytes(got[3][2]) == b""   # every row had a NULL
    # the same rows as _pack_rows packs them from arrays
    same = db.execute("SELECT groupml._pack_read(groupml._pack_values(a, b, y)) = "
                      "groupml._pack_read(groupml._pack_rows(ARRAY[a, b], y)) FROM p WHERE g = 1").fetchone()[0]
    assert same is True
    assert live_buffers(db) == 0


def test_pack_read_refuses_a_range_outside_the_current_load(db):
    # the arena closes with the transaction that loaded it: a reference kept past it reads nothing
    ref = db.execute("SELECT groupml._pack_values(i::float8, 1::float8) FROM generate_series(1, 10) i").fetchone()[0]
    state, msg, hint = sql_error(db, "SELECT groupml._pack_read(%s::int8[])", [ref])
    assert state == "22023" and "is not a range of this transaction's load" in msg and "transaction that loaded" in hint
    state, msg, hint = sql_error(db, "SELECT groupml._pack_read('{1,2}'::int8[])")
    assert state == "22023" and "takes a reference {fd, offset, bytes}" in msg and hint


def test_failed_and_rolled_back_statements_leave_no_buffer(db, clicks):
    spec = json.dumps(GRID)
    # an error mid-scan (after many rows were buffered), in autocommit
    with pytest.raises(psycopg.errors.DivisionByZero):
        db.execute("SELECT country, groupml.learn_over_groups(ARRAY[f1, f2, 1 / (id - 4000)], clicked, 'logistic', "
                   "%s::jsonb) FROM clicks GROUP BY country", [spec])
    assert live_buffers(db) == 0
    # within a transaction: a statement rolled back to a savepoint, then the transaction
    db.execute("BEGIN")
    db.execute("SAVEPOINT s")
    with pytest.raises(psycopg.errors.DivisionByZero):
        db.execute("SELECT country, groupml.learn_over_groups(ARRAY[f1, f2, 1 / (id - 4000)], clicked, 'logistic', "
                   "%s::jsonb) FROM clicks GROUP BY country", [spec])
    db.execute("ROLLBACK TO SAVEPOINT s")
    assert live_buffers(db) == 0
    # buffers made by a direct call of the transition live until the transaction ends
    db.execute("SELECT groupml._learn_step(NULL, ARRAY[1.0, 2.0], 1.0::float8, 'logistic', '{}')")
    assert live_buffers(db) == 1
    db.execute("ROLLBACK")
    assert live_buffers(db) == 0
    # the backend's next aggregate works and equals a fresh one
    again = per_group(db, AGG, spec)
    with psycopg.connect(db.info.dsn, autocommit=True) as other:
        assert again == per_group(other, AGG, spec)


def test_group_and_hash_aggregate_give_the_same_fits(db, clicks):
    spec = json.dumps(GRID)
    db.execute("SET enable_hashagg = on")
    db.execute("SET enable_sort = off")
    plan = "\n".join(r[0] for r in db.execute("EXPLAIN " + AGG, [spec]).fetchall())
    assert "HashAggregate" in plan
    hashed = per_group(db, AGG, spec)
    db.execute("RESET enable_sort")
    db.execute("SET enable_hashagg = off")
    plan = "\n".join(r[0] for r in db.execute("EXPLAIN " + AGG, [spec]).fetchall())
    assert "GroupAggregate" in plan
    assert per_group(db, AGG, spec) == hashed
    assert len(hashed) == 6 and all(v[0] == "ok" for v in hashed.values())
    assert live_buffers(db) == 0


def test_groups_trained_by_helper_processes_equal_the_backends_fits(db, clicks):
    """A search the cost model prices high (max_iter is its budget; these groups converge
    long before) sends a hashed plan's groups to helper processes; a sorted plan trains them
    in the backend. The fits are the same."""
    spec = json.dumps({"l2": [0.0001, 0.001, 0.01, 0.1, 1.0], "class_weight": [None, "balanced"],
                       "max_iter": 20000})
    seen, hashed = hashed_and_sorted(db, AGG, spec, lambda pid, other: bool(_helpers(pid)))
    assert any(seen), "no helper process trained the hashed plan's groups"
    assert len(hashed) == 6 and all(v[0] == "ok" for v in hashed.values())


def test_group_aggregate_holds_one_group_at_a_time(db, clicks):
    """A sorted plan frees each group's buffer when the next group starts (peak memory one
    group); a hashed plan keeps every group's until the end of the statement."""
    live = (f"SELECT (f).status, (SELECT count(*) FROM groupml._learn_buffers() b WHERE country IS NOT NULL) FROM "
            f"(SELECT country, groupml.learn_over_groups({FEATS}, clicked, 'logistic', '{{}}') AS f FROM clicks "
            "GROUP BY country) s")
    db.execute("SET enable_hashagg = off")
    assert {n for _, n in db.execute(live).fetchall()} == {1}
    db.execute("RESET enable_hashagg")
    db.execute("SET enable_sort = off")
    assert {n for _, n in db.execute(live).fetchall()} == {6}
    assert live_buffers(db) == 0


def test_not_a_window_function(db, clicks):
    state, msg, _ = sql_error(db, f"SELECT groupml.learn_over_groups({FEATS}, clicked, 'logistic', '{{}}') OVER () "
                                  "FROM clicks")
    assert state == "0A000" and "window" in msg
    assert live_buffers(db) == 0


def test_hash_aggregate_keeps_the_rows_out_of_work_mem(db, clicks):
    """The buffers are not in the aggregate's memory, so a tiny work_mem does not make
    HashAggregate spill groups to disk (it would finalize them in batches)."""
    db.execute("SET work_mem = '64kB'")
    db.execute("SET enable_sort = off")
    spec = json.dumps(GRID)
    got = db.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + AGG, [spec]).fetchone()[0]

    def nodes(n):
        yield n
        for c in n.get("Plans", []):
            yield from nodes(c)
    agg = [n for n in nodes(got[0]["Plan"]) if n.get("Strategy") == "Hashed"]
    assert agg and agg[0]["HashAgg Batches"] == 1
    small = per_group(db, AGG, spec)
    db.execute("RESET work_mem")
    assert per_group(db, AGG, spec) == small


def test_two_aggregates_in_one_query_equal_each_alone(db, clicks):
    other = {"l2": [0.01], "max_iter": 50}
    grid = json.dumps(dict(GRID, max_iter=20000))      # priced high: the groups go to helper processes
    both = db.execute(
        f"SELECT country, (a).params, (a).model, (b).params, (b).model FROM (SELECT country, "
        f"groupml.learn_over_groups({FEATS}, clicked, 'logistic', %s::jsonb) AS a, "
        f"groupml.learn_over_groups(ARRAY[f1, f2], clicked, 'logistic', %s::jsonb) AS b "
        "FROM clicks GROUP BY country) s", [grid, json.dumps(other)]).fetchall()
    alone_a = per_group(db, f"SELECT country, (f).params, (f).model FROM (SELECT country, groupml.learn_over_groups("
                            f"{FEATS}, clicked, 'logistic', %s::jsonb) AS f FROM clicks GROUP BY country) s",
                        grid)
    alone_b = per_group(db, "SELECT country, (f).params, (f).model FROM (SELECT country, groupml.learn_over_groups("
                            "ARRAY[f1, f2], clicked, 'logistic', %s::jsonb) AS f FROM clicks GROUP BY country) s",
                        json.dumps(other))
    assert len(both) == 6
    for country, pa, ma, pb, mb in both:
        assert (pa, ma) == alone_a[country] and (pb, mb) == alone_b[country]
    assert live_buffers(db) == 0


def test_a_cursor_fetched_in_part_then_closed_leaves_no_buffer(db, clicks):
    spec = json.dumps(GRID)
    db.execute("BEGIN")
    db.execute("SET LOCAL enable_sort = off")      # HashAggregate: every group buffered at the first FETCH
    db.execute(f"DECLARE c CURSOR FOR SELECT country, groupml.learn_over_groups({FEATS}, clicked, 'logistic', "
               "%s::jsonb) FROM clicks GROUP BY country", [spec])
    assert len(db.execute("FETCH 2 FROM c").fetchall()) == 2
    assert live_buffers(db) == 6
    db.execute("CLOSE c")
    assert live_buffers(db) == 0
    fits = per_group(db, AGG, spec)                # the next statement stops what the cursor started
    db.execute("COMMIT")
    assert len(fits) == 6 and all(v[0] == "ok" for v in fits.values())
    assert fits == per_group(db, AGG, spec)


def _helpers(pid: int) -> list:
    """The backend's helper processes (multiprocessing's resource tracker, which a backend
    keeps once it has started helpers, is not one)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            children = fh.read().split()
    except OSError:
        return []
    out = []
    for child in children:
        try:
            with open(f"/proc/{child}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "resource_tracker" not in cmd:
            out.append(cmd)
    return out


def test_a_timeout_while_groups_train_ends_the_statement_and_its_helpers(dsn, db):
    create_table(db, "big", grouped_classification(60000, 4, 10, seed=9))
    spec = json.dumps({"l2": [10 ** -k for k in range(1, 13)], "max_iter": 100000, "tol": 1e-300,
                       "class_weight": [None, "balanced"]})
    feats = "ARRAY[" + ", ".join(f"f{j + 1}" for j in range(10)) + "]"
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.execute("SET enable_sort = off")
        conn.execute("SET statement_timeout = '4s'")
        with pytest.raises(psycopg.errors.QueryCanceled):
            conn.execute(f"SELECT country, groupml.learn_over_groups({feats}, clicked, 'logistic', %s::jsonb, "
                         "'{\"threads\": 2}') FROM big GROUP BY country", [spec])
        conn.execute("SET statement_timeout = 0")
        assert live_buffers(conn) == 0
        deadline = time.time() + 10
        while _helpers(pid) and time.time() < deadline:
            time.sleep(0.2)
        assert _helpers(pid) == [], "the helper processes outlived the cancelled statement"
        assert conn.execute("SELECT groupml.help('fit') IS NOT NULL").fetchone()[0]


SLOW_AT = """CREATE FUNCTION slow_at(i int, at int, x float8) RETURNS float8 LANGUAGE sql AS
             $$ SELECT CASE WHEN i = at THEN x + 0 * (SELECT count(*) FROM pg_sleep(1.5)) ELSE x END $$"""


def _long_table(db):
    """60,000 rows in 3 groups, in insertion order (a sequential scan reads row i as the i-th)."""
    db.execute("CREATE TABLE long_t AS SELECT i, (i % 3)::text AS grp, sin(i) AS f1, cos(1.7 * i) AS f2, "
               "sin(0.3 * i) AS f3, (sin(i) + cos(1.7 * i) > 0.3) AS y FROM generate_series(1, 60000) i")
    db.execute("ANALYZE long_t")
    db.execute(SLOW_AT)


def test_helper_processes_start_while_a_hashed_aggregate_scans(dsn, db):
    # after 20,000 buffered rows the C step has the helpers spawned: they are alive while the
    # scan still reads (row 40,000 sleeps), before any final call; the fits equal a sorted plan's

    _long_table(db)
    spec = json.dumps({"l2": [0.0001, 0.001, 0.01, 0.1, 1.0], "class_weight": [None, "balanced"],
                       "max_iter": 20000})
    sql = ("SELECT grp, (f).status, (f).params, (f).score, (f).model FROM (SELECT grp, groupml.learn_over_groups("
           "ARRAY[f1, slow_at(i, 40000, f2), f3], y, 'logistic', %s::jsonb) AS f FROM long_t GROUP BY grp) s")
    seen, hashed = hashed_and_sorted(db, sql, spec, lambda pid, other: bool(_helpers(pid)) and _sleeping(other, pid),
                                     dsn=dsn)
    assert any(seen), "no helper process was alive while the scan waited in row 40,000"
    assert len(hashed) == 3 and all(v[0] == "ok" for v in hashed.values())


def hashed_and_sorted(db, sql, spec, probe, dsn=None):
    """(what ``probe(backend pid, another connection or None)`` saw every 50 ms while ``sql``
    ran under a hashed plan, its per-group results); asserts a sorted plan gives the same."""
    import threading

    pid = db.execute("SELECT pg_backend_pid()").fetchone()[0]
    seen, stop = [], threading.Event()

    def watch():
        other = psycopg.connect(dsn, autocommit=True) if dsn else None
        try:
            while not stop.is_set():
                seen.append(probe(pid, other))
                time.sleep(0.05)
        finally:
            if other is not None:
                other.close()
    db.execute("SET enable_sort = off")
    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        hashed = per_group(db, sql, spec)
    finally:
        stop.set()
        watcher.join()
    db.execute("RESET enable_sort")
    db.execute("SET enable_hashagg = off")
    assert per_group(db, sql, spec) == hashed
    db.execute("RESET enable_hashagg")
    return seen, hashed


def _sleeping(conn, pid) -> bool:
    """Whether backend ``pid`` waits in pg_sleep (the scan's row 40,000: no final call yet)."""
    got = conn.execute("SELECT wait_event FROM pg_stat_activity WHERE pid = %s", [pid]).fetchone()
    return bool(got) and got[0] == "PgSleep"


def test_helpers_spawned_for_a_statement_that_failed_go_with_the_next_aggregate(dsn, db):
    _long_table(db)
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        conn.execute("SET enable_sort = off")
        with pytest.raises(psycopg.errors.DivisionByZero):
            conn.execute("SELECT grp, groupml.learn_over_groups(ARRAY[f1, f2 / (i - 30000), f3], y, 'logistic', "
                         "'{}'::jsonb) FROM long_t GROUP BY grp")
        assert live_buffers(conn) == 0
        conn.execute("SELECT grp, groupml.learn_over_groups(ARRAY[f1, f2], y, 'logistic', '{}'::jsonb) "
                     "FROM long_t WHERE i < 100 GROUP BY grp")
        deadline = time.time() + 10
        while _helpers(pid) and time.time() < deadline:
            time.sleep(0.2)
        assert _helpers(pid) == [], "the helpers spawned for the failed statement outlived the next one"
