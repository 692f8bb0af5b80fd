"""The first part of train_groups' load in two parts (groupml.udf.train.plan_first_buckets)."""

from groupml.udf.train import plan_first_buckets


def groups(*pairs):
    return [{"b": b, "n": n} for b, n in pairs]


def test_the_first_part_holds_the_largest_groups_up_to_its_share():
    # bucket 7 holds the largest group, bucket 2 the next; 40% of 1,000 rows is reached by both
    first = plan_first_buckets(groups((7, 300), (2, 200), (2, 50), (5, 150), (1, 100), (3, 100), (4, 100)), 0.4)
    assert first == [2, 7]


def test_buckets_go_by_their_largest_group_not_their_total():
    # bucket 9's many small groups outweigh bucket 4's one large group, which still loads first
    first = plan_first_buckets(groups((4, 400), (9, 100), (9, 100), (9, 100), (9, 100), (9, 100), (6, 200)), 0.3)
    assert first == [4]


def test_a_first_part_with_every_bucket_is_one_load():
    assert plan_first_buckets(groups((3, 10), (3, 20)), 0.3) is None
    assert plan_first_buckets(groups((3, 900), (8, 10)), 0.95) == [3]
    assert plan_first_buckets(groups((3, 900), (8, 10)), 0.999) is None
    assert plan_first_buckets([], 0.3) is None
