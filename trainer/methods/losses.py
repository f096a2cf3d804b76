"""Loss building blocks shared by several methods, as small modules that return named terms plus ``'total'``.

Each method's own losses and its criterion live in its module (``vse.py``, ``pvse.py``, ...). Primitive losses
take tensors and are tested against loop-by-loop references; no loss holds learnable parameters: those live in
the models.

Conventions: a similarity matrix ``sims`` (B, B) has visual items on rows and captions on columns, row i
matching column i; ``positives`` (B, B) marks every (visual, caption) match, so that other captions of
the same photo are never used as negatives.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from trainer.methods.functional import max_cosine_matrix
from trainer.methods.interface import MethodInputError

Terms = dict[str, Tensor]

def positives_or_eye(sims: Tensor, positives: Tensor | None) -> Tensor:
    """``positives`` checked against the shape of ``sims``, or the identity (row i matches column i) when None."""
    if positives is None:
        return torch.eye(sims.shape[0], dtype=torch.bool, device=sims.device)
    if positives.shape != sims.shape:
        raise MethodInputError(f"positives: expected shape {tuple(sims.shape)}, got {tuple(positives.shape)}")
    return positives

class TripletLoss(nn.Module):
    """Hinge triplet ranking loss in both directions (VSE++; A3VSE eq. 2; Zheng et al. eq. 4).

    For anchor visual i: ``[margin - s(i, i) + s(i, j)]_+`` over negative captions j; for anchor caption
    j: ``[margin - s(j, j) + s(i, j)]_+`` over negative visuals i. ``hardest=True`` keeps the hardest
    negative per anchor and averages over anchors (VSE++ max violation, A3VSE eq. 2); otherwise every
    negative is summed and divided by B^2 (PVSE eq. 6's 1/N^2 normalisation).
    """

    def __init__(self, margin: float, hardest: bool = True) -> None:
        super().__init__()
        self.margin, self.hardest = margin, hardest

    def forward(self, sims: Tensor, positives: Tensor | None = None) -> Terms:
        negatives = ~positives_or_eye(sims, positives)
        diagonal = sims.diagonal()
        cost_i2t = (self.margin - diagonal[:, None] + sims).clamp(min=0) * negatives
        cost_t2i = (self.margin - diagonal[None, :] + sims).clamp(min=0) * negatives
        if self.hardest:
            i2t, t2i = cost_i2t.amax(1).mean(), cost_t2i.amax(0).mean()
        else:
            scale = sims.shape[0] ** 2
            i2t, t2i = cost_i2t.sum() / scale, cost_t2i.sum() / scale
        return {"i2t": i2t, "t2i": t2i, "total": i2t + t2i}

class MILLoss(nn.Module):
    """PVSE's multiple-instance ranking loss (eq. 6): the triplet loss on ``max_{p,q} cos(z_ip, z_jq)``,
    the best of the K x K embedding pairs, so only one pair of a matching item needs to align."""

    def __init__(self, margin: float, hardest: bool = True) -> None:
        super().__init__()
        self.triplet = TripletLoss(margin, hardest)

    def forward(self, visual: Tensor, text: Tensor, positives: Tensor | None = None) -> Terms:
        return self.triplet(max_cosine_matrix(visual, text), positives)
