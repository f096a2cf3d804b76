"""Two-branch networks (Wang, Li & Lazebnik, TPAMI 2018) on whole-item features.

Each branch (§3.2.1) is FC - ReLU - dropout - FC - batch norm - L2. Inputs are the pooled photo feature,
the mean of a clip's frame features, and the mean of a caption's token vectors (the "mean vector" text
feature) or MiniLM's sentence vector. The embedding network ranks in the shared space (eq. 1-6); the
similarity network (§3.3) multiplies the two branch outputs element-wise and scores the pair with FC
layers, trained with a logistic loss on balanced positive and negative pairs (eq. 7).
"""


from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.methods.config import ConfigError, MethodConfig, bounded
from trainer.methods.encoders import check_frames, check_shape, check_tokens, masked_mean
from trainer.methods.functional import euclidean_distances
from trainer.methods.interface import EncoderOutput, MethodSpec, PairBatch, PairOutput, RetrievalModel, match_matrix
from trainer.methods.losses import Terms
from trainer.methods.recipe import SENTENCE_TEXT, Recipe


@dataclass(frozen=True)
class TwoBranchEmbedConfig(MethodConfig):
    """Two-branch embedding network (Wang, Li & Lazebnik 2018), image-sentence settings of §5:
    FC sizes 2048 and 512, dropout 0.5 after the ReLU, m=0.1, lambda_1=1, lambda_2=2, lambda_3=0
    (no image neighbourhoods in caption data), lambda_4=0.2, keep the K=50 top violating triplets.
    """

    method: ClassVar[str] = "twobranch-embed"
    embed_dim: int = bounded(512, 1)
    hidden_dim: int = bounded(2048, 1)
    dropout: float = bounded(0.5, 0.0, 1.0)
    margin: float = bounded(0.1, 0.0)
    lambda_i2t: float = bounded(1.0, 0.0)
    lambda_t2i: float = bounded(2.0, 0.0)
    lambda_image_nbr: float = bounded(0.0, 0.0)
    lambda_text_nbr: float = bounded(0.2, 0.0)
    top_k: int = bounded(50, 1)

@dataclass(frozen=True)
class TwoBranchSimConfig(MethodConfig):
    """Two-branch similarity network (§3.3, §4.3): the embedding branches, an element-wise product, then FC
    layers 512x512, 512x256 and 256x1 (``sim_hidden`` lists the hidden sizes). One sampled negative per
    positive keeps the logistic loss balanced (eq. 7).
    """

    method: ClassVar[str] = "twobranch-sim"
    embed_dim: int = bounded(512, 1)
    hidden_dim: int = bounded(2048, 1)
    dropout: float = bounded(0.5, 0.0, 1.0)
    sim_hidden: tuple[int, ...] = (512, 256)
    negatives_per_positive: int = bounded(1, 1)

    def check(self) -> None:
        super().check()
        if any(v < 1 for v in self.sim_hidden):
            raise ConfigError("sim_hidden: every layer size must be >= 1")


class Branch(nn.Module):
    """FC - ReLU - dropout - FC - BN - L2 (§3.2.1; dropout after the ReLU as in §5.3)."""

    def __init__(self, in_dim: int, hidden: int, out_dim: int, dropout: float) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(), nn.Dropout(dropout),
                                    nn.Linear(hidden, out_dim), nn.BatchNorm1d(out_dim))

    def forward(self, x: Tensor) -> Tensor:
        return F.normalize(self.layers(x), dim=-1)


class _TwoBranchBase(RetrievalModel):
    def __init__(self, config: TwoBranchEmbedConfig | TwoBranchSimConfig) -> None:
        super().__init__(config)
        text_in = config.sentence_dim if config.uses_sentence_vector else config.word_dim
        self.image_branch = Branch(config.image_dim, config.hidden_dim, config.embed_dim, config.dropout)
        self.video_branch = Branch(config.image_dim, config.hidden_dim, config.embed_dim, config.dropout)
        self.text_branch = Branch(text_in, config.hidden_dim, config.embed_dim, config.dropout)

    def encode_image(self, local: Tensor | None, pooled: Tensor | None) -> EncoderOutput:
        pooled = check_shape("pooled", pooled, (None, self.config.image_dim))
        return EncoderOutput(emb=self.image_branch(pooled).unsqueeze(1))

    def encode_video(self, frames: Tensor, mask: Tensor) -> EncoderOutput:
        check_frames(self.config, frames, mask)
        return EncoderOutput(emb=self.video_branch(masked_mean(frames, mask)).unsqueeze(1))

    def encode_text(self, tokens: Tensor | None, mask: Tensor | None,
                    sentence: Tensor | None = None) -> EncoderOutput:
        if self.config.uses_sentence_vector:
            feature = check_shape("sentence", sentence, (None, self.config.sentence_dim))
        else:
            check_tokens(self.config, tokens, mask)
            assert tokens is not None
            feature = masked_mean(tokens, mask)
        return EncoderOutput(emb=self.text_branch(feature).unsqueeze(1))


