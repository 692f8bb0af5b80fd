"""The per-backend cache of decoded models behind predict (groupml.udf.predict.load_cached)."""

import io
import json

import numpy as np
import pytest

from groupml.errors import ModelFormatError
from groupml.learners import GLMTrainer, load_model
from groupml.learners._model import MAX_GLM_BYTES, pack_model
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


def _charged(model_bytes):
    """What the cache charges for one of these models: its bytes and its 3 decoded weights."""
    return len(model_bytes) + 3 * 8


def _deflated_glm(n_weights):
    """A GLM value as a forger would write it: a compressed archive of n zero weights."""
    header = json.dumps({"family": "logistic", "params": {}, "n_features": n_weights}, sort_keys=True)
    buf = io.BytesIO()
    np.savez_compressed(buf, coef=np.zeros(n_weights), intercept=np.array(0.0),
                        header=np.frombuffer(header.encode(), dtype=np.uint8))
    return pack_model("glm", buf.getvalue())


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
    assert len(P._cache) == 2 and P._cache_bytes == _charged(a) + _charged(c)
    assert P.load_cached(a) is ma and P.load_cached(b) is not mb


def test_the_cache_holds_at_most_its_bytes(monkeypatch):
    monkeypatch.setattr(P, "_cache", type(P._cache)())
    monkeypatch.setattr(P, "_cache_bytes", 0)
    a, b, c = _models(3)
    monkeypatch.setattr(P, "CACHE_BYTES", _charged(b) + _charged(c))
    for m in (a, b, c):
        P.load_cached(m)
    assert list(v[0] for v in P._cache.values()) == [b, c] and P._cache_bytes == _charged(b) + _charged(c)
    monkeypatch.setattr(P, "CACHE_BYTES", 1)                # one model bigger than the budget is still kept
    P.load_cached(a)
    assert list(v[0] for v in P._cache.values()) == [a] and P._cache_bytes == _charged(a)


def test_the_cache_charges_a_model_for_its_decoded_size(monkeypatch):
    # a 1M-weight model compressed to a few KB is charged its decoded 8 MB, not its few KB (at
    # which 256 MB of "budget" would hold hundreds decoded; a forged value could fill a backend)
    monkeypatch.setattr(P, "_cache", type(P._cache)())
    monkeypatch.setattr(P, "_cache_bytes", 0)
    small = _deflated_glm(1 << 20)
    assert len(small) < 50_000
    P.load_cached(small)
    assert P._cache_bytes == len(small) + 8 * (1 << 20)


def test_a_glm_value_that_would_unpack_beyond_the_limit_is_refused_unread():
    bomb = _deflated_glm((MAX_GLM_BYTES // 8) + 1)
    assert len(bomb) < 1_000_000
    with pytest.raises(ModelFormatError, match=r"The glm model would unpack to [\d,]+ bytes; at most "):
        load_model(bomb)
