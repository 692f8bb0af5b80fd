"""GP machinery of groupml.tenancy: incremental posterior vs explicit matrix formulas,
prior (mean + kernel) estimated from other tenants' qualities, cost-aware UCB scores."""

import math

import numpy as np
import pytest

from groupml.tenancy import TenantBandit, TenantGP, beta, estimate_prior, history_matrix, posterior_direct


def _random_psd(rng, k):
    a = rng.normal(size=(k, k))
    return a @ a.T / k + 0.05 * np.eye(k)


def test_incremental_posterior_matches_explicit_inverse():
    rng = np.random.default_rng(3)
    k = 12
    kernel = _random_psd(rng, k)
    mean0 = rng.normal(size=k)
    noise_var = 0.01
    gp = TenantGP(mean0, kernel, noise_var)
    order = [4, 0, 11, 7, 2, 9]
    ys = rng.normal(size=len(order))
    for n, (i, y) in enumerate(zip(order, ys), start=1):
        gp.add(i, float(y))
        # textbook formulas, written out here with an explicit inverse
        A = order[:n]
        K_AA = kernel[np.ix_(A, A)] + noise_var * np.eye(n)
        inv = np.linalg.inv(K_AA)
        mu = mean0 + kernel[:, A] @ inv @ (ys[:n] - mean0[A])
        var = np.array([kernel[j, j] - kernel[j, A] @ inv @ kernel[A, j] for j in range(k)])
        np.testing.assert_allclose(gp.mean, mu, rtol=1e-9, atol=1e-10)
        np.testing.assert_allclose(gp.var, var, rtol=1e-9, atol=1e-10)
        ref_mu, ref_var = posterior_direct(mean0, kernel, noise_var, A, ys[:n])
        np.testing.assert_allclose(gp.mean, ref_mu, atol=1e-10)
        np.testing.assert_allclose(gp.var, ref_var, atol=1e-10)


def test_posterior_one_point_by_hand():
    # two candidates, prior mean 0.5, var 0.04, covariance 0.02, noise var 0.01
    kernel = np.array([[0.04, 0.02], [0.02, 0.04]])
    gp = TenantGP(np.array([0.5, 0.5]), kernel, 0.01)
    gp.add(0, 0.8)
    # mean_j = 0.5 + k(j,0) / (0.04 + 0.01) * 0.3
    assert gp.mean[0] == pytest.approx(0.5 + 0.04 / 0.05 * 0.3)
    assert gp.mean[1] == pytest.approx(0.5 + 0.02 / 0.05 * 0.3)
    assert gp.var[0] == pytest.approx(0.04 - 0.04 ** 2 / 0.05)
    assert gp.var[1] == pytest.approx(0.04 - 0.02 ** 2 / 0.05)


def test_prior_from_full_history_is_sample_mean_and_covariance():
    rng = np.random.default_rng(0)
    data = rng.normal(0.6, 0.1, size=(40, 5))
    mean, cov = estimate_prior(data, shrinkage=0.0)
    np.testing.assert_allclose(mean, data.mean(axis=0))
    np.testing.assert_allclose(cov, np.cov(data, rowvar=False), atol=1e-12)


def test_prior_shrinkage_missing_keys_and_psd():
    rng = np.random.default_rng(1)
    data = rng.normal(0.5, 0.1, size=(30, 4))
    data[:, 3] = np.nan              # nobody observed key 3
    data[:28, 2] = np.nan            # key 2 seen in only 2 rows: < min_pairs
    mean, cov = estimate_prior(data, shrinkage=0.25)
    observed = data[~np.isnan(data)]
    assert mean[3] == pytest.approx(observed.mean())
    assert cov[3, 3] == pytest.approx(observed.var(ddof=1))
    assert cov[2, 2] == pytest.approx(observed.var(ddof=1))
    assert np.all(cov[3, :3] == 0) and np.all(cov[2, [0, 1]] == 0)
    full = np.cov(data[:, :2], rowvar=False)
    assert cov[0, 1] == pytest.approx(0.75 * full[0, 1])
    assert cov[0, 0] == pytest.approx(full[0, 0])
    assert np.linalg.eigvalsh(cov).min() > 0


