"""groupml.shards: the shard map's data types, and the model_family enum kept in step with the learners."""

import os
import re

from groupml.learners import LEARNER_FAMILIES
from groupml.shards import CitusShard, CitusShardMap, FdwShardMap, ForeignPartition, Placement

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_model_family_enum_lists_every_learner_family():
    with open(os.path.join(ROOT, "sql", "types", "model_family.sql")) as fh:
        text = fh.read()
    values = re.findall(r"'(\w+)'", text.split("AS ENUM", 1)[1].split(";", 1)[0])
    assert values == sorted(LEARNER_FAMILIES)


def _placement(pid, host, port, state=1, active=True):
    return Placement(pid, pid, pid, host, port, state, active)


def test_citus_shard_map_nodes_and_replicas():
    a, b = ("10.0.0.1", 5432), ("10.0.0.2", 5432)
    shards = (CitusShard(1, "public", "t_1", "-2147483648", "-1", (_placement(1, *a), _placement(2, *b, state=3))),
              CitusShard(2, "public", "t_2", "0", "2147483647", (_placement(3, *b, active=False),)))
    m = CitusShardMap("t", "k", 7, shards)
    assert m.nodes() == [a, b]
    assert [s.shard_id for s in m.shards_on(*a)] == [1] and [s.shard_id for s in m.shards_on(*b)] == [1, 2]
    assert shards[0].replicas == 2 and shards[0].active_placements() == shards[0].placements[:1]
    assert shards[1].active_placements() == ()


def test_fdw_shard_map_servers():
    parts = (ForeignPartition("t_1", "FOR VALUES IN ('a')", "s2", "h", 5432, "db", "public", "t", True),
             ForeignPartition("t_2", "FOR VALUES IN ('b')", "s1", "h", 5433, "db", "public", "t", False),
             ForeignPartition("t_3", "DEFAULT", None, None, None, None, None, None, False))
    m = FdwShardMap("t", "LIST (k)", parts)
    assert m.servers() == ["s1", "s2"]
    assert [p.is_foreign for p in parts] == [True, True, False]
