"""Gaussian-process machinery for one tenant's candidate models.

Two pieces:

* :func:`estimate_prior` turns the qualities other tenants observed (plus an
  optional external history of past jobs) into a prior mean per candidate key and a
  key-to-key covariance matrix -- "the kernel from the training set": two models are
  similar when their qualities move together across other users' datasets.
* :class:`TenantGP` holds the posterior over one tenant's K candidates and updates it
  incrementally (one Cholesky row per observation), so mean and variance of all K
  candidates are always cached and a scheduling decision is O(K).
"""

from __future__ import annotations

import math
from typing import Iterable, List, Mapping, Sequence, Tuple

import numpy as np

#: Prior mean used for a key nobody has observed yet and no data at all exists.
DEFAULT_MEAN = 0.5
#: Prior variance used when no data exists (quality std of 0.2 on a [0, 1] scale).
DEFAULT_VAR = 0.04
#: Smallest variance we allow on the diagonal of the estimated kernel.
MIN_VAR = 1e-6


def history_matrix(rows: Sequence[Mapping[str, float]], keys: Sequence[str]) -> np.ndarray:
    """Pack rows (one per past tenant/job: ``{candidate_key: quality}``) into a matrix.

    Returns an array of shape (len(rows), len(keys)) with NaN where a row has no
    value for a key.
    """
    index = {k: j for j, k in enumerate(keys)}
    out = np.full((len(rows), len(keys)), np.nan)
    for i, row in enumerate(rows):
        for key, value in row.items():
            j = index.get(key)
            if j is not None and value is not None:
                out[i, j] = float(value)
    return out


def estimate_prior(data: np.ndarray, *, shrinkage: float = 0.05, min_pairs: int = 3
                   ) -> Tuple[np.ndarray, np.ndarray]:
    """Prior mean (K,) and PSD covariance (K, K) from a (rows x K) matrix with NaNs.

    * mean of key k: average of its observed values; keys without any value get the
      average of all observed values (or :data:`DEFAULT_MEAN` when there is none);
    * covariance of keys j, k: average product of centred values over the rows that
      observed both (divided by count - 1); pairs seen together in fewer than
      ``min_pairs`` rows get 0; a key's variance falls back to the pooled variance
      of all values (or :data:`DEFAULT_VAR`);
    * the off-diagonal part is shrunk by ``shrinkage`` toward 0 and the result is
      projected onto the PSD cone (negative eigenvalues clipped).
    """
    data = np.asarray(data, dtype=float)
    if data.ndim != 2:
        raise ValueError("data must be 2-D")
    n_keys = data.shape[1]
    mask = ~np.isnan(data)
    counts = mask.sum(axis=0)
    if mask.any():
        overall_mean = float(data[mask].mean())
        pooled_var = float(data[mask].var(ddof=1)) if mask.sum() > 1 else DEFAULT_VAR
    else:
        overall_mean, pooled_var = DEFAULT_MEAN, DEFAULT_VAR
    pooled_var = max(pooled_var, MIN_VAR)
    sums = np.where(mask, data, 0.0).sum(axis=0)
    mean = np.where(counts > 0, sums / np.maximum(counts, 1), overall_mean)
    centred = np.where(mask, data - mean, 0.0)
    m = mask.astype(float)
    pair_counts = m.T @ m
    cov = (centred.T @ centred) / np.maximum(pair_counts - 1.0, 1.0)
    cov[pair_counts < min_pairs] = 0.0
    diag = np.diag(cov).copy()
    diag = np.where((counts >= min_pairs) & (diag > MIN_VAR), diag, pooled_var)
    cov *= (1.0 - shrinkage)
    cov[np.diag_indices(n_keys)] = diag
    # PSD projection: clip eigenvalues at a tiny fraction of the average variance.
    vals, vecs = np.linalg.eigh(cov)
    floor = 1e-9 * float(diag.mean())
    if vals.min() < floor:
        vals = np.maximum(vals, floor)
        cov = (vecs * vals) @ vecs.T
        cov = 0.5 * (cov + cov.T)
    return mean, cov


class TenantGP:
    """Posterior over K candidates given prior ``mean0`` (K,), ``kernel`` (K, K), noise variance.

    Observations are added one at a time with :meth:`add`; the class keeps

    * ``L`` -- Cholesky factor of ``kernel[A, A] + noise_var * I`` for observed set A,
    * ``V = L^{-1} kernel[A, :]`` (m x K) and ``z = L^{-1} (y - mean0[A])``,

    so that posterior mean = ``mean0 + V.T @ z`` and variance =
    ``diag(kernel) - sum(V**2, axis=0)``; both vectors are updated in O(mK) per
    observation and cached.
    """

    def __init__(self, mean0: np.ndarray, kernel: np.ndarray, noise_var: float):
        self.mean0 = np.asarray(mean0, dtype=float)
        self.kernel = np.asarray(kernel, dtype=float)
        self.noise_var = float(noise_var)
        k = self.mean0.shape[0]
        self.observed: List[int] = []
        self.y: List[float] = []
        self._L = np.zeros((0, 0))
        self._V = np.zeros((0, k))
        self._z = np.zeros(0)
        self.mean = self.mean0.copy()
        self.var = np.diag(self.kernel).copy()

    @property
    def std(self) -> np.ndarray:
        return np.sqrt(np.maximum(self.var, 0.0))

    def add(self, index: int, value: float) -> None:
        """Condition on quality ``value`` observed for candidate ``index``."""
        m = len(self.observed)
        col = self.kernel[index]
        l_vec = self._V[:, index] if m else np.zeros(0)  # = L^{-1} kernel[A, index]
        d2 = col[index] + self.noise_var - float(l_vec @ l_vec)
        d = math.sqrt(max(d2, 1e-12))
        v_new = (col - l_vec @ self._V) / d
        z_new = (value - self.mean0[index] - float(l_vec @ self._z)) / d
        L = np.zeros((m + 1, m + 1))
        L[:m, :m] = self._L
        L[m, :m] = l_vec
        L[m, m] = d
        self._L = L
        self._V = np.vstack([self._V, v_new])
        self._z = np.append(self._z, z_new)
        self.mean = self.mean + v_new * z_new
        self.var = self.var - v_new * v_new
        self.observed.append(int(index))
        self.y.append(float(value))


def posterior_direct(mean0: np.ndarray, kernel: np.ndarray, noise_var: float,
                     observed: Iterable[int], y: Iterable[float]) -> Tuple[np.ndarray, np.ndarray]:
    """Reference posterior with explicit matrix inverse (for tests and checks only)."""
    observed = list(observed)
    y = np.asarray(list(y), dtype=float)
    mean0 = np.asarray(mean0, dtype=float)
    if not observed:
        return mean0.copy(), np.diag(kernel).copy()
    k_aa = kernel[np.ix_(observed, observed)] + noise_var * np.eye(len(observed))
    k_ax = kernel[observed, :]
    inv = np.linalg.inv(k_aa)
    mean = mean0 + k_ax.T @ inv @ (y - mean0[observed])
    var = np.diag(kernel) - np.einsum("ik,ij,jk->k", k_ax, inv, k_ax)
    return mean, var


