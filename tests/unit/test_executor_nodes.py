"""The pure parts of training on the nodes: placement from the holders' counts, requests as a
holder runs them, and a non-superuser's connection options."""

import json

import pytest

from groupml.errors import FeatureNotSupportedError
from groupml.executor.nodes import (NO_FILE, Holder, check_grouping, check_pattern, holder_endpoints, hop_plan_text,
                                    hop_tasks, node_groups, node_plan_facts, node_tasks, replica_endpoints,
                                    split_groups, stale_node_snapshots)
from groupml.executor.pool import for_holder


def part(groups):
    return {"snapshot": 7, "groups": {str(g): {"n_train": n, "n_val": v, "n_pos": p, "n_skipped": s,
                                               "train_rows": rows} for g, (n, v, p, s, rows) in groups.items()}}


def test_groups_take_the_placement_their_rows_have():
    parts = [part({0: (10, 2, 4, 0, [10]), 1: (5, 1, 2, 1, [5])}),
             part({1: (7, 2, 3, 0, [4, 3])}),
             part({2: (3, 1, 1, 0, [3])})]
    groups = node_groups(parts)
    assert groups[1]["n_train"] == 12 and groups[1]["n_val"] == 3 and groups[1]["n_pos"] == 5
    assert groups[1]["n_skipped"] == 1
    tasks = node_tasks(groups)
    assert tasks[0]["shards"] == [(0, 0, 10, [[0, 0, 10]])]
    # a group on two holders: one shard each, row ranges one after the other, pieces local to the holder
    assert tasks[1]["shards"] == [(0, 0, 5, [[0, 0, 5]]), (1, 5, 7, [[0, 0, 4], [1, 0, 3]])]
    assert tasks[2]["shards"] == [(2, 0, 3, [[0, 0, 3]])]
    assert split_groups(tasks) == [1]


def test_glm_mlp_and_lightgbm_groups_may_span_holders_and_other_patterns_may_not():
    for pattern in ("algebraic", "sequential", "sampling"):    # partial sums, model hopping, one rank per node
        check_pattern(pattern, [1, 3], {1: '{"g": 1}'})
        check_grouping(pattern, ["segment"], "country", "events")
    check_pattern("other", [], {})
    with pytest.raises(FeatureNotSupportedError) as info:
        check_pattern("other", [1, 3], {1: '{"g": 1}'})
    assert info.value.sqlstate == "0A000" and '{"g": 1}' in info.value.message and "2 groups" in info.value.message
    check_grouping("other", ["country", "segment"], "country", "events")
    with pytest.raises(FeatureNotSupportedError) as info:
        check_grouping("other", ["segment"], "country", "events")
    assert "'country'" in info.value.message and info.value.hint


def test_a_holder_reads_its_own_snapshot_id():
    req = json.dumps({"op": "fit", "snapshot": 3, "group_no": 1})
    assert for_holder(req, None) == req
    assert json.loads(for_holder(req, 41)) == {"op": "fit", "snapshot": 41, "group_no": 1}
    build = json.dumps({"op": "node_snapshot", "source": "t"})
    assert for_holder(build, 41) == build           # no snapshot yet: unchanged


class Catalog:
    def __init__(self, su):
        self.su = su

    def query(self, sql, args=(), types=()):
        return [{"db": "app", "usr": "ana", "su": self.su}]


def test_a_non_superuser_connects_with_its_own_credentials_only():
    from psycopg.conninfo import conninfo_to_dict

    h = Holder("n1:5432 public.t_1", "n1", 5432, '"public"."t_1"', 1, (("n2", 5433),))
    ep = holder_endpoints(Catalog(False), [h])[0]
    d = conninfo_to_dict(ep["dsn"])
    assert (d["host"], d["port"], d["dbname"], d["user"]) == ("n1", "5432", "app", "ana")
    # PGPASSWORD is not read (an empty password is given), nor the server's password file or client certificate
    assert d["password"] == "" and d["passfile"] == NO_FILE and d["sslcert"] == NO_FILE and d["sslkey"] == NO_FILE
    assert ep["caller_only"] and ep["remote"]
    assert conninfo_to_dict(ep["alternates"][0]["dsn"])["port"] == "5433"
    su = conninfo_to_dict(holder_endpoints(Catalog(True), [h])[0]["dsn"])
    assert su["user"] == "ana" and "passfile" not in su


def test_stale_node_snapshots_come_from_the_recorded_plan():
    plan = {"nodes": {"snapshots": [{"node": "n1:5432", "table": "t", "snapshot": 4}]}}
    assert stale_node_snapshots(json.dumps(plan)) == plan["nodes"]["snapshots"]
    assert stale_node_snapshots(None) == [] and stale_node_snapshots("{}") == [] and stale_node_snapshots("x") == []


