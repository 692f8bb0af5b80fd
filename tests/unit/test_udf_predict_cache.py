"""The per-backend cache of decoded models behind predict (groupml.udf.predict.load_cached)."""

import numpy as np

from groupml.learners import GLMTrainer, load_model
from groupml.udf import predict as P


def _models(n):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    y = (X[:, 0] > 0).astype(float)
    tr = GLMTrainer("logistic", X, y)
    for i in range(n):
        tr.add(i, {"l2": 10.0 ** -i})
    tr.run(50)
    return [tr.model(i).to_bytes() for i in range(n)]


def test_a_hit_needs_the_same_bytes_not_only_the_same_key(monkeypatch):
    monkeypatch.setattr(P, "_cache", type(P._cache)())
    a, b = _models(2)
    monkeypatch.setattr(P, "KEY_PREFIX", 4)               # every model shares its key with the other
    assert len(a) == len(b) and a[:4] == b[:4] and a != b
    ma = P.load_cached(bytes(bytearray(a)))                 # a new bytes object per call, as PL/Python gives
    assert P.load_cached(bytes(bytearray(a))) is ma         # a hit
    mb = P.load_cached(bytes(bytearray(b)))                 # same key, other bytes: decoded, not served ma
    assert mb is not ma and np.array_equal(mb.coef, load_model(b).coef)
    assert not np.array_equal(ma.coef, mb.coef)


def test_the_cache_keeps_the_most_recent_models(monkeypatch):
    monkeypatch.setattr(P, "_cache", type(P._cache)())
    monkeypatch.setattr(P, "_cache_bytes", 0)
    monkeypatch.setattr(P, "CACHE_SIZE", 2)
    a, b, c = _models(3)
    ma, mb = P.load_cached(a), P.load_cached(b)
    assert P.load_cached(a) is ma                           # a is now the most recent
    P.load_cached(c)                                        # evicts b
    assert len(P._cache) == 2 and P._cache_bytes == len(a) + len(c)
    assert P.load_cached(a) is ma and P.load_cached(b) is not mb


def test_the_cache_holds_at_most_its_bytes(monkeypatch):
    monkeypatch.setattr(P, "_cache", type(P._cache)())
    monkeypatch.setattr(P, "_cache_bytes", 0)
    a, b, c = _models(3)
    monkeypatch.setattr(P, "CACHE_BYTES", len(b) + len(c))
    for m in (a, b, c):
        P.load_cached(m)
    assert list(v[0] for v in P._cache.values()) == [b, c] and P._cache_bytes == len(b) + len(c)
    monkeypatch.setattr(P, "CACHE_BYTES", 1)                # one model bigger than the budget is still kept
    P.load_cached(a)
    assert list(v[0] for v in P._cache.values()) == [a] and P._cache_bytes == len(a)
