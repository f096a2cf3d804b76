"""PCME (Chun et al., CVPR 2021): every photo, video and caption is a Gaussian N(mu, diag(sigma^2)).

Each modality has two heads (§3.2.1, fig. 3) on top of the global feature encoders of PVSE §3.1:
the mu head adds a local attention branch through a sigmoid to the global feature, then LayerNorm and L2;
the sigma head has its own global encoder and attention branch without sigmoid, LayerNorm or L2 and
outputs log sigma. Training draws J reparametrised samples per item (§3.1.2).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.methods.config import PCMEConfig
from trainer.methods.encoders import check_local, check_tokens
from trainer.methods.functional import cosine_matrix, euclidean_distances, sample_gaussian
from trainer.methods.interface import EncoderOutput, PairBatch, PairOutput, RetrievalModel
from trainer.methods.pvse import GlobalEncoders, MultiHeadAttentionPool


class PCMEBranch(nn.Module):
    """One head module of PCME fig. 3 on local features (B, R, C) and a global feature (B, D).

    mean head: ``L2(LayerNorm(global + sigmoid(fc(attended))))``; sigma head: ``global + fc(attended)``.
    With several attention heads the attended features are averaged before ``fc``.

    The sigma head starts at ``log sigma ~ logsigma_init`` (a learnable per-dimension offset): the paper
    does not give its initialisation, and with log sigma ~ 0 every sample of a unit-norm mean is noise of
    norm sqrt(D), so all J x J distances look alike and the mean heads learn nothing until sigma has
    collapsed (measured on Flickr8k: dev rsum 26 after 5 epochs instead of 250).
    """

    def __init__(self, local_dim: int, embed_dim: int, heads: int, *, mean_head: bool,
                 logsigma_init: float = 0.0) -> None:
        super().__init__()
        self.attention = MultiHeadAttentionPool(local_dim, heads)
        self.fc = nn.Linear(local_dim, embed_dim)
        self.norm = nn.LayerNorm(embed_dim) if mean_head else None
        self.offset = None if mean_head else nn.Parameter(torch.full((embed_dim,), float(logsigma_init)))
        nn.init.xavier_uniform_(self.fc.weight)
        nn.init.zeros_(self.fc.bias)

    def forward(self, global_feature: Tensor, local: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        attn, attended = self.attention(local, mask)
        residual = self.fc(attended.mean(1))
        if self.norm is None:
            assert self.offset is not None
            return global_feature + residual + self.offset, attn
        return F.normalize(self.norm(global_feature + torch.sigmoid(residual)), dim=-1), attn


class PCMEModel(RetrievalModel):
    """Probabilistic cross-modal embeddings with learnable match scalars a, b of eq. 3."""

    method = "pcme"

    def __init__(self, config: PCMEConfig) -> None:
        super().__init__(config)
        dim, heads = config.embed_dim, config.attention_heads
        self.mu_globals = GlobalEncoders(config, dim)
        self.sigma_globals = GlobalEncoders(config, dim)
        local_dims = {"image": config.image_dim, "video": config.image_dim, "text": config.word_dim}
        self.mu_heads = nn.ModuleDict({k: PCMEBranch(d, dim, heads, mean_head=True)
                                       for k, d in local_dims.items()})
        self.sigma_heads = nn.ModuleDict({k: PCMEBranch(d, dim, heads, mean_head=False,
                                                     logsigma_init=config.logsigma_init)
                                          for k, d in local_dims.items()})
        self.match_scale = nn.Parameter(torch.tensor(config.match_scale_init))  # a of eq. 3
        self.match_shift = nn.Parameter(torch.tensor(config.match_shift_init))  # b of eq. 3

    def _encode(self, kind: str, mu_global: Tensor, sigma_global: Tensor, local: Tensor,
                mask: Tensor | None) -> EncoderOutput:
        mu, attn = self.mu_heads[kind](mu_global, local, mask)
        logsigma, _ = self.sigma_heads[kind](sigma_global, local, mask)
        return EncoderOutput(emb=mu.unsqueeze(1), attn=attn, logsigma=logsigma.unsqueeze(1))

    def encode_image(self, local: Tensor | None, pooled: Tensor | None) -> EncoderOutput:
        local = check_local(self.config, local)
        return self._encode("image", self.mu_globals.encode_image(pooled),
                            self.sigma_globals.encode_image(pooled), local, None)

    def encode_video(self, frames: Tensor, mask: Tensor) -> EncoderOutput:
        return self._encode("video", self.mu_globals.encode_video(frames, mask),
                            self.sigma_globals.encode_video(frames, mask), frames, mask)

    def encode_text(self, tokens: Tensor | None, mask: Tensor | None,
                    sentence: Tensor | None = None) -> EncoderOutput:
        check_tokens(self.config, tokens, mask)
        assert tokens is not None
        return self._encode("text", self.mu_globals.encode_text(tokens, mask, sentence),
                            self.sigma_globals.encode_text(tokens, mask, sentence), tokens, mask)

    def forward(self, batch: PairBatch) -> PairOutput:
        """Encode both sides and draw J samples of each (extras ``visual_samples``/``text_samples``
        (B, J, D), plus ``match_scale`` a and ``match_shift`` b)."""
        out = super().forward(batch)
        samples = self.config.num_samples
        assert out.visual.logsigma is not None and out.text.logsigma is not None
        out.extras = {
            "visual_samples": sample_gaussian(out.visual.emb[:, 0], out.visual.logsigma[:, 0], samples),
            "text_samples": sample_gaussian(out.text.emb[:, 0], out.text.logsigma[:, 0], samples),
            "match_scale": self.match_scale,
            "match_shift": self.match_shift,
        }
        return out

    def similarity(self, query: EncoderOutput, items: EncoderOutput) -> Tensor:
        """The deterministic "mu only" variant of §3.2.3: cosine of the means (same order as -||mu - mu'||,
        the means being unit vectors)."""
        return cosine_matrix(query.emb[:, 0], items.emb[:, 0])

    def match_probability(self, query: EncoderOutput, items: EncoderOutput, num_samples: int | None = None
                          ) -> Tensor:
        """(Q, N) Monte-Carlo match probability, eq. 2-3: mean over J x J sample pairs of
        ``sigmoid(-a ||v - t|| + b)``."""
        assert query.logsigma is not None and items.logsigma is not None
        j = num_samples or self.config.num_samples
        q = sample_gaussian(query.emb[:, 0], query.logsigma[:, 0], j)
        v = sample_gaussian(items.emb[:, 0], items.logsigma[:, 0], j)
        dist = euclidean_distances(q[:, None, :, :], v[None, :, :, :])  # (Q, N, J, J)
        return torch.sigmoid(-self.match_scale * dist + self.match_shift).mean((-1, -2))

    @staticmethod
    def uncertainty(output: EncoderOutput) -> Tensor:
        """(B,) scalar uncertainty: the geometric mean of sigma, ``exp(mean(log sigma))`` (§3.2.1)."""
        assert output.logsigma is not None
        return output.logsigma.flatten(1).mean(-1).exp()

    @property
    def attention_heads(self) -> int:
        return self.config.attention_heads

    @property
    def probabilistic(self) -> bool:
        return True
