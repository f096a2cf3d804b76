"""VSE++ on global features (Faghri et al.; PVSE's K=0 baseline): one embedding per item, triplet loss."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from torch import Tensor, nn

from trainer.methods.config import TextGlobalConfig, bounded
from trainer.methods.encoders import GlobalEncoders
from trainer.methods.functional import cosine_matrix
from trainer.methods.interface import EncoderOutput, MethodSpec, PairBatch, PairOutput, RetrievalModel, single_embedding
from trainer.methods.losses import Terms, TripletLoss


@dataclass(frozen=True)
class VSEConfig(TextGlobalConfig):
    """Global features only (PVSE's K=0 baseline) trained with the VSE++ triplet loss.

    Margin 0.2 and hardest negatives are VSE++'s settings (Faghri et al., as used by PVSE §5).
    """

    method: ClassVar[str] = "vse"
    margin: float = bounded(0.2, 0.0)
    hardest_negative: bool = True

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

class VSECriterion(nn.Module):
    """VSE++ triplet loss on the global embeddings."""

    def __init__(self, config: VSEConfig) -> None:
        super().__init__()
        self.triplet = TripletLoss(config.margin, config.hardest_negative)

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        return self.triplet(cosine_matrix(out.visual.emb[:, 0], out.text.emb[:, 0]), batch.positives())

METHODS = (
    MethodSpec("vse", VSEConfig, VSEModel, VSECriterion, "global features, VSE++ triplet loss"),
)
