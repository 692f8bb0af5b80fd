"""learn_over_groups' groups trained ahead in helpers: the work estimate and the bookkeeping
of handed-out groups, with a stand-in for the helper pool."""

import pytest

from groupml.udf._aggahead import MIN_WORK, AheadGroup, HelperTask, planned_work, start
from groupml.udf.aggregate import RowBuffer


def buffer(search, rows, family="logistic"):
    b = RowBuffer(family, search, {}, "txn")
    b.d = 1
    b.x.extend([0.5] * rows)
    b.y.extend([1.0] * rows)
    return b


def test_planned_work_is_rows_times_the_largest_budget():
    assert planned_work(buffer({"max_iter": 1}, 10)) == 10
    assert planned_work(buffer({"l2": [0.1], "max_iter": [5, 40]}, 10)) == 400
    assert planned_work(buffer({"l2": [0.1]}, 10)) == 1000          # the learner's default, 100


class FakePool:
    def __init__(self, finished):
        self.finished = list(finished)      # (key, result) in the order the helpers finish
        self.closed = None

    @property
    def _pending(self):
        return len(self.finished)

    def results(self, poll):
        while self.finished:
            poll()
            yield self.finished.pop(0)

    def close(self, terminate):
        self.closed = terminate


class Session:
    def check_cancel(self):
        pass


def test_each_group_gets_its_own_fit_whatever_order_they_finish():
    pool = FakePool([(2, "fit2"), (1, "fit1"), (3, "fit3")])
    group = AheadGroup(pool, [1, 2, 3])
    assert HelperTask(group, 1).wait(Session()) == "fit1"
    assert pool.closed is None                      # two groups still wait
    assert HelperTask(group, 2).wait(Session()) == "fit2"
    assert HelperTask(group, 3).wait(Session()) == "fit3"
    assert pool.closed is False                     # the last one closes the helpers, gently


def test_dropped_groups_close_the_helpers_at_once():
    pool = FakePool([(1, "fit1"), (2, "fit2")])
    group = AheadGroup(pool, [1, 2])
    HelperTask(group, 1).set()
    HelperTask(group, 2).set()
    assert pool.closed is True                      # tasks still held: the helpers are killed
    assert HelperTask(group, 1).wait(Session()) is None     # trained in the foreground instead


def test_a_cancel_while_waiting_kills_the_helpers():
    class Cancelled(Exception):
        pass

    class Cancelling(Session):
        def check_cancel(self):
            raise Cancelled()

    pool = FakePool([(1, "fit1")])
    group = AheadGroup(pool, [1, 2])
    with pytest.raises(Cancelled):
        HelperTask(group, 1).wait(Cancelling())
    assert pool.closed is True and not group.open


def test_little_work_or_one_process_starts_no_helpers():
    small = [(1, buffer({"max_iter": 1}, 1000)), (2, buffer({"max_iter": 1}, 1000))]
    assert sum(planned_work(b) for _, b in small) < MIN_WORK
    assert start(small, 2, lambda b: None) is None
    big = [(1, buffer({"l2": [0.1]}, MIN_WORK))]
    assert start(big, 1, lambda b: None) is None
