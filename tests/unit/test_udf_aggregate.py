"""The aggregate's row buffer and the error mapping, with the shared plpy stub (pure parts only)."""

import numpy as np
import pytest

from groupml.errors import ArrayLengthError, DataError


@pytest.fixture
def plpy(plpy):
    """The shared plpy stub, answering the aggregate's clock and its cost-model read."""
    plpy.now = "2026-01-01 00:00:00+00"      # transaction start
    plpy.stmt = "2026-01-01 00:00:00+00"     # statement start
    plpy.on("now()", lambda sql, args: [{"t": plpy.now, "s": plpy.stmt}])
    plpy.on("cost_runs", [])
    return plpy


def test_row_buffer_packs_rows_and_counts_skips():
    from groupml.udf.aggregate import RowBuffer
    b = RowBuffer("logistic", {}, {}, "t")
    b.add([1.0, 2.0], 1.0)
    b.add(None, 1.0)
    b.add([1.0, None], 0.0)
    b.add([3.0, 4.0], None)
    b.add([5.0, 6.0], 0.0)
    assert b.skipped == 3
    X = np.array(b.x).reshape(-1, 2)
    assert X.tolist() == [[1.0, 2.0], [5.0, 6.0]] and list(b.y) == [1.0, 0.0]
    with pytest.raises(ArrayLengthError) as info:
        b.add([1.0], 1.0)
    assert info.value.message.endswith("expected 2 values, found 1")
    with pytest.raises(DataError):
        b.add([[1.0], [2.0]], 1.0)
    assert len(b.x) == 4  # a failed row leaves nothing behind


def test_aggregate_round_trip_and_sweep(plpy):
    from groupml.udf import aggregate
    rng = np.random.default_rng(0)
    state = None
    for _ in range(200):
        x = rng.normal(size=3)
        state = aggregate.step(state, x.tolist(), float(x.sum() > 0), "logistic", '{"l2": [0.01, 0.1]}', None)
    state = aggregate.step(state, [1.0, None, 2.0], 1.0, "logistic", "{}", None)  # NULL mid-array
    state = aggregate.step(state, [1.0, 2.0, 3.0], None, "logistic", "{}", None)  # NULL label
    assert len(aggregate._buffers[state].x) == 200 * 3
    fit = aggregate.final(state)
    assert fit["status"] == "ok" and fit["n_train"] + fit["n_validation"] == 200 and fit["n_skipped"] == 2
    assert state not in aggregate._buffers
    # a buffer abandoned by a failed statement is swept when a later transaction starts an aggregate
    orphan = aggregate.step(None, [1.0], 1.0, "logistic", "{}", None)
    plpy.now = "2026-01-01 00:00:01+00"
    fresh = aggregate.step(None, [1.0], 1.0, "logistic", "{}", None)
    assert orphan not in aggregate._buffers and fresh in aggregate._buffers


def _fill(aggregate, rng, n, options):
    state = None
    for _ in range(n):
        x = rng.normal(size=3)
        state = aggregate.step(state, x.tolist(), float(x[0] + 0.3 * x[1] > 0), "logistic",
                               '{"l2": [0.001, 0.1]}', options)
    return state


def test_groups_trained_ahead_equal_one_by_one(plpy):
    """Final functions called group by group (HashAggregate): the first call starts the
    other buffers in threads; each result equals training the group alone."""
    from groupml.udf import aggregate
    results = {}
    for threads in (1, 2):
        rng = np.random.default_rng(3)
        opts = '{"threads": %d}' % threads
        states = [_fill(aggregate, rng, n, opts) for n in (300, 120, 80, 200)]
        if threads == 2:
            first = aggregate.final(states[0])
            assert set(aggregate._ahead) == set(states[1:])       # the others were started
            results[threads] = [first] + [aggregate.final(s) for s in states[1:]]
            assert not aggregate._ahead
        else:
            results[threads] = [aggregate.final(s) for s in states]
            assert not aggregate._ahead
    for a, b in zip(results[1], results[2]):
        assert a["status"] == b["status"] == "ok"
        assert a["n_train"] == b["n_train"] and a["params"] == b["params"] and a["model"] == b["model"]


