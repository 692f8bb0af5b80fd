"""LightGBM groups spread over nodes: one rank per node, its address, the rows it reads."""

import numpy as np
import pytest

from groupml.errors import FeatureNotSupportedError, InvalidParameterError
from groupml.executor import worker
from groupml.executor.nodes import node_rank_hosts, node_ranks
from groupml.learners import row_hash_and_order


def ep(node, name="h", dbname=None, role=None):
    return {"node": node, "name": name, "dbname": dbname, "role": role, "remote": True}


def test_one_rank_per_node_on_its_largest_holder():
    eps = [ep("10.0.0.1:5432"), ep("10.0.0.2:5432"), ep("10.0.0.1:5432"), ep("10.0.0.2:5432")]
    # (worker, row_start, n_rows, pieces): shards round-robin over two nodes, as Citus places them
    shards = [(0, 0, 5, []), (1, 5, 9, []), (2, 14, 8, []), (3, 22, 9, [])]
    assert node_ranks(shards, eps) == [(2, [0, 2]), (1, [1, 3])]     # a tie goes to the first holder
    # the same host and port but another database (or remote role) is another node
    eps[2] = ep("10.0.0.1:5432", dbname="other")
    assert node_ranks(shards, eps) == [(0, [0]), (1, [1, 3]), (2, [2])]


def test_a_rank_listens_on_its_nodes_address():
    eps = [ep("127.0.0.1:9701"), ep("localhost:9702"), ep("/var/run/postgresql:5432")]
    assert node_rank_hosts(eps, [0, 1, 2]) == ["127.0.0.1"] * 3
    assert node_rank_hosts([ep("10.1.2.3:5432"), ep("10.1.2.4:5432")], [1, 0]) == ["10.1.2.4", "10.1.2.3"]
    with pytest.raises(FeatureNotSupportedError) as info:
        node_rank_hosts([ep("127.0.0.1:9701"), ep("10.1.2.4:5432")], [0, 1])
    assert info.value.sqlstate == "0A000" and "127.0.0.1:9701" in info.value.message and info.value.hint
    with pytest.raises(FeatureNotSupportedError) as info:
        node_rank_hosts([ep("no-such-host.invalid:5432", name="s1")], [0])
    assert "no-such-host.invalid:5432" in info.value.message and "IPv4" in info.value.message


def test_a_node_rank_reads_its_shards_in_the_snapshots_row_order(monkeypatch):
    rng = np.random.default_rng(3)
    X, y = rng.normal(size=(40, 3)), (rng.random(40) > 0.5).astype(float)
    order = row_hash_and_order(X, y, 7)[1]
    X, y = X[order], y[order]                       # a group's rows as one snapshot orders them
    take = rng.random(40) < 0.5                    # which of them one shard table holds
    parts = {11: (X[take], y[take]), 12: (X[~take], y[~take])}
    real = worker.shard_arrays
    monkeypatch.setattr(worker, "shard_arrays",
                        lambda session, req: parts[req["snapshot"]] if not req.get("parts") else real(session, req))
    req = worker.parse_request({"op": "lgbm_rank", "snapshot": 1, "group_no": 0, "d": 3, "seed": 7,
                                "parts": [{"snapshot": 12, "pieces": [[0, 0, 1]]},
                                          {"snapshot": 11, "pieces": [[0, 1, 2]]}]}, "_gap_task")
    Xn, yn = worker.node_arrays(None, req)
    assert np.array_equal(Xn, X) and np.array_equal(yn, y)
    with pytest.raises(InvalidParameterError):
        worker.parse_request({"op": "lgbm_rank", "seed": 7, "parts": [{"snapshot": 0, "pieces": []}]}, "_gap_task")
    with pytest.raises(InvalidParameterError):
        worker.parse_request({"op": "lgbm_rank", "seed": 7, "parts": [{"snapshot": 2, "pieces": [[1, 2]]}]},
                             "_gap_task")


def test_a_failed_job_names_the_lost_worker_not_a_peer_whose_network_broke():
    import threading
    from concurrent.futures import Future

    from groupml.errors import PrerequisiteStateError
    from groupml.executor.nodes import lost_node
    from groupml.executor.patterns import ShardedLGBMTrainer
    from groupml.executor.pool import WorkerLostError

    class Ctx:
        abort = threading.Event()

    trainer = ShardedLGBMTrainer.__new__(ShardedLGBMTrainer)
    trainer.ctx = Ctx()
    peer, lost = Future(), Future()
    peer.set_exception(PrerequisiteStateError("Distributed LightGBM failed: socket error"))
    threading.Timer(0.3, lambda: lost.set_exception(
        WorkerLostError("worker 1 ('10.0.0.2:5432 public.t_2', backend pid 7) failed: terminating connection"))).start()
    with pytest.raises(WorkerLostError) as info:
        trainer._gang_results([peer, lost])
    ok = [Future(), Future()]
    for f in ok:
        f.set_result(b"text")
    assert trainer._gang_results(ok) == [b"text", b"text"]

    class Conn:
        def __init__(self, broken):
            self.broken = broken

    class Pool:
        endpoints = [ep("10.0.0.1:5432", name="10.0.0.1:5432 public.t_1"),
                     ep("10.0.0.2:5432", name="10.0.0.2:5432 public.t_2")]
        errors = [None, "gone"]
        conns = [Conn(False), Conn(False)]

    # no connection broke: a task failed on a node still there, no node is named
    assert lost_node(Pool(), info.value, wait_s=0) is None
    assert lost_node(Pool(), peer.exception(), wait_s=0) is None     # not a lost worker's error
    # the broken connection wins over a message naming a peer whose network broke with it
    Pool.conns = [Conn(True), Conn(False)]
    assert lost_node(Pool(), info.value) == "10.0.0.1:5432"
    Pool.endpoints = [dict(e, remote=False) for e in Pool.endpoints]
    assert lost_node(Pool(), info.value) is None                     # one server's workers: no node


def test_two_ranks_on_one_host_never_get_the_same_port():
    from groupml.errors import PrerequisiteStateError
    from groupml.executor.patterns import _PortClaims

    class Pool:
        pass

    claims, pool = _PortClaims(), Pool()
    a = claims.claim(pool, "127.0.0.1", iter([5001, 5002]))
    b = claims.claim(pool, "127.0.0.1", iter([5001, 5003]))        # another worker found 5001 free too
    assert (a, b) == (5001, 5003)
    assert claims.claim(pool, "10.0.0.2", iter([5001])) == 5001     # another host: its own ports
    assert claims.claim(Pool(), "127.0.0.1", iter([5001])) == 5001  # another run's pool
    with pytest.raises(PrerequisiteStateError):
        claims.claim(pool, "127.0.0.1", iter([5001, 5003]))
    claims.release(pool, [("127.0.0.1", 5001)])
    assert claims.claim(pool, "127.0.0.1", iter([5001])) == 5001