class TwoBranchEmbedModel(_TwoBranchBase):
    """The embedding network: retrieval by distance between branch outputs."""

    method = "twobranch-embed"

    # similarity: the base class's cosine; the outputs are unit vectors, so it ranks exactly as -Euclidean distance


class TwoBranchSimModel(_TwoBranchBase):
    """The similarity network: element-wise product of the branches, then FC-ReLU layers to one score."""

    method = "twobranch-sim"
    similarity_kind = "network"

    def __init__(self, config: TwoBranchSimConfig) -> None:
        super().__init__(config)
        layers: list[nn.Module] = []
        width = config.embed_dim
        for hidden in config.sim_hidden:
            layers += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        layers.append(nn.Linear(width, 1))
        self.head = nn.Sequential(*layers)

    def pair_scores(self, visual: Tensor, text: Tensor) -> Tensor:
        """Scores p of matched rows: visual (..., D) and text (..., D) embeddings -> (...)."""
        return self.head(visual * text).squeeze(-1)

    def forward(self, batch: PairBatch) -> PairOutput:
        """Encode both sides and score balanced pairs: each row's positive (i, i), repeated
        ``negatives_per_positive`` times, and as many random non-matching (i, j). Extras: ``pair_scores``
        (N,) and ``pair_labels`` (N,) with +1 / -1 (eq. 7). Rows without any non-match add no pairs unless
        no row has one, in which case only positives are scored."""
        out = super().forward(batch)
        rows, cols, labels = balanced_pairs(batch.positives(), self.config.negatives_per_positive)
        out.extras["pair_scores"] = self.pair_scores(out.visual.emb[rows, 0], out.text.emb[cols, 0])
        out.extras["pair_labels"] = labels
        return out

    def similarity(self, query: EncoderOutput, items: EncoderOutput) -> Tensor:
        """The network's score for every (query, item) pair, (Q, N)."""
        return self.pair_scores(query.emb[:, None, 0, :], items.emb[None, :, 0, :])


def balanced_pairs(positives: Tensor, negatives_per_positive: int) -> tuple[Tensor, Tensor, Tensor]:
    """Sample (visual row, text column, label) pairs with as many negatives as positives (§3.3).

    ``positives`` (B, B) bool marks matches. Uses torch's global generator, so seeding reproduces it.
    """
    has_negative = (~positives).any(1)
    rows = has_negative.nonzero().squeeze(1)
    size = positives.shape[0]
    if rows.numel() == 0:
        diagonal = torch.arange(size, device=positives.device)
        return diagonal, diagonal, torch.ones(size, device=positives.device)
    n = negatives_per_positive
    neg_cols = torch.multinomial((~positives[rows]).float(), n, replacement=True).flatten()
    pos_rows = rows.repeat_interleave(n)
    all_rows = torch.cat([pos_rows, pos_rows])
    all_cols = torch.cat([pos_rows, neg_cols])
    labels = torch.cat([torch.ones(len(pos_rows)), -torch.ones(len(pos_rows))]).to(positives.device)
    return all_rows, all_cols, labels


# --- losses -----------------------------------------------------------------------------------------------------------

def _top_violations(costs: Tensor, valid: Tensor, top_k: int | None) -> Tensor:
    """Sum per row of the ``top_k`` largest non-negative hinge costs among ``valid`` columns."""
    costs = costs.clamp(min=0) * valid
    if top_k is not None and top_k < costs.shape[-1]:
        costs = costs.topk(top_k, dim=-1).values
    return costs.sum(-1)

