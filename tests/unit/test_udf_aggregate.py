"""The aggregate's final function and the error mapping, with the shared plpy stub (pure parts
only). The C transition function's buffers are stood in for by ``Buffers``, which answers
``_learn_buffers`` and ``_learn_rows`` as the C module does."""

import json

import numpy as np
import pytest

STMT = "2026-01-01 00:00:00+00"


class Buffers:
    """What the C module keeps per handle: the packed rows (native float8) and the counts."""

    def __init__(self):
        self.meta, self.rows, self.next = {}, {}, 0

    def new(self, model="logistic", search='{"l2": [0.001, 0.1]}', options=None, stmt=STMT, d=3):
        self.next += 1
        self.meta[self.next] = {"handle": self.next, "d": d, "n_rows": 0, "skipped": 0, "anomaly": None,
                                "found": None, "stmt": stmt, "model": model, "search": search, "options": options}
        self.rows[self.next] = []
        return self.next

    def add(self, h, x, y):
        self.rows[h].append(list(x) + [y])
        self.meta[h]["n_rows"] += 1

    def answer_buffers(self, sql, args):
        hs = [args[0]] if args and args[0] is not None else list(self.meta)
        return [dict(self.meta[h]) for h in hs if h in self.meta]

    def answer_rows(self, sql, args):
        rows = self.rows.get(args[0])
        return [{"r": None if rows is None else np.asarray(rows, dtype=np.float64).reshape(-1).tobytes()}]


@pytest.fixture
def plpy(plpy, monkeypatch):
    """The shared plpy stub, answering the buffers' reads and the cost-model read. Groups
    here are small: helpers are started for them anyway (their cost decision has a test)."""
    from groupml.udf import aggregate
    plpy.worth_helpers = aggregate._worth_helpers
    monkeypatch.setattr(aggregate, "_worth_helpers", lambda session, todo, helpers: True)
    monkeypatch.setattr(aggregate, "_declined", None)
    plpy.buffers = Buffers()
    plpy.on("cost_runs", [])
    plpy.on("_learn_buffers", plpy.buffers.answer_buffers)
    plpy.on("_learn_rows", plpy.buffers.answer_rows)
    yield plpy
    from groupml.udf import aggregate
    aggregate._stop_helpers()


def _fill(buffers, rng, n, options=None, **kw):
    h = buffers.new(options=options, **kw)
    for _ in range(n):
        x = rng.normal(size=3)
        buffers.add(h, x.tolist(), float(x[0] + 0.3 * x[1] > 0))
    return h


def test_final_trains_the_buffered_rows_and_counts_skips(plpy):
    from groupml.udf import aggregate
    h = _fill(plpy.buffers, np.random.default_rng(0), 200)
    plpy.buffers.meta[h]["skipped"] = 2
    fit = aggregate.final(h)
    assert fit["status"] == "ok" and fit["n_train"] + fit["n_validation"] == 200 and fit["n_skipped"] == 2
    assert aggregate.final(None)["status"] == "no_rows"
    empty = plpy.buffers.new(d=0)
    plpy.buffers.meta[empty]["skipped"] = 3
    fit = aggregate.final(empty)
    assert fit["status"] == "no_rows" and fit["n_skipped"] == 3


@pytest.mark.parametrize("anomaly,found,state,message", [
    ("length", 2, "2202E", "Every features array of a group must have the same length; expected 3 values, found 2"),
    ("empty", None, "2202E", "The features array of learn_over_groups must not be empty; got an empty array"),
    ("nested", None, "22000", "The features array of learn_over_groups must be one-dimensional; got a nested array"),
])
def test_the_anomaly_a_row_recorded_is_raised_with_its_message(plpy, anomaly, found, state, message):
    from groupml.udf import aggregate
    h = _fill(plpy.buffers, np.random.default_rng(1), 10)
    plpy.buffers.meta[h].update(anomaly=anomaly, found=found)
    with pytest.raises(plpy.Error) as info:
        aggregate.final(h)
    assert info.value.sqlstate == state and str(info.value) == message and info.value.hint


def test_an_unknown_handle_is_a_lost_buffer(plpy):
    from groupml.udf import aggregate
    with pytest.raises(plpy.Error) as info:
        aggregate.final(12345)
    assert info.value.sqlstate == "22000" and "lost its row buffer" in str(info.value)


