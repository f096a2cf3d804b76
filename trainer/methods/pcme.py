"""PCME (Chun et al., CVPR 2021): every photo, video and caption is a Gaussian N(mu, diag(sigma^2)).

Each modality has two heads (§3.2.1, fig. 3) on top of the global feature encoders of PVSE §3.1:
the mu head adds a local attention branch through a sigmoid to the global feature, then LayerNorm and L2;
the sigma head has its own global encoder and attention branch without sigmoid, LayerNorm or L2 and
outputs log sigma. Training draws J reparametrised samples per item (§3.1.2).
"""


from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.methods.config import TextGlobalConfig, bounded
from trainer.methods.encoders import GlobalEncoders, MultiHeadAttentionPool, check_local, check_tokens
from trainer.methods.functional import euclidean_distances, sample_gaussian, squared_distances
from trainer.methods.interface import EncoderOutput, MethodSpec, PairBatch, PairOutput, RetrievalModel
from trainer.methods.losses import Terms, positives_or_eye


@dataclass(frozen=True)
class PCMEConfig(TextGlobalConfig):
    """PCME (Chun et al. 2021).

    D=1024 and J=7 samples are the COCO settings (§4.1, released config); a and b of eq. 3 start at 15
    (released COCO config, learnable). The KL weight 1e-5 is the released COCO value; the uniformity loss
    weight is 0 there (10 on CUB). One attention head in each local attention branch (fig. 3).
    ``logsigma_init`` is where the sigma heads start (not given in the paper; see pcme.PCMEBranch):
    -4 keeps the initial sample noise (sigma * sqrt(D) ~ 0.4 at D=512) below the distances between means.
    """

    method: ClassVar[str] = "pcme"
    num_samples: int = bounded(7, 1)
    match_scale_init: float = bounded(15.0, 0.0, lo_open=True)
    match_shift_init: float = bounded(15.0)
    kl_weight: float = bounded(1e-5, 0.0)
    uniformity_weight: float = bounded(0.0, 0.0)
    uniformity_t: float = bounded(2.0, 0.0, lo_open=True)
    attention_heads: int = bounded(1, 1)
    logsigma_init: float = bounded(-4.0)


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
    attends_locally = True

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

    # similarity: the base class's cosine of the means, the deterministic "mu only" variant of §3.2.3 (same
    # order as -||mu - mu'||, the means being unit vectors)

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


# --- losses -----------------------------------------------------------------------------------------------------------

def soft_contrastive_nll(logits: Tensor, matched: Tensor) -> Tensor:
    """PCME eq. 1-2 for a batch of pairs: logits (..., S) are ``l = -a ||v^j - t^j'|| + b`` over the
    S = J^2 sample pairs; ``matched`` (...) says which pairs match. Returns (...):
    ``-log mean_s sigmoid(l_s)`` for matches and ``-log mean_s (1 - sigmoid(l_s))`` otherwise, computed
    with log-sum-exp. Its gradient on ``l_s`` is ``-w_s (1 - sigmoid(l_s))`` for a match and
    ``w_s sigmoid(l_s)`` otherwise, with ``w_s = p_s / sum p`` the share of sample pair s in the match
    probability: the weighting of PCME eq. 5 (our loss is the negative log-likelihood, hence the sign)."""
    signed = torch.where(matched[..., None], logits, -logits)
    return -(torch.logsumexp(F.logsigmoid(signed), -1) - math.log(logits.shape[-1]))

class SoftContrastiveLoss(nn.Module):
    """PCME's soft cross-modal contrastive loss over every pair of a batch (§3.2.1): the match
    probability of each (visual i, caption j) pair is estimated from J x J samples (eq. 2) with
    ``sigmoid(-a d + b)`` (eq. 3); the loss is :func:`soft_contrastive_nll` averaged over all B^2 pairs."""

    def forward(self, visual_samples: Tensor, text_samples: Tensor, scale: Tensor, shift: Tensor,
                positives: Tensor | None = None) -> Terms:
        dist = euclidean_distances(visual_samples[:, None], text_samples[None, :])  # (B, B, J, J)
        logits = (-scale * dist + shift).flatten(2)
        matched = positives_or_eye(logits[..., 0], positives)
        nll = soft_contrastive_nll(logits, matched)
        pos, neg = nll[matched], nll[~matched]
        zero = nll.new_zeros(())
        return {"positive": pos.mean() if pos.numel() else zero,
                "negative": neg.mean() if neg.numel() else zero, "total": nll.mean()}

class GaussianKLLoss(nn.Module):
    """KL(N(mu, diag sigma^2) || N(0, I)) = 0.5 sum_d (sigma^2 + mu^2 - 1 - 2 log sigma), averaged over
    items (PCME §3.2.1, after HIB). ``logsigma`` is log of the standard deviation."""

    def forward(self, mu: Tensor, logsigma: Tensor) -> Terms:
        kl = 0.5 * (torch.exp(2 * logsigma) + mu * mu - 1 - 2 * logsigma).sum(-1)
        return {"total": kl.mean()}

class UniformityLoss(nn.Module):
    """Uniformity of Wang & Isola (PCME §3.2.1): ``log mean_{i<j} exp(-t ||x_i - x_j||^2)``."""

    def __init__(self, t: float = 2.0) -> None:
        super().__init__()
        self.t = t

    def forward(self, x: Tensor) -> Terms:
        if x.shape[0] < 2:
            return {"total": x.new_zeros(())}
        upper = torch.triu(torch.ones(x.shape[0], x.shape[0], dtype=torch.bool, device=x.device), 1)
        return {"total": torch.log(torch.exp(-self.t * squared_distances(x, x)[upper]).mean())}

class PCMECriterion(nn.Module):
    """PCME: soft contrastive loss on the samples + KL weight * KL(both sides) + uniformity weight *
    uniformity of all samples."""

    def __init__(self, config: PCMEConfig) -> None:
        super().__init__()
        self.match, self.kl, self.uniformity = SoftContrastiveLoss(), GaussianKLLoss(), UniformityLoss(
            config.uniformity_t)
        self.kl_weight, self.uniformity_weight = config.kl_weight, config.uniformity_weight

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        ex = out.extras
        match = self.match(ex["visual_samples"], ex["text_samples"], ex["match_scale"], ex["match_shift"],
                           batch.positives())
        assert out.visual.logsigma is not None and out.text.logsigma is not None
        kl = self.kl(out.visual.emb, out.visual.logsigma)["total"] + self.kl(out.text.emb, out.text.logsigma)[
            "total"]
        dim = ex["visual_samples"].shape[-1]
        samples = torch.cat([ex["visual_samples"].reshape(-1, dim), ex["text_samples"].reshape(-1, dim)])
        uniformity = self.uniformity(samples)["total"] if self.uniformity_weight else kl.new_zeros(())
        total = match["total"] + self.kl_weight * kl + self.uniformity_weight * uniformity
        return {"match": match["total"], "match_pos": match["positive"], "match_neg": match["negative"],
                "kl": kl, "uniformity": uniformity, "total": total}

METHODS = (
    MethodSpec("pcme", PCMEConfig, PCMEModel, PCMECriterion,
               "Gaussian embeddings, soft contrastive + KL + uniformity losses", test_preset={"num_samples": 3}),
)
