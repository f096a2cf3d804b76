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

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from trainer.methods.config import AdversarialGame, ConfigError, MethodConfig, bounded
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
from trainer.methods.interface import EncoderOutput, MethodSpec, PairBatch, PairOutput, RetrievalModel
from trainer.methods.losses import Terms, TripletLoss
from trainer.methods.recipe import Recipe


@dataclass(frozen=True)
class A3VSEConfig(MethodConfig):
    """A3VSE (Huang et al. 2019), §4.3: H=512 shared by the context vectors, K=3 heads, alpha_vt=0.2,
    alpha_vs=0.3, beta=0.8, GRL gamma = 2/(1+exp(-eta p)) - 1 with eta=10; lambda_vvu=0.2, lambda_ts=0.1,
    lambda_vt=0.5, lambda_vus=0.5, lambda_vs=lambda_vut=0.3.

    The softmax temperature lambda_v of eq. 1 is not given in the paper; 10 lets the tanh-bounded scores
    concentrate. The discriminator width is not given either (``disc_hidden``). The embedding is the
    concatenation of the K attended vectors, so its size is ``num_heads * embed_dim``.

    Two switches reproduce the ablations of Table 5 (§4.6): ``attention=False`` is "s, without attention"
    (mean pooling over the encoded entities replaces eq. 1: every head's map is uniform over the valid
    entities, so shapes and the export stay those of the full model); ``adversarial=False`` is "s, without
    L_adv" (eq. 9 without l^adv: no discriminator runs and no gradient goes through the reversal layer).
    "No s" is not a config switch: it is training without pseudo pairs (the trainer's ``pseudo_pairs``).

    ``adversarial_game`` says how the encoders play eq. 10. ``"reversal"`` is the paper's gradient reversal
    layer: the encoders ascend the discriminators' BCE. On Flickr8k, fully annotated (only the v-t
    discriminator runs), that ascent has no optimum at chance: the encoders overshoot until the discriminator
    is confidently wrong (accuracy 0.32 in epoch 2), the embeddings' spread halves and dev rsum fell 59 -> 35
    (with lambda_vt 0.05 instead of 0.5: 147 at epoch 3, then 116 as accuracy reached 0.5 and the BCE kept
    rising). ``"confusion"`` (default; Tzeng et al. 2015's domain confusion) keeps eq. 4 for the discriminators,
    on embeddings they cannot move, and gives the encoders the cross-entropy between the discriminators'
    outputs (parameters held fixed) and the uniform label 1/2, weighted by the same lambda and the GRL's gamma
    schedule: its gradient vanishes exactly when a discriminator is at chance, the equilibrium eq. 10 aims for.

    ``global_residual`` (ours, default on) adds to every head's attended vector a linear projection of the
    item's mean raw entity (the pooled backbone feature of a photo, the mean frame of a clip, the mean MiniLM
    token vector of a caption, i.e. MiniLM's sentence embedding before its normalisation), as PVSE fuses
    global and local features by residual learning (§3.3). The paper's encoders learn from detector regions
    and word vectors with backbones trained end to end; ours see frozen features only, and the caption LSTM
    starts from scratch on 30,000 captions, so without this path the full model reached a Flickr8k dev rsum of
    ~150-160 against 287 for two linear maps (``vse``). Off reproduces the paper's encoders exactly.
    """

    method: ClassVar[str] = "a3vse"
    embed_dim: int = bounded(512, 1)
    num_heads: int = bounded(3, 1)
    context_dim: int = bounded(512, 1)
    temperature: float = bounded(10.0, 0.0, lo_open=True)
    margin_vt: float = bounded(0.2, 0.0)
    margin_vs: float = bounded(0.3, 0.0)
    beta: float = bounded(0.8, 0.0, 1.0)
    grl_eta: float = bounded(10.0, 0.0)
    lambda_vvu: float = bounded(0.2, 0.0)
    lambda_ts: float = bounded(0.1, 0.0)
    lambda_vt: float = bounded(0.5, 0.0)
    lambda_vus: float = bounded(0.5, 0.0)
    lambda_vs: float = bounded(0.3, 0.0)
    lambda_vut: float = bounded(0.3, 0.0)
    disc_hidden: int = bounded(512, 1)
    attention: bool = True
    adversarial: bool = True
    adversarial_game: AdversarialGame = "confusion"
    global_residual: bool = True

    def check(self) -> None:
        super().check()
        if self.uses_sentence_vector:
            raise ConfigError("text_encoder: a3vse attends over token vectors; use 'glove' or 'minilm'")

    @property
    def learns_from_pseudo_pairs(self) -> bool:
        return True  # its adversarial terms align the annotated corpus with the un-annotated one (§3.2)


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

    # similarity: the base class's cosine, S of eq. 2

    @property
    def image_inputs(self) -> tuple[str, ...]:
        return ("local",)

    @property
    def embed_size(self) -> int:
        return self.config.num_heads * self.config.embed_dim

    @property
    def attention_heads(self) -> int:
        return self.config.num_heads


# --- losses -----------------------------------------------------------------------------------------------------------

