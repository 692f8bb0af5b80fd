"""Hints of train_groups that name the arguments of the next call."""


def test_resume_hints_name_arguments_that_reach_worker_backends():
    from groupml.udf.train import _executor_args

    assert _executor_args(2, "auto") == "workers => 2"
    assert _executor_args(3, "gtp") == "workers => 3"
    # one worker trains in the backend itself unless a strategy is named (workers => 0 may choose 1)
    assert _executor_args(1, "gtp") == "workers => 1, strategy => 'gtp'"
    assert _executor_args(1, "auto") == "workers => 1, strategy => 'grouped'"
