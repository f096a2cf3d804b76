"""Two-branch networks (Wang, Li & Lazebnik, TPAMI 2018) on whole-item features.

Each branch (§3.2.1) is FC - ReLU - dropout - FC - batch norm - L2. Inputs are the pooled photo feature,
the mean of a clip's frame features, and the mean of a caption's token vectors (the "mean vector" text
feature) or MiniLM's sentence vector. The embedding network ranks in the shared space (eq. 1-6); the
similarity network (§3.3) multiplies the two branch outputs element-wise and scores the pair with FC
layers, trained with a logistic loss on balanced positive and negative pairs (eq. 7).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainer.methods.config import TwoBranchEmbedConfig, TwoBranchSimConfig
from trainer.methods.encoders import check_frames, check_shape, check_tokens, masked_mean
from trainer.methods.functional import cosine_matrix
from trainer.methods.interface import EncoderOutput, PairBatch, PairOutput, RetrievalModel


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

    @property
    def image_inputs(self) -> tuple[str, ...]:
        return ("pooled",)

    @property
    def text_inputs(self) -> tuple[str, ...]:
        return ("sentence",) if self.config.uses_sentence_vector else ("tokens", "mask")


class TwoBranchEmbedModel(_TwoBranchBase):
    """The embedding network: retrieval by distance between branch outputs."""

    method = "twobranch-embed"

    def similarity(self, query: EncoderOutput, items: EncoderOutput) -> Tensor:
        """Cosine similarity; the outputs are unit vectors, so it ranks exactly as -Euclidean distance."""
        return cosine_matrix(query.emb[:, 0], items.emb[:, 0])


class TwoBranchSimModel(_TwoBranchBase):
    """The similarity network: element-wise product of the branches, then FC-ReLU layers to one score."""

    method = "twobranch-sim"

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