class BidirectionalRankingLoss(nn.Module):
    """Two-branch embedding loss, Wang et al. eq. 1-6, on Euclidean distances.

    ``lambda_1 * sum [m + d(x_i, y_j) - d(x_i, y_k)]_+`` (visual anchors, eq. 1) plus ``lambda_2 *`` the
    same for caption anchors (eq. 2), each keeping the ``top_k`` most violating negatives per (anchor,
    positive) as in the paper's triplet sampling; plus the neighbourhood constraints (eq. 4-5) weighted
    by lambda_3 (visuals described by the same caption) and lambda_4 (captions of the same visual) over
    all their triplets. Each term is divided by the batch size B.
    """

    def __init__(self, margin: float, lambdas: tuple[float, float, float, float], top_k: int | None) -> None:
        super().__init__()
        self.margin, self.lambdas, self.top_k = margin, lambdas, top_k

    def forward(self, visual: Tensor, text: Tensor, visual_ids: Tensor | None = None,
                text_ids: Tensor | None = None) -> Terms:
        size = visual.shape[0]
        ids_v = visual_ids if visual_ids is not None else torch.arange(size, device=visual.device)
        ids_t = text_ids if text_ids is not None else torch.arange(size, device=visual.device)
        match = match_matrix(size, ids_v, ids_t, visual.device)
        cross = euclidean_distances(visual, text)
        image_nbr, image_far = self._neighbours(ids_t, ids_v)
        text_nbr, text_far = self._neighbours(ids_v, ids_t)
        terms = {
            "i2t": self._ranking(cross, match, ~match, self.top_k),
            "t2i": self._ranking(cross.T, match.T, ~match.T, self.top_k),
            "image_nbr": self._ranking(euclidean_distances(visual, visual), image_nbr, image_far, None),
            "text_nbr": self._ranking(euclidean_distances(text, text), text_nbr, text_far, None),
        }
        l1, l2, l3, l4 = self.lambdas
        terms["total"] = (l1 * terms["i2t"] + l2 * terms["t2i"] + l3 * terms["image_nbr"]
                          + l4 * terms["text_nbr"])
        return terms

    @staticmethod
    def _neighbours(shared: Tensor, own: Tensor) -> tuple[Tensor, Tensor]:
        """Neighbours share the other side's id but are different items; non-neighbours share neither."""
        same_shared, same_own = shared[:, None] == shared[None, :], own[:, None] == own[None, :]
        return same_shared & ~same_own, ~same_shared & ~same_own

    def _ranking(self, dist: Tensor, positive: Tensor, negative: Tensor, top_k: int | None) -> Tensor:
        """Sum over anchors a (rows), positives p and negatives n (columns) of ``[m + d(a, p) - d(a, n)]_+``,
        keeping the ``top_k`` largest per (a, p), divided by the number of anchors."""
        anchor, pos = positive.nonzero(as_tuple=True)
        if anchor.numel() == 0:
            return dist.new_zeros(())
        costs = self.margin + dist[anchor, pos][:, None] - dist[anchor]
        return _top_violations(costs, negative[anchor], top_k).sum() / dist.shape[0]

class LogisticPairLoss(nn.Module):
    """Two-branch similarity network loss, Wang et al. eq. 7: ``log(1 + exp(-z p))`` averaged over the
    (balanced) pairs, z = +1 for matches and -1 otherwise."""

    def forward(self, scores: Tensor, labels: Tensor) -> Terms:
        loss = F.softplus(-labels * scores)
        pos, neg = loss[labels > 0], loss[labels < 0]
        zero = scores.new_zeros(())
        return {"positive": pos.mean() if pos.numel() else zero,
                "negative": neg.mean() if neg.numel() else zero, "total": loss.mean()}

class TwoBranchEmbedCriterion(nn.Module):
    """Wang et al. eq. 6 on the embedding network's outputs."""

    def __init__(self, config: TwoBranchEmbedConfig) -> None:
        super().__init__()
        self.ranking = BidirectionalRankingLoss(
            config.margin, (config.lambda_i2t, config.lambda_t2i, config.lambda_image_nbr,
                            config.lambda_text_nbr), config.top_k)

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        return self.ranking(out.visual.emb[:, 0], out.text.emb[:, 0], batch.visual_ids, batch.text_ids)

class TwoBranchSimCriterion(nn.Module):
    """Wang et al. eq. 7 on the similarity network's sampled pair scores."""

    def __init__(self, config: TwoBranchSimConfig) -> None:
        super().__init__()
        self.logistic = LogisticPairLoss()

    def forward(self, out: PairOutput, batch: PairBatch) -> Terms:
        return self.logistic(out.extras["pair_scores"], out.extras["pair_labels"])

# Two-branch networks §5: two captions of each image side by side so the neighbourhood term has pairs.
EMBED_RECIPE = Recipe(dict(SENTENCE_TEXT), "adam", 2e-4, weight_decay=1e-5, epochs=30, patience=5,
                      schedule_patience=2, group=2, per_item=2)
# The similarity network scores every (item, caption) pair of the validation matrix: fewer items.
SIM_RECIPE = Recipe(dict(SENTENCE_TEXT), "adam", 2e-4, weight_decay=1e-5, epochs=30, patience=5,
                    schedule_patience=2, val_items=250)

METHODS = (
    MethodSpec("twobranch-embed", TwoBranchEmbedConfig, TwoBranchEmbedModel, TwoBranchEmbedCriterion,
               "two-branch embedding network, bi-directional ranking + neighbourhood constraints", EMBED_RECIPE,
               test_preset={"hidden_dim": 10, "top_k": 5}),
    MethodSpec("twobranch-sim", TwoBranchSimConfig, TwoBranchSimModel, TwoBranchSimCriterion,
               "two-branch similarity network, logistic loss on balanced pairs", SIM_RECIPE,
               test_preset={"hidden_dim": 10, "sim_hidden": [6, 4]}),
)
