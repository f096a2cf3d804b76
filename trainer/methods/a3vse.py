"""A3VSE (Huang et al., ACM MM 2019): adversarial attentive alignment for sparsely annotated corpora.

Feature extractors (§3.2): a trainable FC maps each region (photo) or frame (video) feature to H; an LSTM
runs over caption token vectors. A K-head context-aware attention encoder (eq. 1) attends over them with
a temperature; the instance embedding is the L2-normalised concatenation of the K attended vectors.
Six domain discriminators (v-v^u, t-s, v-t, v^u-s, v-s, v^u-t; eq. 5-7) sit behind one gradient reversal
layer whose gamma follows 2 / (1 + exp(-eta p)) - 1 (§4.3).

Eq. 1 as printed is ambiguous; this module reads it as: per head k, a context vector
``c_k = mean_i tanh(Q_k v_i)`` of the item's own entities, scores ``a_ik = tanh(c_k . tanh(P_k v_i))``,
weights ``softmax_i(lambda * a_ik)`` and the attended vector ``sum_i alpha_ik v_i``; the dot product inside the
tanh is divided by sqrt(H) (see :class:`ContextAttention`).

The ablations of Table 5 are config switches: ``attention=False`` ("without attention") gives every head
the uniform map over the valid entities, so each attended vector is their masked mean;
``adversarial=False`` ("without L_adv") runs no discriminator, so eq. 9 reduces to the triplet loss.

By default the encoders play the domain-confusion form of the game (``A3VSEConfig.adversarial_game``, whose
docstring says why); ``"reversal"`` is the paper's. The reversal game (eq. 10) is DANN's: one optimizer descends
eq. 9 for all parameters and the reversal layer flips the sign for the encoders, so each discriminator lowers
its BCE while the encoders raise it (checked in tests/unit/test_a3vse_adversarial.py). With every item
annotated only the v-t discriminator runs: it can push the image and caption distributions together, but
maximising its BCE has no optimum at chance and on unit embeddings the cheapest move is a common component per
modality, which shrinks the spread retrieval needs; the criterion logs ``acc_<name>`` and
``spread_v``/``spread_t`` to watch for that. In the confusion game the discriminators see detached embeddings
and the encoders are scored through :func:`torch.func.functional_call` with the discriminators' parameters
detached, so neither side's loss moves the other's parameters.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from trainer.methods.config import A3VSEConfig
from trainer.methods.encoders import (
    GradientReversal,
    MaskedRNN,
    check_frames,
    check_local,
    check_tokens,
    grl_gamma,
    masked_mean,
    masked_softmax,
)
from trainer.methods.functional import cosine_matrix
from trainer.methods.interface import EncoderOutput, PairBatch, PairOutput, RetrievalModel

# Discriminator name -> (domain labelled 1, domain labelled 0). v: annotated visuals, t: their captions,
# vu: un-annotated visuals, s: their regional-semantics pseudo captions.
DOMAIN_PAIRS: dict[str, tuple[str, str]] = {
    "v_vu": ("v", "vu"),  # intra-modal, eq. 5
    "t_s": ("t", "s"),
    "v_t": ("v", "t"),  # cross-modal, eq. 6
    "vu_s": ("vu", "s"),
    "v_s": ("v", "s"),  # transitive, eq. 7
    "vu_t": ("vu", "t"),
}


class ContextAttention(nn.Module):
    """K-head context-aware attention with temperature (A3VSE eq. 1, see the module docstring).

    Takes entities (B, N, H) and a mask (B, N); returns the maps (B, K, N) and attended vectors (B, K, H).
    """

    def __init__(self, dim: int, context_dim: int, heads: int, temperature: float) -> None:
        super().__init__()
        self.heads, self.context_dim, self.temperature = heads, context_dim, temperature
        self.p = nn.Linear(dim, heads * context_dim, bias=False)  # P_k for all k
        self.q = nn.Linear(dim, heads * context_dim, bias=False)  # Q_k for all k

    def forward(self, x: Tensor, mask: Tensor | None) -> tuple[Tensor, Tensor]:
        shape = (x.shape[0], x.shape[1], self.heads, self.context_dim)
        context = masked_mean(torch.tanh(self.q(x)).flatten(2), mask).view(x.shape[0], 1, self.heads, -1)
        # the dot product runs over context_dim terms in [-1, 1]: scaled by 1/sqrt(context_dim) (as in scaled
        # dot-product attention) it stays in tanh's linear range; unscaled it saturates at +-1 from the first
        # step, so the attention is stuck on arbitrary entities (Flickr8k dev rsum ~75 instead of ~250)
        dot = (torch.tanh(self.p(x)).view(shape) * context).sum(-1) / self.context_dim ** 0.5
        scores = torch.tanh(dot).transpose(1, 2)
        attn = masked_softmax(self.temperature * scores, None if mask is None else mask[:, None, :])
        return attn, attn @ x


def uniform_attention(x: Tensor, mask: Tensor | None, heads: int) -> tuple[Tensor, Tensor]:
    """The "without attention" ablation of A3VSE Table 5: mean pooling over the entities, given the shapes
    of :class:`ContextAttention` (maps (B, K, N) uniform over the valid entities, attended vectors (B, K, H)
    all equal to the masked mean)."""
    # zeros derived from x (not torch.zeros(shape)) so an ONNX trace keeps the batch and length dynamic
    flat = torch.zeros_like(x[..., 0])[:, None, :].expand(-1, heads, -1)
    attn = masked_softmax(flat, None if mask is None else mask[:, None, :])
    return attn, attn @ x


def _discriminator(dim: int, hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, 1))


class A3VSEModel(RetrievalModel):
    """A3VSE's attentive encoders G^v, G^t and the six domain discriminators.

    With ``config.attention`` False the attention modules are kept (same parameters, same export) but
    unused; with ``config.adversarial`` False the discriminators are kept but never run (Table 5 ablations).
    """

    method = "a3vse"

    def __init__(self, config: A3VSEConfig) -> None:
        super().__init__(config)
        dim, heads = config.embed_dim, config.num_heads
        self.region_fc = nn.Linear(config.image_dim, dim)
        self.frame_fc = nn.Linear(config.image_dim, dim)
        self.text_rnn = MaskedRNN(config.word_dim, dim, cell="lstm", bidirectional=False)
        # config.global_residual: one linear map of the mean raw entity per modality (photos and clips share
        # the visual one: both are backbone features), added to every head (A3VSEConfig docstring)
        self.visual_global = nn.Linear(config.image_dim, dim)
        self.text_global = nn.Linear(config.word_dim, dim)
        self.attention = nn.ModuleDict({
            kind: ContextAttention(dim, config.context_dim, heads, config.temperature)
            for kind in ("image", "video", "text")
        })
        self.grl = GradientReversal(0.0)
        self.discriminators = nn.ModuleDict({
            name: _discriminator(heads * dim, config.disc_hidden) for name in DOMAIN_PAIRS
        })

    def _attend(self, kind: str, entities: Tensor, mask: Tensor | None, raw: Tensor) -> EncoderOutput:
        """Eq. 1 over ``entities`` (B, N, H); with ``global_residual`` plus the global map of the mean of the
        ``raw`` entities (B, N, C) on every head."""
        if self.config.attention:
            attn, heads = self.attention[kind](entities, mask)
        else:
            attn, heads = uniform_attention(entities, mask, self.config.num_heads)
        if self.config.global_residual:
            fc = self.text_global if kind == "text" else self.visual_global
            heads = heads + fc(masked_mean(raw, mask))[:, None, :]
        return EncoderOutput(emb=F.normalize(heads.flatten(1), dim=-1).unsqueeze(1), attn=attn)

    def encode_image(self, local: Tensor | None, pooled: Tensor | None) -> EncoderOutput:
        local = check_local(self.config, local)
        return self._attend("image", self.region_fc(local), None, local)

    def encode_video(self, frames: Tensor, mask: Tensor) -> EncoderOutput:
        check_frames(self.config, frames, mask)
        return self._attend("video", self.frame_fc(frames), mask, frames)

    def encode_text(self, tokens: Tensor | None, mask: Tensor | None,
                    sentence: Tensor | None = None) -> EncoderOutput:
        check_tokens(self.config, tokens, mask)
        assert tokens is not None and mask is not None
        return self._attend("text", self.text_rnn(tokens, mask)[0], mask, tokens)

    def forward(self, batch: PairBatch) -> PairOutput:
        """Encode annotated pairs and, when present, un-annotated visuals with their pseudo captions; run
        every discriminator whose two domains are present (none with ``config.adversarial`` False). Extras:
        ``unlabelled_emb``, ``pseudo_emb`` (B', 1, D) and ``domain_<name>_pos`` / ``domain_<name>_neg``
        logits of the two domains."""
        self.grl.gamma = grl_gamma(batch.progress, self.config.grl_eta)
        out = super().forward(batch)
        domains = {"v": out.visual.emb[:, 0], "t": out.text.emb[:, 0]}
        if batch.unlabelled_visual is not None and batch.pseudo_text is not None:
            out.extras["unlabelled_emb"] = self.encode_visual(batch.unlabelled_visual).emb
            out.extras["pseudo_emb"] = self.encode_caption(batch.pseudo_text).emb
            domains["vu"] = out.extras["unlabelled_emb"][:, 0]
            domains["s"] = out.extras["pseudo_emb"][:, 0]
        if not self.config.adversarial:
            return out  # no domain logits: the criterion's l^adv terms are then 0 and nothing is reversed
        confusion = self.config.adversarial_game == "confusion"
        if confusion:
            out.extras["confusion_weight"] = torch.tensor(self.grl.gamma)
        for name, (first, second) in DOMAIN_PAIRS.items():
            if first in domains and second in domains:
                disc = self.discriminators[name]
                pos, neg = domains[first], domains[second]
                if confusion:  # the discriminator learns eq. 4 on embeddings it cannot move ...
                    out.extras[f"domain_{name}_pos"] = disc(pos.detach()).squeeze(-1)
                    out.extras[f"domain_{name}_neg"] = disc(neg.detach()).squeeze(-1)
                    # ... and the encoders are scored by the same discriminator with its parameters held fixed
                    frozen = {key: value.detach() for key, value in disc.named_parameters()}
                    out.extras[f"confusion_{name}_pos"] = functional_call(disc, frozen, (pos,)).squeeze(-1)
                    out.extras[f"confusion_{name}_neg"] = functional_call(disc, frozen, (neg,)).squeeze(-1)
                else:
                    out.extras[f"domain_{name}_pos"] = disc(self.grl(pos)).squeeze(-1)
                    out.extras[f"domain_{name}_neg"] = disc(self.grl(neg)).squeeze(-1)
        return out

    def similarity(self, query: EncoderOutput, items: EncoderOutput) -> Tensor:
        """Cosine similarity S of eq. 2."""
        return cosine_matrix(query.emb[:, 0], items.emb[:, 0])

    @property
    def image_inputs(self) -> tuple[str, ...]:
        return ("local",)

    @property
    def text_inputs(self) -> tuple[str, ...]:
        return ("tokens", "mask")

    @property
    def embed_size(self) -> int:
        return self.config.num_heads * self.config.embed_dim

    @property
    def attention_heads(self) -> int:
        return self.config.num_heads
