"""The split of train_groups' load into parts (groupml.udf.train.plan_load_chunks)."""

from groupml.udf.train import plan_load_chunks


def groups(*pairs):
    return [{"b": b, "n": n, "gkey": f'{{"g": {i}}}'} for i, (b, n) in enumerate(pairs)]


def test_the_first_load_holds_the_largest_groups_up_to_its_share():
    # bucket 7 holds the largest group, bucket 2 the next; 40% of 1,000 rows is reached by both
    parts = plan_load_chunks(groups((7, 300), (2, 200), (2, 50), (5, 150), (1, 100), (3, 100), (4, 100)), 0.4)
    assert parts == [[2, 7], [1, 3, 4, 5]]
    assert sorted(sum(parts, [])) == [1, 2, 3, 4, 5, 7]      # every bucket exactly once


def test_buckets_go_by_their_largest_group_not_their_total():
    # bucket 9's many small groups outweigh bucket 4's one large group, which still loads first
    parts = plan_load_chunks(groups((4, 400), (9, 100), (9, 100), (9, 100), (9, 100), (9, 100), (6, 200)), 0.3)
    assert parts[0] == [4]


def test_one_bucket_is_one_load():
    assert plan_load_chunks(groups((3, 10), (3, 20)), 0.3) == [[3]]
    assert plan_load_chunks(groups((3, 900), (8, 10)), 0.95) == [[3], [8]]
    assert plan_load_chunks(groups((3, 900), (8, 10)), 0.999) == [[3, 8]]
