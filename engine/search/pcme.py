"""PCME's test-time arithmetic on a model's encoded arrays (:class:`engine.search.modelrunner.Encoded`: ``mu`` and
``log_sigma``).

:func:`uncertainty` (§3.2.1, geometric mean of sigma),
:func:`match_probability` (Monte-Carlo eq. 2 with the sample-wise eq. 3; ``a`` and ``b`` are the
manifest's ``match_scale`` and ``match_shift``), :func:`closed_form_match_probability` (PCME++'s
``sigmoid(-a CSD + b)``, for exports whose manifest says ``match_distance: "csd"``), :func:`model_match_probability`
(whichever of the two the export was trained with) and :func:`uncertainty_percentile`. PCME's other test-time
similarities are the trainer's: ``trainer.evaluation``.
"""

from __future__ import annotations

import numpy as np

from engine.search.modelrunner import ModelInputError, ModelManifest

# Monte-Carlo samples of match_probability for search and evaluation: fixed, so a query ranks the same way and an
# evaluation gives the same numbers every run
MATCH_SEED = 0
_BLOCK = 1 << 22  # floats per block of pairwise sample distances (32 MB in float64)


def uncertainty(log_sigma: np.ndarray) -> np.ndarray:
    """(N,) uncertainty of each item: the geometric mean of its sigmas, ``exp(mean(log sigma))``
    (PCME §3.2.1, the volume of the Gaussian). ``log_sigma`` is (N, D) or (N, K, D)."""
    log_sigma = np.asarray(log_sigma, dtype=np.float64)
    return np.exp(log_sigma.reshape(len(log_sigma), -1).mean(axis=1))


def sample_embeddings(mu: np.ndarray, log_sigma: np.ndarray, samples: int, rng: np.random.Generator
                      ) -> np.ndarray:
    """(N, J, D) reparametrised samples ``mu + sigma * eps`` of N Gaussians (mu, log_sigma) (N, D)."""
    mu, log_sigma = np.asarray(mu, np.float64), np.asarray(log_sigma, np.float64)
    if mu.ndim != 2 or mu.shape != log_sigma.shape:
        raise ModelInputError(f"mu/log_sigma: expected two (N, D) arrays, got {mu.shape} "
                              f"and {log_sigma.shape}")
    eps = rng.standard_normal((mu.shape[0], samples, mu.shape[1]))
    return mu[:, None, :] + np.exp(log_sigma)[:, None, :] * eps


def match_probability_from_samples(query: np.ndarray, items: np.ndarray, a: float, b: float) -> np.ndarray:
    """(Q, N) PCME eq. 2: the mean over all J x J' sample pairs of eq. 3, ``sigmoid(-a ||z_q - z_i|| + b)``,
    for query samples (Q, J, D) and item samples (N, J', D)."""
    query, items = np.asarray(query, np.float64), np.asarray(items, np.float64)
    q_sq = (query ** 2).sum(-1)  # (Q, J)
    out = np.empty((len(query), len(items)))
    block = max(1, _BLOCK // max(1, query.shape[0] * query.shape[1] * items.shape[1]))
    for start in range(0, len(items), block):
        part = items[start:start + block]
        dots = np.einsum("qjd,nkd->qnjk", query, part)
        sq = q_sq[:, None, :, None] + (part ** 2).sum(-1)[None, :, None, :] - 2.0 * dots
        dist = np.sqrt(np.maximum(sq, 0.0))
        out[:, start:start + block] = _sigmoid(-a * dist + b).mean(axis=(2, 3))
    return out


def match_probability(mu_q: np.ndarray, log_sigma_q: np.ndarray, mu_i: np.ndarray, log_sigma_i: np.ndarray,
                      a: float, b: float, samples: int = 7, rng: np.random.Generator | None = None
                      ) -> np.ndarray:
    """Monte-Carlo match probability (PCME eq. 2-3) of queries (Q, D) against items (N, D): (Q, N).

    ``a``/``b`` are the export's ``match_scale``/``match_shift``; J = ``samples`` per Gaussian (the
    export's ``num_samples``). Query samples are drawn from ``rng`` first, then item samples. A 1-D
    query (D,) gives (N,).
    """
    rng = rng if rng is not None else np.random.default_rng()
    single = np.ndim(mu_q) == 1
    zq = sample_embeddings(np.atleast_2d(mu_q), np.atleast_2d(log_sigma_q), samples, rng)
    zi = sample_embeddings(mu_i, log_sigma_i, samples, rng)
    out = match_probability_from_samples(zq, zi, a, b)
    return out[0] if single else out


def closed_form_match_probability(mu_q: np.ndarray, log_sigma_q: np.ndarray, mu_i: np.ndarray,
                                  log_sigma_i: np.ndarray, a: float, b: float) -> np.ndarray:
    """(Q, N) PCME++'s match probability ``sigmoid(-a CSD + b)`` of queries (Q, D) against items (N, D), with
    the closed-form sampled distance ``CSD = ||mu_q - mu_i||^2 + sum sigma_q^2 + sum sigma_i^2``; no sampling.
    A 1-D query (D,) gives (N,)."""
    single = np.ndim(mu_q) == 1
    mu_q, mu_i = np.atleast_2d(np.asarray(mu_q, np.float64)), np.asarray(mu_i, np.float64)
    var_q = np.exp(2 * np.atleast_2d(np.asarray(log_sigma_q, np.float64))).sum(-1)
    var_i = np.exp(2 * np.asarray(log_sigma_i, np.float64)).sum(-1)
    squared = (mu_q ** 2).sum(-1)[:, None] + (mu_i ** 2).sum(-1)[None] - 2.0 * mu_q @ mu_i.T
    out = _sigmoid(-a * (np.maximum(squared, 0.0) + var_q[:, None] + var_i[None]) + b)
    return out[0] if single else out


def model_match_probability(manifest: ModelManifest, mu_q: np.ndarray, log_sigma_q: np.ndarray, mu_i: np.ndarray,
                            log_sigma_i: np.ndarray) -> np.ndarray:
    """The match probability a PCME export was trained with: closed-form for ``match_distance: "csd"``,
    else Monte-Carlo with the export's J and the fixed :data:`MATCH_SEED`. (Q, N), or (N,) for a 1-D query."""
    a, b = float(manifest.match_scale or 0.0), float(manifest.match_shift or 0.0)
    if manifest.match_distance == "csd":
        return closed_form_match_probability(mu_q, log_sigma_q, mu_i, log_sigma_i, a, b)
    return match_probability(mu_q, log_sigma_q, mu_i, log_sigma_i, a, b, manifest.num_samples or 7,
                             np.random.default_rng(MATCH_SEED))


def uncertainty_percentile(library: np.ndarray, value: float) -> float:
    """Where ``value`` sits among the uncertainties ``library`` (sorted ascending): the percentage of them at
    most ``value`` (0-100). 95 reads "more uncertain than 95 % of the library", i.e. among its 5 % least
    certain items."""
    if len(library) == 0:
        raise ValueError("uncertainty_percentile: the library has no uncertainties")
    return 100.0 * float(np.searchsorted(library, value, side="right")) / len(library)


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.exp(-np.logaddexp(0.0, -x))