class Mappings:
    def __init__(self, options):
        self.options = options

    def query(self, sql, args=(), types=()):
        if "pg_user_mappings" in sql:
            return [{"umoptions": self.options}] if self.options is not None else []
        return [{"u": "ana"}]


def test_a_foreign_server_is_reached_with_the_callers_user_mapping_only():
    from psycopg.conninfo import conninfo_to_dict

    from groupml.errors import InvalidAuthorizationError
    from groupml.executor.nodes import fdw_conninfo

    h = Holder("shard1 public.sales", "db1", 5432, '"public"."sales"', 0, server="shard1", dbname="app")
    dsn, role = fdw_conninfo(Mappings(["user=remote_ana", "password=s3cret"]), h, superuser=False)
    d = conninfo_to_dict(dsn)
    assert (d["host"], d["dbname"], d["user"], d["password"], role) == ("db1", "app", "remote_ana", "s3cret",
                                                                        "remote_ana")
    assert d["passfile"] == NO_FILE and d["sslkey"] == NO_FILE
    with pytest.raises(InvalidAuthorizationError) as info:
        fdw_conninfo(Mappings(["user=remote_ana"]), h, superuser=False)
    assert info.value.sqlstate == "28000" and "shard1" in info.value.message and "s3cret" not in info.value.message
    dsn, role = fdw_conninfo(Mappings(None), h, superuser=True)     # a superuser without options: as itself
    assert conninfo_to_dict(dsn)["user"] == "ana" and "password" not in conninfo_to_dict(dsn)


def test_spread_mlp_groups_hop_over_their_holders_and_replicas():
    parts = [part({0: (10, 2, 4, 0, [10]), 1: (5, 0, 2, 1, [5])}),
             part({1: (7, 2, 3, 0, [4, 3])}),
             part({1: (4, 1, 3, 0, [4])})]
    groups = node_groups(parts)
    tasks = hop_tasks(node_tasks(groups), groups, {0: [3], 2: [4]})
    assert tasks[0] == {"mode": "shards", "shards": [(0, 0, 10, [[0, 0, 10]])]}     # whole on its node
    assert tasks[1]["mode"] == "mop"
    # shard s may be visited by its holder and the replicas of that holder
    assert tasks[1]["holders"] == [[0, 3], [1], [2, 4]]
    # validation parts in the order the coordinator gathered them (holders with validation rows)
    assert tasks[1]["val"] == [[1], [2, 4]]
    eps = [{"node": f"n{i}:5432"} for i in range(5)]
    text = hop_plan_text(tasks, eps)
    assert "group_no 1: partitions 0 on n0:5432/n3:5432, 1 on n1:5432, 2 on n2:5432/n4:5432" in text
    assert "randomized" in text


def test_a_replicated_shard_gets_an_optional_endpoint_per_other_placement():
    h = Holder("n1:5432 public.t_1", "n1", 5432, '"public"."t_1"', 1, (("n2", 5433),))
    eps = holder_endpoints(Catalog(True), [h, Holder("n2:5433 public.t_2", "n2", 5433, '"public"."t_2"', 2)])
    reps = replica_endpoints(eps)
    assert len(reps) == 1
    r = reps[0]
    assert (r["node"], r["table"], r["replica_of"], r["optional"]) == ("n2:5433", '"public"."t_1"', 0, True)
    assert r["name"] == "n2:5433 public.t_1" and "port=5433" in r["dsn"]
    # the plan names every endpoint's snapshot with its worker (replay reads the rows there)
    eps[0]["snapshot"], r["snapshot"] = 5, 6
    facts = node_plan_facts([h], {}, [eps[0], r])
    assert [(s["worker"], s["node"], s["replica_of"]) for s in facts["snapshots"]] == [(0, "n1:5432", None),
                                                                                    (1, "n2:5433", 0)]


def test_a_node_lost_error_keeps_its_sqlstate_when_a_run_stops_on_it():
    from groupml.executor.pool import NodeLostError
    from groupml.executor.run import _stopped

    exc = NodeLostError.of("partition(s) 1", "{}", "worker 1 ('127.0.0.1:9702 public.t_2') failed: terminated")
    assert exc.sqlstate == "08001" and "127.0.0.1:9702" in exc.message and "replication" in exc.hint
    out = _stopped(exc, f"run 5 stopped: {exc.message}", "Call train_groups again with run_id => 5.")
    assert type(out) is NodeLostError and out.sqlstate == "08001" and "run_id => 5" in out.hint


def test_mop_on_the_nodes_is_for_mlps():
    from groupml.executor.nodes import check_node_strategy

    check_node_strategy("sequential", "mop", "events")
    check_node_strategy("algebraic", "auto", "events")
    with pytest.raises(FeatureNotSupportedError) as info:
        check_node_strategy("algebraic", "mop", "events")
    assert "'strategy'" in info.value.message and "partial sums" in info.value.hint