def test_groups_trained_ahead_equal_one_by_one(plpy):
    """Final functions called group by group (HashAggregate): the first call starts the
    other buffers in helper processes; each result equals training the group alone."""
    from groupml.udf import aggregate
    results = {}
    for threads in (1, 2):
        rng = np.random.default_rng(3)
        opts = json.dumps({"threads": threads})
        states = [_fill(plpy.buffers, rng, n, opts) for n in (300, 120, 80, 200)]
        if threads == 2:
            first = aggregate.final(states[0])
            assert set(aggregate._ahead) | set(aggregate._done) == set(states[1:])   # the others were started
            results[threads] = [first] + [aggregate.final(s) for s in states[1:]]
        else:
            results[threads] = [aggregate.final(s) for s in states]
        assert not aggregate._ahead and not aggregate._done and aggregate._pool is None
        for s in states:
            del plpy.buffers.meta[s]
    for a, b in zip(results[1], results[2]):
        assert a["status"] == b["status"] == "ok"
        assert a["n_train"] == b["n_train"] and a["params"] == b["params"] and a["model"] == b["model"]


def test_buffer_growing_after_its_start_is_trained_again(plpy):
    """Another aggregate in the same query may still add rows to a buffer that was started
    ahead: its final call sees other counts and trains on every row."""
    from groupml.udf import aggregate
    rng = np.random.default_rng(4)
    opts = '{"threads": 2}'
    a = _fill(plpy.buffers, rng, 150, opts)
    b = _fill(plpy.buffers, rng, 150, opts)
    aggregate.final(a)                                            # starts b ahead
    assert b in aggregate._ahead or b in aggregate._done
    for _ in range(60):                                           # b keeps growing meanwhile
        x = rng.normal(size=3)
        plpy.buffers.add(b, x.tolist(), float(x[0] > 0))
    fit_b = aggregate.final(b)
    assert fit_b["n_train"] + fit_b["n_validation"] == 210


def test_an_earlier_statements_buffers_are_not_trained_ahead(plpy):
    """Buffers an open cursor of an earlier statement holds are not trained ahead by a later
    statement's first final call."""
    from groupml.udf import aggregate
    rng = np.random.default_rng(5)
    opts = '{"threads": 2}'
    left = [_fill(plpy.buffers, rng, 100, opts) for _ in range(3)]
    later = "2026-01-01 00:00:00.5+00"
    a, b = _fill(plpy.buffers, rng, 100, opts, stmt=later), _fill(plpy.buffers, rng, 80, opts, stmt=later)
    aggregate.final(a)
    assert set(aggregate._ahead) | set(aggregate._done) == {b}    # only this statement's other group
    aggregate.final(b)
    assert not set(aggregate._ahead) & set(left)


def test_groups_started_ahead_by_an_ended_statement_stop_and_train_again_if_asked(plpy):
    """A LIMIT (or a closed cursor) ends a statement before its final calls: the groups it
    started ahead are stopped at the next statement's final call; a final call that still
    comes (an open cursor) trains its group in the backend."""
    from groupml.udf import aggregate
    rng = np.random.default_rng(7)
    opts = '{"threads": 2}'
    a, b = _fill(plpy.buffers, rng, 120, opts), _fill(plpy.buffers, rng, 90, opts)
    c = _fill(plpy.buffers, rng, 60, opts)
    aggregate.final(a)
    assert b in aggregate._ahead
    other = _fill(plpy.buffers, rng, 50, '{"threads": 1}', stmt="2026-01-01 00:00:00.5+00")
    aggregate.final(other)                                       # the next statement's aggregate
    assert not aggregate._ahead and aggregate._pool is None
    fit_b = aggregate.final(b)
    alone = plpy.buffers.new(options='{"threads": 1}')
    plpy.buffers.rows[alone] = plpy.buffers.rows[b]
    plpy.buffers.meta[alone]["n_rows"] = len(plpy.buffers.rows[b])
    assert fit_b["status"] == "ok" and fit_b["model"] == aggregate.final(alone)["model"]
    del plpy.buffers.meta[c]


def test_a_group_with_a_bad_request_is_not_started_and_raises_at_its_own_final_call(plpy):
    from groupml.udf import aggregate
    rng = np.random.default_rng(6)
    opts = '{"threads": 2}'
    a, b = _fill(plpy.buffers, rng, 100, opts), _fill(plpy.buffers, rng, 100, opts, search='{"l2": [-1]}')
    c = _fill(plpy.buffers, rng, 100, opts)
    assert aggregate.final(a)["status"] == "ok"
    assert b not in aggregate._ahead and b not in aggregate._done
    with pytest.raises(plpy.Error) as info:
        aggregate.final(b)
    assert info.value.sqlstate == "22023" and "'l2'" in str(info.value)
    assert not aggregate._ahead and aggregate._pool is None       # the statement failed: helpers stopped
    assert aggregate.final(c)["status"] == "ok"                   # (a cursor could still ask: trained here)