def test_buffer_growing_after_its_start_is_trained_again(plpy):
    """Another aggregate in the same query may still add rows to a buffer that was started
    ahead: the rows go to a copy and its final call trains on every row."""
    from groupml.udf import aggregate
    rng = np.random.default_rng(4)
    opts = '{"threads": 2}'
    a = _fill(aggregate, rng, 150, opts)
    b = _fill(aggregate, rng, 150, opts)
    aggregate.final(a)                                            # starts b ahead
    assert b in aggregate._ahead
    for _ in range(60):                                           # b keeps growing meanwhile
        x = rng.normal(size=3)
        assert aggregate.step(b, x.tolist(), float(x[0] > 0), "logistic", '{"l2": [0.001, 0.1]}', opts) == b
    fit_b = aggregate.final(b)
    assert fit_b["n_train"] + fit_b["n_validation"] == 210


def test_an_earlier_statements_buffers_are_not_trained_ahead(plpy):
    """A statement that failed (or was rolled back to a savepoint) leaves buffers behind in
    the transaction; a later statement's first final call used to train them all ahead."""
    from groupml.udf import aggregate
    rng = np.random.default_rng(5)
    opts = '{"threads": 2}'
    left = [_fill(aggregate, rng, 100, opts) for _ in range(3)]     # its final calls never came
    plpy.stmt = "2026-01-01 00:00:00.5+00"                          # the next statement, same transaction
    a, b = _fill(aggregate, rng, 100, opts), _fill(aggregate, rng, 80, opts)
    aggregate.final(a)
    assert set(aggregate._ahead) == {b}                             # only this statement's other group
    assert all(h in aggregate._buffers for h in left)               # kept: a cursor may still finalize them
    aggregate.final(b)


def test_a_statement_that_fails_drops_its_other_buffers(plpy):
    from groupml.udf import aggregate
    rng = np.random.default_rng(6)
    opts = '{"threads": 2}'
    a, b, c = (_fill(aggregate, rng, 100, opts) for _ in range(3))
    aggregate._buffers[a].search = {"no_such_key": 1}               # its training raises
    with pytest.raises(plpy.Error):
        aggregate.final(a)
    assert not aggregate._ahead and b not in aggregate._buffers and c not in aggregate._buffers


def test_groups_started_ahead_by_an_earlier_statement_stop_and_train_again_if_asked(plpy):
    """A LIMIT (or a closed cursor) ends a statement before its final calls: the groups it
    started ahead kept training beside the next statements. A new aggregate stops them; a
    final call that still comes (an open cursor) trains its group in the foreground."""
    from groupml.udf import aggregate
    rng = np.random.default_rng(7)
    opts = '{"threads": 2}'
    a, b = _fill(aggregate, rng, 120, opts), _fill(aggregate, rng, 90, opts)
    aggregate.final(a)
    _, _, abort = aggregate._ahead[b]
    plpy.stmt = "2026-01-01 00:00:00.5+00"
    _fill(aggregate, rng, 50, opts)                                # an aggregate of the next statement
    assert abort.is_set() and b not in aggregate._ahead
    fit_b = aggregate.final(b)
    plpy.now = "2026-01-01 00:00:02+00"                             # alone, in another transaction
    rng2 = np.random.default_rng(7)
    _fill(aggregate, rng2, 120, '{"threads": 1}')
    alone = aggregate.final(_fill(aggregate, rng2, 90, '{"threads": 1}'))
    assert fit_b["status"] == "ok" and fit_b["model"] == alone["model"]


def test_errors_become_plpy_errors_with_sqlstate_and_hint(plpy):
    from groupml.udf import aggregate
    with pytest.raises(plpy.Error) as info:
        aggregate.step(None, [1.0], 1.0, "forest", "{}", None)
    err = info.value
    assert type(err).__name__ == "groupml" and type(err).__module__ == "builtins"
    assert err.sqlstate == "42704" and err.hint
    assert str(err).startswith("Unknown model family 'forest'")


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
