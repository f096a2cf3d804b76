"""Dual-path embedding with the instance loss (Zheng et al.).

Visual path (§III-A): pooled feature -> FC - BN - ReLU - FC (2048-d ``f_img``); clips use the mean of
their frame features through their own path. Text path (§III-B): the residual text CNN over token vectors
with position shift (or a bi-GRU, or MiniLM's sentence vector) -> FC - BN - ReLU - FC (``f_text``).
One classifier ``W_share`` without bias scores every feature against all image/text groups (eq. 5, 7).
Retrieval uses the cosine of the features.
"""


from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import torch.nn.functional as F
from torch import Tensor, nn

from trainer.methods.config import TextGlobalConfig, TextGlobalKind, bounded
from trainer.methods.encoders import build_text_global, check_frames, check_shape, check_tokens, masked_mean
from trainer.methods.functional import cosine_matrix
from trainer.methods.interface import (
    EncoderOutput,
    MethodInputError,
    MethodSpec,
    PairBatch,
    PairOutput,
    RetrievalModel,
    single_embedding,
)
from trainer.methods.losses import Terms, TripletLoss
from trainer.methods.recipe import SENTENCE_TEXT, Recipe


@dataclass(frozen=True)
class InstanceConfig(TextGlobalConfig):
    """Dual-path model with the instance loss (Zheng et al.): FC 2048 - BN - ReLU - FC 2048 on the image
    feature (§III-A), the residual text CNN (§III-B), dropout 0.75 (§VI-B), ranking margin alpha=1, stage II
    weights lambda_1=lambda_2=lambda_3=1 (set ``rank_weight=0`` for stage I, §V).

    ``num_classes`` is the number of image/text groups (29,783 on Flickr30k); the trainer sets it to the
    library's group count.
    """

    method: ClassVar[str] = "instance"
    embed_dim: int = bounded(2048, 1)
    hidden_dim: int = bounded(2048, 1)
    dropout: float = bounded(0.75, 0.0, 1.0)
    num_classes: int = bounded(29783, 1)
    text_global: TextGlobalKind = "cnn"
    margin: float = bounded(1.0, 0.0)
    hardest_negative: bool = True
    rank_weight: float = bounded(1.0, 0.0)
    visual_weight: float = bounded(1.0, 0.0)
    textual_weight: float = bounded(1.0, 0.0)

    @property
    def text_global_size_field(self) -> str:
        return "hidden_dim"

    def fitted_to(self, n_items: int) -> InstanceConfig:
        """One class per annotated item (``num_classes``)."""
        return dataclasses.replace(self, num_classes=n_items)

    @property
    def video_uses_bigru(self) -> bool:
        return False  # clips are the mean of their frames through the visual path


def _projection(in_dim: int, hidden: int, out_dim: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(in_dim, hidden), nn.BatchNorm1d(hidden), nn.ReLU(),
                         nn.Linear(hidden, out_dim))


class InstanceModel(RetrievalModel):
    """Image, video and text paths plus the shared classifier W_share."""

    method = "instance"

    def __init__(self, config: InstanceConfig) -> None:
        super().__init__(config)
        hidden, dim = config.hidden_dim, config.embed_dim
        self.image_path = _projection(config.image_dim, hidden, dim)
        self.video_path = _projection(config.image_dim, hidden, dim)
        self.text_encoder = build_text_global(config, hidden)
        self.text_head = nn.Sequential(nn.BatchNorm1d(hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(dim, config.num_classes, bias=False)  # W_share

    def encode_image(self, local: Tensor | None, pooled: Tensor | None) -> EncoderOutput:
        return single_embedding(self.image_path(check_shape("pooled", pooled, (None, self.config.image_dim))))

    def encode_video(self, frames: Tensor, mask: Tensor) -> EncoderOutput:
        check_frames(self.config, frames, mask)
        return single_embedding(self.video_path(masked_mean(frames, mask)))

    def encode_text(self, tokens: Tensor | None, mask: Tensor | None,
                    sentence: Tensor | None = None) -> EncoderOutput:
        if self.config.uses_sentence_vector:
            check_shape("sentence", sentence, (None, self.config.sentence_dim))
        else:
            check_tokens(self.config, tokens, mask)
        return single_embedding(self.text_head(self.text_encoder(tokens, mask, sentence)))

    def classify(self, feature: Tensor) -> Tensor:
        """Logits ``W_share^T f`` over all groups (eq. 5 / 7, before the softmax)."""
        return self.classifier(self.dropout(feature))

    def forward(self, batch: PairBatch) -> PairOutput:
        """Encode both sides and classify them; extras ``visual_logits``, ``text_logits`` (B, C) and
        ``labels`` (B,) = ``batch.visual_ids``, each pair's group index."""
        if batch.visual_ids is None:
            raise MethodInputError("visual_ids: the instance loss needs each pair's group index")
        if int(batch.visual_ids.min()) < 0 or int(batch.visual_ids.max()) >= self.config.num_classes:
            raise MethodInputError(f"visual_ids: group indices must lie in [0, {self.config.num_classes})")
        out = super().forward(batch)
        assert out.visual.feature is not None and out.text.feature is not None
        out.extras = {"visual_logits": self.classify(out.visual.feature),
                      "text_logits": self.classify(out.text.feature), "labels": batch.visual_ids}
        return out

    # similarity: the base class's cosine of the features (§VI-B)


# --- losses -----------------------------------------------------------------------------------------------------------

class InstanceLoss(nn.Module):
    """Zheng et al. eq. 5-8: softmax cross-entropy of visual and textual features over all image/text
    groups through the shared classifier; returns the two terms and their sum."""

    def forward(self, visual_logits: Tensor, text_logits: Tensor, labels: Tensor) -> Terms:
        visual = F.cross_entropy(visual_logits, labels)
        textual = F.cross_entropy(text_logits, labels)
        return {"visual": visual, "textual": textual, "total": visual + textual}

class InstanceCriterion(nn.Module):
    """Zheng et al. eq. 9: ``lambda_1 L_rank + lambda_2 L_visual + lambda_3 L_textual`` (eq. 4 ranking with
    cosine similarity and margin alpha)."""

    def __init__(self, config: InstanceConfig) -> None:
        super().__init__()
        self.rank = TripletLoss(config.margin, config.hardest_negative)
        self.instance = InstanceLoss()
        self.weights = (config.rank_weight, config.visual_weight, config.textual_weight)

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        rank = self.rank(cosine_matrix(out.visual.emb[:, 0], out.text.emb[:, 0]), batch.positives())["total"]
        ex = out.extras
        inst = self.instance(ex["visual_logits"], ex["text_logits"], ex["labels"])
        w_rank, w_visual, w_text = self.weights
        total = w_rank * rank + w_visual * inst["visual"] + w_text * inst["textual"]
        return {"rank": rank, "visual": inst["visual"], "textual": inst["textual"], "total": total}

# Zheng et al. stage II (ranking + instance loss) directly on frozen image features.
RECIPE = Recipe(dict(SENTENCE_TEXT), "adam", 2e-4, epochs=30, patience=5, schedule_patience=2)

METHODS = (
    MethodSpec("instance", InstanceConfig, InstanceModel, InstanceCriterion,
               "dual-path features, instance loss + ranking loss", RECIPE,
               test_preset={"hidden_dim": 10, "num_classes": 7}),
)
