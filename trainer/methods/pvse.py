"""PVSE / PIE-Net (Song & Soleymani, CVPR 2019) and its K=0 baseline (global features only, "vse").

Global features (§3.1): photos use the pooled backbone feature through one FC layer; GIFs/videos and
captions use the final states of a bi-GRU over frames / token vectors (or MiniLM's sentence vector, or the
residual text CNN, per config). PIE-Net (§3.2-3.3) adds K locally-guided features from multi-head
self-attention over the local features and fuses them with the global one by residual learning.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.methods.config import PVSEConfig, TextGlobalConfig, VSEConfig
from trainer.methods.encoders import (
    BiGRUEncoder,
    build_text_global,
    check_frames,
    check_local,
    check_shape,
    check_tokens,
    masked_softmax,
)
from trainer.methods.functional import cosine_matrix, max_cosine_matrix
from trainer.methods.interface import EncoderOutput, PairBatch, PairOutput, RetrievalModel, single_embedding


class MultiHeadAttentionPool(nn.Module):
    """K attention maps by a two-layer perceptron, PVSE eq. 2: ``alpha = softmax(w2 tanh(w1 Psi^T))``.

    ``hidden`` is A (D/2 in the paper). Returns the maps (B, K, R), zero on masked inputs, and the attended
    features ``alpha Psi`` (B, K, C).
    """

    def __init__(self, in_dim: int, heads: int, hidden: int | None = None) -> None:
        super().__init__()
        hidden = hidden or max(1, in_dim // 2)
        self.w1 = nn.Linear(in_dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, heads, bias=False)
        self.heads = heads

    def forward(self, local: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        scores = self.w2(torch.tanh(self.w1(local))).transpose(1, 2)  # (B, K, R)
        attn = masked_softmax(scores, None if mask is None else mask[:, None, :])
        return attn, attn @ local


class PIENet(nn.Module):
    """Polysemous Instance Embedding Network, PVSE eq. 2-4.

    ``Upsilon = sigmoid((alpha Psi) w3 + b3)`` (eq. 3) and ``z = LayerNorm(Phi + Upsilon)`` (eq. 4), then
    L2 normalisation. Returns the K embeddings, the K attention maps and Upsilon (for the diversity loss).
    """

    def __init__(self, local_dim: int, embed_dim: int, heads: int) -> None:
        super().__init__()
        self.attention = MultiHeadAttentionPool(local_dim, heads)
        self.fc = nn.Linear(local_dim, embed_dim)  # w3, b3
        self.norm = nn.LayerNorm(embed_dim)
        nn.init.xavier_uniform_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, global_feature: Tensor, local: Tensor, mask: Tensor | None = None) -> EncoderOutput:
        attn, attended = self.attention(local, mask)
        upsilon = torch.sigmoid(self.fc(attended))
        fused = self.norm(global_feature.unsqueeze(1) + upsilon)
        return EncoderOutput(emb=F.normalize(fused, dim=-1), attn=attn, local=upsilon)


class GlobalEncoders(nn.Module):
    """The three global feature encoders of PVSE §3.1, each mapping to ``out_dim``."""

    def __init__(self, config: TextGlobalConfig, out_dim: int) -> None:
        super().__init__()
        self.image = nn.Linear(config.image_dim, out_dim)
        self.video = BiGRUEncoder(config.image_dim, out_dim)
        self.text = build_text_global(config, out_dim)
        self.config = config

    def encode_image(self, pooled: Tensor | None) -> Tensor:
        """phi(x) of a photo: the pooled feature (B, C) through one FC layer."""
        c = self.config
        return self.image(check_shape("pooled", pooled, (None, c.image_dim)))

    def encode_video(self, frames: Tensor, mask: Tensor) -> Tensor:
        """phi(x) of a clip: final states of the bi-GRU over its frame features."""
        check_frames(self.config, frames, mask)
        return self.video(frames, mask)

    def encode_text(self, tokens: Tensor | None, mask: Tensor | None, sentence: Tensor | None) -> Tensor:
        """phi(x) of a caption: bi-GRU final states, text CNN, or FC of the sentence vector (per config)."""
        if self.config.uses_sentence_vector:
            check_shape("sentence", sentence, (None, self.config.sentence_dim))
        else:
            check_tokens(self.config, tokens, mask)
        return self.text(tokens, mask, sentence)


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

    def similarity(self, query: EncoderOutput, items: EncoderOutput) -> Tensor:
        """Cosine similarity."""
        return cosine_matrix(query.emb[:, 0], items.emb[:, 0])

    @property
    def image_inputs(self) -> tuple[str, ...]:
        return ("pooled",)

    @property
    def text_inputs(self) -> tuple[str, ...]:
        return ("sentence",) if self.config.uses_sentence_vector else ("tokens", "mask")



class PVSEModel(RetrievalModel):
    """Two PIE-Nets tied up for visual-semantic embedding (one per visual kind, one for captions)."""

    method = "pvse"

    def __init__(self, config: PVSEConfig) -> None:
        super().__init__(config)
        dim, heads = config.embed_dim, config.num_embeds
        self.globals = GlobalEncoders(config, dim)
        self.image_pie = PIENet(config.image_dim, dim, heads)
        self.video_pie = PIENet(config.image_dim, dim, heads)
        self.text_pie = PIENet(config.word_dim, dim, heads)

    def encode_image(self, local: Tensor | None, pooled: Tensor | None) -> EncoderOutput:
        local = check_local(self.config, local)
        return self.image_pie(self.globals.encode_image(pooled), local)

    def encode_video(self, frames: Tensor, mask: Tensor) -> EncoderOutput:
        return self.video_pie(self.globals.encode_video(frames, mask), frames, mask)

    def encode_text(self, tokens: Tensor | None, mask: Tensor | None,
                    sentence: Tensor | None = None) -> EncoderOutput:
        check_tokens(self.config, tokens, mask)
        return self.text_pie(self.globals.encode_text(tokens, mask, sentence), tokens, mask)

    def similarity(self, query: EncoderOutput, items: EncoderOutput) -> Tensor:
        """Best of the K x K cosine similarities (PVSE §3.4, inference)."""
        return max_cosine_matrix(query.emb, items.emb)

    @property
    def num_embeds(self) -> int:
        return self.config.num_embeds

    @property
    def attention_heads(self) -> int:
        return self.config.num_embeds