def test_helpers_are_started_only_when_the_training_outweighs_their_start(plpy):
    from groupml.db import backend_session
    from groupml.udf import aggregate
    session = backend_session()

    def todo(n_rows, search):
        m = {"handle": 1, "d": 20, "n_rows": n_rows, "skipped": 0, "stmt": STMT, "model": "logistic",
             "search": json.dumps(search), "options": None}
        return [(m, aggregate._request(m))] * 50
    assert not plpy.worth_helpers(session, todo(20000, {"l2": [0.1], "max_iter": 1}), 2)
    assert plpy.worth_helpers(session, todo(20000, {"l2": [0.0001, 0.001, 0.01, 0.1, 1.0, 10.0],
                                                          "class_weight": [None, "balanced"]}), 2)


def test_errors_become_plpy_errors_with_sqlstate_and_hint(plpy):
    from groupml.udf import aggregate
    h = _fill(plpy.buffers, np.random.default_rng(8), 5, model="forest")
    with pytest.raises(plpy.Error) as info:
        aggregate.final(h)
    err = info.value
    assert type(err).__name__ == "groupml" and type(err).__module__ == "builtins"
    assert err.sqlstate == "42704" and err.hint
    assert str(err).startswith("Unknown model family 'forest'")
    h = _fill(plpy.buffers, np.random.default_rng(8), 5, model=None)
    with pytest.raises(plpy.Error) as info:
        aggregate.final(h)
    assert info.value.sqlstate == "22023" and "got null" in str(info.value)


def test_a_cancel_is_passed_on_as_the_same_error_under_our_prefix(plpy):
    from groupml.udf import sql_entry

    @sql_entry
    def cancelled():
        raise plpy.spiexceptions.QueryCanceled("canceling statement due to user request")

    with pytest.raises(plpy.Error) as info:
        cancelled()
    err = info.value
    assert type(err).__name__ == "groupml" and type(err).__module__ == "builtins"
    assert err.sqlstate == "57014" and str(err) == "canceling statement due to user request"

    @sql_entry
    def bug():
        raise KeyError("x")

    @sql_entry
    def other_spi_error():
        raise plpy.spiexceptions.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction",
                                                        detail="a detail", hint="a hint")

    with pytest.raises(KeyError):                  # bugs pass unchanged
        bug()
    # other PostgreSQL errors too, under our prefix (PL/Python showed the class name:
    # 'spiexceptions.ReadOnlySqlTransaction: ...'), with their SQLSTATE, detail and hint
    with pytest.raises(plpy.Error) as info:
        other_spi_error()
    err = info.value
    assert type(err).__name__ == "groupml" and err.sqlstate == "25006"
    assert str(err) == "cannot execute INSERT in a read-only transaction"
    assert (err.detail, err.hint) == ("a detail", "a hint")


def test_running_out_of_memory_is_our_53200_not_a_bare_python_error(plpy):
    # a predict_batch of 8 million rows reported SQLSTATE 38000 "MemoryError:" with a traceback
    # (12 million: "unrecognized exception:" and no text at all)
    from groupml.udf import sql_entry

    @sql_entry
    def predict_batch():
        raise MemoryError()

    with pytest.raises(plpy.Error) as info:
        predict_batch()
    err = info.value
    assert type(err).__name__ == "groupml" and err.sqlstate == "53200"
    assert str(err) == "groupml ran out of memory in predict_batch"
    assert err.hint.startswith("Process less at once")


def test_a_resume_compares_only_the_settings_its_group_keys_depend_on():
    # an integer key was refused under another TimeZone: only timestamptz, interval and float
    # keys are written differently; a type not known here counts on all three
    from groupml.udf.train import _key_setting_names
    assert _key_setting_names(["integer", "text", "date", "uuid[]"]) == []
    assert _key_setting_names(["timestamp with time zone"]) == ["TimeZone"]
    assert _key_setting_names(["double precision[]", "interval"]) == ["IntervalStyle", "extra_float_digits"]
    assert _key_setting_names(["integer", "my_composite"]) == ["TimeZone", "IntervalStyle", "extra_float_digits"]
