"""VSE++ on global features (Faghri et al.; PVSE's K=0 baseline): one embedding per item, triplet loss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor, nn

from trainer.methods.config import TextGlobalConfig, bounded
from trainer.methods.encoders import GlobalEncoders
from trainer.methods.functional import cosine_matrix
from trainer.methods.interface import EncoderOutput, MethodSpec, PairBatch, PairOutput, RetrievalModel, single_embedding
from trainer.methods.losses import Terms, TripletLoss
from trainer.methods.recipe import SENTENCE_TEXT, Recipe


@dataclass(frozen=True)
class VSEConfig(TextGlobalConfig):
    """Global features only (PVSE's K=0 baseline) trained with the VSE++ triplet loss.

    Margin 0.2 and hardest negatives are VSE++'s settings (Faghri et al., as used by PVSE §5).
    """

    method: ClassVar[str] = "vse"
    margin: float = bounded(0.2, 0.0)
    hardest_negative: bool = True
    # A3VSE's un-annotated corpus D^u (Huang et al. §3.2) for VSE: > 0 adds the library's un-annotated items with
    # their regional-semantics pseudo captions to every batch, as pairs of this weight and as negatives of the
    # annotated pairs (what a warm-started retrain on a few captions needs to tell them from the rest).
    pseudo_weight: float = bounded(0.0, 0.0)

    @property
    def learns_from_pseudo_pairs(self) -> bool:
        return self.pseudo_weight > 0

class VSEModel(RetrievalModel):
    """Global features only, L2-normalised (PVSE's K=0 setting; VSE++)."""

    method = "vse"

    def __init__(self, config: VSEConfig) -> None:
        super().__init__(config)
        self.globals = GlobalEncoders(config, config.embed_dim)

    def encode_image(self, local: Tensor | None, pooled: Tensor | None) -> EncoderOutput:
        return single_embedding(self.globals.encode_image(pooled))

    def encode_video(self, frames: Tensor, mask: Tensor) -> EncoderOutput:
        return single_embedding(self.globals.encode_video(frames, mask))

    def encode_text(self, tokens: Tensor | None, mask: Tensor | None,
                    sentence: Tensor | None = None) -> EncoderOutput:
        return single_embedding(self.globals.encode_text(tokens, mask, sentence))

    def forward(self, batch: PairBatch) -> PairOutput:
        """The pairs, and (with ``pseudo_weight``) the un-annotated items and their pseudo captions as the
        extras ``unlabelled_emb`` / ``pseudo_emb`` (B', 1, D), as A3VSE encodes them."""
        out = super().forward(batch)
        if self.config.pseudo_weight > 0 and batch.unlabelled_visual is not None and batch.pseudo_text is not None:
            out.extras["unlabelled_emb"] = self.encode_visual(batch.unlabelled_visual).emb
            out.extras["pseudo_emb"] = self.encode_caption(batch.pseudo_text).emb
        return out

class VSECriterion(nn.Module):
    """VSE++ triplet loss on the global embeddings; with ``pseudo_weight`` > 0 and pseudo pairs in the batch,
    the triplet loss runs over the annotated pairs and the pseudo pairs together (every visual a negative of
    every other pair's caption and vice versa), each pseudo anchor's hinge weighted by ``pseudo_weight`` and
    the sum divided by the number of annotated pairs (A3VSE's D^u, §3.2, with VSE++'s max-violation loss)."""

    def __init__(self, config: VSEConfig) -> None:
        super().__init__()
        self.triplet = TripletLoss(config.margin, config.hardest_negative)
        self.margin, self.hardest, self.pseudo_weight = config.margin, config.hardest_negative, config.pseudo_weight

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        visual, text = out.visual.emb[:, 0], out.text.emb[:, 0]
        unlabelled, pseudo = out.extras.get("unlabelled_emb"), out.extras.get("pseudo_emb")
        if self.pseudo_weight <= 0 or unlabelled is None or pseudo is None:
            return self.triplet(cosine_matrix(visual, text), batch.positives())
        n, m = visual.shape[0], unlabelled.shape[0]
        sims = cosine_matrix(torch.cat([visual, unlabelled[:, 0]]), torch.cat([text, pseudo[:, 0]]))
        positives = torch.block_diag(batch.positives(), torch.eye(m, dtype=torch.bool, device=sims.device))
        negatives = ~positives
        diagonal = sims.diagonal()
        cost_i2t = (self.margin - diagonal[:, None] + sims).clamp(min=0) * negatives
        cost_t2i = (self.margin - diagonal[None, :] + sims).clamp(min=0) * negatives
        if self.hardest:
            per_i2t, per_t2i = cost_i2t.amax(1), cost_t2i.amax(0)
        else:
            per_i2t, per_t2i = cost_i2t.sum(1) / (n + m), cost_t2i.sum(0) / (n + m)
        weight = torch.cat([sims.new_ones(n), sims.new_full((m,), self.pseudo_weight)])
        i2t, t2i = (per_i2t * weight).sum() / n, (per_t2i * weight).sum() / n
        pseudo_part = (self.pseudo_weight * (per_i2t[n:].sum() + per_t2i[n:].sum()) / n).detach()
        return {"i2t": i2t, "t2i": t2i, "pseudo": pseudo_part, "total": i2t + t2i}

# VSE++: Adam 2e-4 (Faghri et al.), halved when the validation rsum stalls.
RECIPE = Recipe(dict(SENTENCE_TEXT), "adam", 2e-4, epochs=30, patience=5, schedule_patience=2)

METHODS = (
    MethodSpec("vse", VSEConfig, VSEModel, VSECriterion, "global features, VSE++ triplet loss", RECIPE),
)
