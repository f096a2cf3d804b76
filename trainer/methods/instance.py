"""Dual-path embedding with the instance loss (Zheng et al.).

Visual path (§III-A): pooled feature -> FC - BN - ReLU - FC (2048-d ``f_img``); clips use the mean of
their frame features through their own path. Text path (§III-B): the residual text CNN over token vectors
with position shift (or a bi-GRU, or MiniLM's sentence vector) -> FC - BN - ReLU - FC (``f_text``).
One classifier ``W_share`` without bias scores every feature against all image/text groups (eq. 5, 7).
Retrieval uses the cosine of the features.
"""

from __future__ import annotations

from torch import Tensor, nn

from trainer.methods.config import InstanceConfig
from trainer.methods.encoders import build_text_global, check_frames, check_shape, check_tokens, masked_mean
from trainer.methods.functional import cosine_matrix
from trainer.methods.interface import (
    EncoderOutput,
    MethodInputError,
    PairBatch,
    PairOutput,
    RetrievalModel,
    single_embedding,
)


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

    def similarity(self, query: EncoderOutput, items: EncoderOutput) -> Tensor:
        """Cosine similarity of the features (§VI-B)."""
        return cosine_matrix(query.emb[:, 0], items.emb[:, 0])

    @property
    def image_inputs(self) -> tuple[str, ...]:
        return ("pooled",)

    @property
    def text_inputs(self) -> tuple[str, ...]:
        return ("sentence",) if self.config.uses_sentence_vector else ("tokens", "mask")