class DomainAdversarialLoss(nn.Module):
    """A3VSE eq. 4 for one discriminator: ``l^d = mean log D(a) + mean log(1 - D(b))`` with D = sigmoid of
    the logits. The discriminator maximises l^d, so ``'total'`` is ``-l^d`` (binary cross-entropy) for
    minimisation; the gradient reversal layer in front of the discriminator makes the encoders maximise it,
    i.e. minimise l^d as eq. 10 asks. ``'accuracy'`` (no gradient) is the share of both domains the
    discriminator classifies correctly: near 1 it wins, near 0.5 the domains are confused, well below 0.5 the
    encoders have overshot and swapped the domains (maximising a BCE has no optimum at chance)."""

    def forward(self, logits_pos: Tensor, logits_neg: Tensor) -> Terms:
        log_likelihood = F.logsigmoid(logits_pos).mean() + F.logsigmoid(-logits_neg).mean()
        with torch.no_grad():
            accuracy = ((logits_pos > 0).float().mean() + (logits_neg < 0).float().mean()) / 2
        return {"log_likelihood": log_likelihood, "accuracy": accuracy, "total": -log_likelihood}

def domain_confusion(logits_pos: Tensor, logits_neg: Tensor) -> Tensor:
    """Cross-entropy between a discriminator's outputs on both domains and the uniform label 1/2 (Tzeng et al.
    2015), minus its minimum log 2, so 0 exactly when every output is at chance. Its gradient with respect to a
    logit is ``(sigmoid(logit) - 1/2) / n``: bounded, and it vanishes at chance instead of pushing past it."""
    logits = torch.cat([logits_pos, logits_neg])
    return F.binary_cross_entropy_with_logits(logits, torch.full_like(logits, 0.5)) - math.log(2.0)

class A3VSECriterion(nn.Module):
    """A3VSE eq. 9: ``l^tri + l^adv`` with the beta-weighted triplet loss (eq. 3) and the lambda-weighted
    discriminator losses (eq. 5-8). Terms whose domains are missing from the batch are 0.

    As eq. 9-10 print it, lambda weights l^d for the discriminator as well as for the encoders, where DANN
    leaves the discriminator's loss unweighted; under Adam (the trainer's optimizer) a constant factor on a
    parameter's gradient does not change its steps, so the discriminators do not learn more slowly for it.

    Diagnostics without gradient, for the training log: ``acc_<name>`` (discriminator accuracy, see
    :class:`DomainAdversarialLoss`) for each discriminator that ran, and ``spread_v`` / ``spread_t``, the mean
    distance of the unit embeddings from their batch centroid (1 for directions spread over the sphere, 0 when
    the encoder maps every input to one vector). The reversed gradient rewards moving a whole modality along
    the discriminator's normal; a common component shared by a modality shrinks its spread, which is the way
    an encoder can "win" the v-t game at the cost of retrieval.
    """

    def __init__(self, config: A3VSEConfig) -> None:
        super().__init__()
        self.triplet_vt = TripletLoss(config.margin_vt, hardest=True)
        self.triplet_vs = TripletLoss(config.margin_vs, hardest=True)
        self.adversarial = DomainAdversarialLoss()
        self.beta = config.beta
        self.lambdas = {"v_vu": config.lambda_vvu, "t_s": config.lambda_ts, "v_t": config.lambda_vt,
                        "vu_s": config.lambda_vus, "v_s": config.lambda_vs, "vu_t": config.lambda_vut}

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        zero = out.visual.emb.new_zeros(())
        tri_vt = self.triplet_vt(cosine_matrix(out.visual.emb[:, 0], out.text.emb[:, 0]), batch.positives())
        terms: Terms = {"tri_vt": tri_vt["total"], "tri_vs": zero,
                        "spread_v": _spread(out.visual.emb[:, 0]), "spread_t": _spread(out.text.emb[:, 0])}
        if "unlabelled_emb" in out.extras:
            sims = cosine_matrix(out.extras["unlabelled_emb"][:, 0], out.extras["pseudo_emb"][:, 0])
            terms["tri_vs"] = self.triplet_vs(sims)["total"]
        terms["tri"] = self.beta * terms["tri_vt"] + (1 - self.beta) * terms["tri_vs"]
        adv = zero
        for name in DOMAIN_PAIRS:
            key = f"domain_{name}_pos"
            value = zero
            if key in out.extras:
                game = self.adversarial(out.extras[key], out.extras[f"domain_{name}_neg"])
                value, terms[f"acc_{name}"] = game["total"], game["accuracy"]
            if f"confusion_{name}_pos" in out.extras:  # the encoders' side of the confusion game
                confusion = domain_confusion(out.extras[f"confusion_{name}_pos"], out.extras[f"confusion_{name}_neg"])
                terms[f"conf_{name}"] = confusion
                value = value + out.extras["confusion_weight"] * confusion
            terms[f"adv_{name}"] = value
            adv = adv + self.lambdas[name] * value
        terms["adv"] = adv
        terms["total"] = terms["tri"] + adv
        return terms

def _spread(emb: Tensor) -> Tensor:
    """Mean distance of the rows of ``emb`` (N, D) from their centroid, without gradient (a collapse gauge)."""
    with torch.no_grad():
        return (emb - emb.mean(0)).norm(dim=-1).mean()

# A3VSE §4.3: Adam, weight decay 1e-6, clip 2.0, batch 128, 24 epochs with a 10x lower rate after 16 (here
# 12 and 8: its attention over the 49 local features costs 10-100x a global method's step on a CPU, so the
# budget is halved, keeping the schedule's proportions); the paper's lambdas are the config defaults. Its
# attention reads MiniLM token vectors.
RECIPE = Recipe({"text_encoder": "minilm"}, "adam", 2e-4, weight_decay=1e-6, schedule="step",
                schedule_factor=0.1, step_epoch=8, epochs=12, patience=4)

METHODS = (
    MethodSpec("a3vse", A3VSEConfig, A3VSEModel, A3VSECriterion,
               "context-aware attention, beta-weighted triplet + adversarial alignment", RECIPE,
               test_preset={"num_heads": 2, "context_dim": 6, "disc_hidden": 6}),
)
