"""Small pure functions shared by models and losses: similarities, distances, kernels, sampling."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def cosine_matrix(a: Tensor, b: Tensor) -> Tensor:
    """(N, M) cosine similarities between the rows of ``a`` (N, D) and ``b`` (M, D)."""
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def max_cosine_matrix(a: Tensor, b: Tensor) -> Tensor:
    """(N, M) best head-to-head cosine similarity ``max_{p,q} cos(a[i,p], b[j,q])`` for multi-embeddings
    ``a`` (N, K, D) and ``b`` (M, K', D): PVSE's K x K matching (§3.4, eq. 6 and inference)."""
    pairs = torch.einsum("ipd,jqd->ijpq", F.normalize(a, dim=-1), F.normalize(b, dim=-1))
    return pairs.flatten(2).amax(-1)


def squared_distances(a: Tensor, b: Tensor) -> Tensor:
    """(..., N, M) squared Euclidean distances between rows of ``a`` (..., N, D) and ``b`` (..., M, D).

    Expanded as ``|a|^2 + |b|^2 - 2 a.b`` (one matrix product) rather than through the (..., N, M, D) difference
    tensor, which made a paper-size PCME step (B x B x J x J x D) take tens of seconds on a CPU; clamped at 0
    against rounding.
    """
    sq = (a * a).sum(-1).unsqueeze(-1) + (b * b).sum(-1).unsqueeze(-2) - 2.0 * (a @ b.transpose(-1, -2))
    return sq.clamp_min(0.0)


def euclidean_distances(a: Tensor, b: Tensor, eps: float = 1e-12) -> Tensor:
    """(..., N, M) Euclidean distances; ``eps`` keeps the gradient finite at zero distance."""
    return torch.sqrt(squared_distances(a, b) + eps)


def rbf_kernel(a: Tensor, b: Tensor, sigma: float) -> Tensor:
    """(N, M) Gaussian RBF kernel ``exp(-||a_i - b_j||^2 / (2 sigma^2))``."""
    return torch.exp(-squared_distances(a, b) / (2.0 * sigma * sigma))


def sample_gaussian(mu: Tensor, logsigma: Tensor, num_samples: int) -> Tensor:
    """Reparametrised samples ``mu + exp(logsigma) * eps`` (PCME §3.1.2): (B, D) inputs -> (B, J, D)."""
    eps = torch.randn(mu.shape[0], num_samples, mu.shape[-1], dtype=mu.dtype, device=mu.device)
    return mu.unsqueeze(1) + torch.exp(logsigma).unsqueeze(1) * eps


def closed_form_sampled_distance(mu_a: Tensor, logsigma_a: Tensor, mu_b: Tensor, logsigma_b: Tensor) -> Tensor:
    """(N, M) PCME++'s closed-form sampled distance between diagonal Gaussians, the expected squared distance
    between a sample of each: ``E||z_a - z_b||^2 = ||mu_a - mu_b||^2 + ||sigma_a^2 + sigma_b^2||_1``
    for means and log sigmas (N, D) and (M, D)."""
    variance_a, variance_b = torch.exp(2 * logsigma_a).sum(-1), torch.exp(2 * logsigma_b).sum(-1)
    return squared_distances(mu_a, mu_b) + variance_a.unsqueeze(-1) + variance_b.unsqueeze(-2)