def test_prior_covariance_needs_min_pairs_rows_seen_together():
    # a pair of keys seen together in min_pairs rows gets its covariance; in fewer, 0
    data = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    _, cov = estimate_prior(data, shrinkage=0.05, min_pairs=3)
    # centred values -1, 0, 1 on both keys: covariance 2 / (3 - 1) = 1, shrunk by 5%
    assert cov[0, 1] == pytest.approx(0.95)
    assert cov[0, 0] == pytest.approx(1.0)
    _, cov = estimate_prior(data[:2], shrinkage=0.05, min_pairs=3)
    assert cov[0, 1] == 0.0


def test_prior_without_data_uses_defaults():
    mean, cov = estimate_prior(np.full((0, 3), np.nan))
    np.testing.assert_allclose(mean, 0.5)
    np.testing.assert_allclose(cov, 0.04 * np.eye(3), atol=1e-12)


def test_history_matrix_packs_by_key():
    m = history_matrix([{"a": 0.1, "c": 0.3}, {"b": 0.2, "zzz": 9.0}], ["a", "b", "c"])
    assert np.isnan(m[0, 1]) and np.isnan(m[1, 0]) and np.isnan(m[1, 2])
    assert m[0, 0] == 0.1 and m[0, 2] == 0.3 and m[1, 1] == 0.2


def test_beta_matches_theorem_formula():
    assert beta(1, 1, 1, 0.5) == pytest.approx(2 * math.log(math.pi ** 2 / 3.0))
    assert beta(3, 4, 10, 0.1, c_max=2.0, scale=0.5) == pytest.approx(
        0.5 * 2 * 2.0 * math.log(math.pi ** 2 * 4 * 10 * 9 / 0.6))


def _bandit(mean, var, costs):
    b = TenantBandit("t", [f"k{i}" for i in range(len(mean))], costs, order=0)
    b.gp = TenantGP(np.array(mean, float), np.diag(np.array(var, float)), 1e-4)
    return b


def test_ucb_prefers_uncertain_when_cost_oblivious_and_cheap_when_cost_aware():
    # k0: mean 0.70 sd 0.05; k1: mean 0.60 sd 0.10; beta = 4 -> ucb 0.80 vs 0.80+0.00 ...
    b = _bandit([0.70, 0.60], [0.05 ** 2, 0.10 ** 2], [1.0, 1.0])
    s = b.scores(4.0, np.ones(2))
    np.testing.assert_allclose(s, [0.70 + 2 * 0.05, 0.60 + 2 * 0.10])
    assert int(np.argmax(s)) == 1
    # with normalized costs (k1 costs 4x more): bonus of k1 halves -> k0 wins
    s = b.scores(4.0, np.array([0.25, 1.0]))
    np.testing.assert_allclose(s, [0.70 + 4 * 0.05, 0.60 + 2 * 0.10])
    assert int(np.argmax(s)) == 0


def test_tried_candidate_scores_minus_infinity_and_ecb_recurrence():
    b = _bandit([0.5, 0.5, 0.5], [0.01, 0.01, 0.01], [1, 1, 1])
    b.record(0, 0.55, ucb_at_pick=0.9)
    assert b.gap == pytest.approx(0.9 - 0.55) and b.ecb == 0.9
    assert np.isneginf(b.scores(1.0, np.ones(3))[0])
    b.record(1, 0.60, ucb_at_pick=0.95)      # larger UCB does not loosen the bound
    assert b.ecb == 0.9 and b.gap == pytest.approx(0.30)
    b.record(2, 0.40, ucb_at_pick=0.7)       # smaller UCB tightens it
    assert b.ecb == 0.7 and b.gap == pytest.approx(0.30) and b.best == 0.60
    assert not b.active
