"""The records every method's model takes and returns, and the base class of the models.

Shapes use B for the batch, R for image regions (49), T for frames, L for tokens, C for the backbone
feature size (1280), W for the token-vector size, K for embeddings per item, D for the embedding size.
Masks are 1 (or True) on valid positions and 0 on padding; the valid positions of each row must form a
prefix (the engine pads on the right).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from trainer.methods.config import MethodConfig
from trainer.methods.functional import cosine_matrix
from trainer.methods.recipe import Recipe


class MethodInputError(ValueError):
    """A tensor handed to a model has the wrong shape, or a batch lacks what the method needs."""


@dataclass
class ImageInput:
    """Cached photo features: ``local`` (B, R, C) before pooling and ``pooled`` (B, C)."""

    local: Tensor
    pooled: Tensor

    def __len__(self) -> int:
        return self.pooled.shape[0]


@dataclass
class VideoInput:
    """Cached GIF/video frame features: ``frames`` (B, T, C) and ``mask`` (B, T)."""

    frames: Tensor
    mask: Tensor

    def __len__(self) -> int:
        return self.frames.shape[0]


@dataclass
class TextInput:
    """Caption features: token vectors ``tokens`` (B, L, W), ``mask`` (B, L), MiniLM ``sentence`` (B, S)."""

    tokens: Tensor
    mask: Tensor
    sentence: Tensor | None = None

    def __len__(self) -> int:
        return self.tokens.shape[0]

    @property
    def device(self) -> torch.device:
        return self.tokens.device


VisualInput = ImageInput | VideoInput


@dataclass
class PairBatch:
    """A training batch of B matching (visual, caption) pairs: row i of ``visual`` matches row i of ``text``.

    ``visual_ids`` (B,) names the visual item of each row, so rows that repeat an item (several captions of
    one photo) count as matches of each other; ``text_ids`` does the same for captions. Both default to all
    distinct. The instance loss reads ``visual_ids`` as class indices in ``[0, num_classes)``.
    ``progress`` in [0, 1] is how far training is (A3VSE's gradient-reversal schedule).
    A3VSE also takes un-annotated items ``unlabelled_visual`` with their regional-semantics pseudo captions
    ``pseudo_text`` (row i matches row i).
    """

    visual: VisualInput
    text: TextInput
    visual_ids: Tensor | None = None
    text_ids: Tensor | None = None
    progress: float = 0.0
    unlabelled_visual: VisualInput | None = None
    pseudo_text: TextInput | None = None

    def __len__(self) -> int:
        return len(self.text)

    def positives(self) -> Tensor:
        """(B, B) bool: True where visual i and caption j match (same visual id or same caption id)."""
        return match_matrix(len(self), self.visual_ids, self.text_ids, self.text.device)


def match_matrix(size: int, visual_ids: Tensor | None, text_ids: Tensor | None,
                 device: torch.device | None = None) -> Tensor:
    """(size, size) bool match matrix from optional group ids; the diagonal is always True."""
    eye = torch.eye(size, dtype=torch.bool, device=device)
    out = eye.clone()
    for ids in (visual_ids, text_ids):
        if ids is not None:
            if ids.shape != (size,):
                raise MethodInputError(f"group ids: expected shape ({size},), got {tuple(ids.shape)}")
            out |= ids[:, None] == ids[None, :]
    return out


@dataclass
class EncoderOutput:
    """What an encoder returns for B items.

    ``emb`` (B, K, D): L2-normalised embeddings (PCME: the means mu). ``attn`` (B, H, R): per attention head,
    weights over the inputs (regions, frames or tokens) summing to 1, zero on padding. ``logsigma``
    (B, K, D): PCME's log standard deviations. ``local`` (B, K, D): PVSE's locally-guided features
    Upsilon (eq. 3), for the diversity loss. ``feature`` (B, F): the un-normalised feature some losses
    classify (instance loss).
    """

    emb: Tensor
    attn: Tensor | None = None
    logsigma: Tensor | None = None
    local: Tensor | None = None
    feature: Tensor | None = None


@dataclass
class PairOutput:
    """A model's training output: both sides' encodings plus method-specific tensors in ``extras``."""

    visual: EncoderOutput
    text: EncoderOutput
    extras: dict[str, Tensor] = field(default_factory=dict)


class RetrievalModel(nn.Module):
    """Base class: three encoders into one space, a training ``forward`` and a retrieval ``similarity``.

    Subclasses implement ``encode_image``, ``encode_video`` and ``encode_text``; ``similarity`` (cosine) and the
    inputs each encoder reads, ``image_inputs`` / ``video_inputs`` / ``text_inputs`` (the ONNX exporter declares
    exactly those), have defaults a method overrides where it differs. Every learnable parameter a method needs,
    including loss scalars (PCME's a, b) and discriminators (A3VSE), lives in the model, so a trainer optimises
    ``model.parameters()`` and the criteria hold none.
    """

    method: ClassVar[str] = ""
    # True for methods with local attention (PVSE, PCME): their encoders read regions and tokens as well as
    # the global features, so the exporter declares them.
    attends_locally: ClassVar[bool] = False
    # How the engine ranks with an export of this model (its manifest's "similarity"): cosine of the single
    # embeddings, PVSE's best of K x K cosines ("max-cosine"), or the model's own pair network ("network").
    similarity_kind: ClassVar[str] = "cosine"

    def __init__(self, config: MethodConfig) -> None:
        super().__init__()
        if config.method != self.method:
            raise MethodInputError(f"config: {type(self).__name__} needs a {self.method!r} config, "
                                   f"got {config.method!r}")
        self.config = config

    # --- encoders -------------------------------------------------------------------------------
    def encode_image(self, local: Tensor | None, pooled: Tensor | None) -> EncoderOutput:
        """Encode photos from local (B, R, C) and pooled (B, C) features (either may be None if unused)."""
        raise NotImplementedError

    def encode_video(self, frames: Tensor, mask: Tensor) -> EncoderOutput:
        """Encode GIFs/videos from frame features (B, T, C) and a frame mask (B, T)."""
        raise NotImplementedError

    def encode_text(self, tokens: Tensor | None, mask: Tensor | None,
                    sentence: Tensor | None = None) -> EncoderOutput:
        """Encode captions from token vectors (B, L, W), a token mask (B, L) and a sentence vector (B, S)."""
        raise NotImplementedError

    def encode_visual(self, visual: VisualInput) -> EncoderOutput:
        """Dispatch to ``encode_image`` or ``encode_video``."""
        if isinstance(visual, ImageInput):
            return self.encode_image(visual.local, visual.pooled)
        return self.encode_video(visual.frames, visual.mask)

    def encode_caption(self, text: TextInput) -> EncoderOutput:
        """``encode_text`` on a :class:`TextInput`."""
        return self.encode_text(text.tokens, text.mask, text.sentence)

    # --- training and retrieval ---------------------------------------------------------------------
    def forward(self, batch: PairBatch) -> PairOutput:
        """Encode both sides of a batch; methods with extra training tensors extend this."""
        return PairOutput(self.encode_visual(batch.visual), self.encode_caption(batch.text))

    def parameter_groups(self, lr: float) -> list[dict]:
        """The optimizer's parameter groups at base rate ``lr``, each with its ``base_lr`` (the schedule scales
        them all alike): by default one group of every parameter. A method whose parts must learn at different
        rates (PCME's sigma heads) returns one group per rate, the group at ``lr`` last (the rate the trainer
        reports)."""
        return [{"params": list(self.parameters()), "base_lr": lr, "lr": lr, "name": "head"}]

    def part_parameters(self, part: str) -> list[nn.Parameter]:
        """The parameters of a named part that can learn alone (``--train-only``); a method without it refuses."""
        raise ValueError(f"a {self.method} model has no part {part!r} that learns alone")

    def trainable_groups(self, lr: float, only: str | None = None) -> list[dict]:
        """:meth:`parameter_groups`, or with ``only`` that part's parameters alone: every other one is frozen
        (``requires_grad`` off), so it keeps the weights the run started from."""
        if only is None:
            return self.parameter_groups(lr)
        mine = self.part_parameters(only)
        for p in self.parameters():
            p.requires_grad_(False)
        for p in mine:
            p.requires_grad_(True)
        return [{"params": mine, "base_lr": lr, "lr": lr, "name": only}]

    def similarity(self, query: EncoderOutput, items: EncoderOutput) -> Tensor:
        """(Q, N) retrieval scores, higher is better, between Q encoded queries and N encoded items.

        The default is the cosine of the first embeddings (one embedding per item); PVSE and two-branch-sim
        override it."""
        return cosine_matrix(query.emb[:, 0], items.emb[:, 0])

    # --- what the exporter needs -------------------------------------------------------------------
    @property
    def image_inputs(self) -> tuple[str, ...]:
        """Names of the ``encode_image`` arguments this method reads (subset of local, pooled): the pooled
        feature, plus the local features for methods that attend over regions (``attends_locally``)."""
        return ("local", "pooled") if self.attends_locally else ("pooled",)

    @property
    def video_inputs(self) -> tuple[str, ...]:
        """Names of the ``encode_video`` arguments (frames, mask)."""
        return ("frames", "mask")

    @property
    def text_inputs(self) -> tuple[str, ...]:
        """Names of the ``encode_text`` arguments this method reads (subset of tokens, mask, sentence).

        With MiniLM's sentence vector the global feature comes from ``sentence`` alone, and methods that
        attend over tokens (``attends_locally``) read the tokens as well."""
        if not self.config.uses_sentence_vector:
            return ("tokens", "mask")
        return ("tokens", "mask", "sentence") if self.attends_locally else ("sentence",)

    @property
    def num_embeds(self) -> int:
        """K, the number of embeddings per item."""
        return 1

    @property
    def embed_size(self) -> int:
        """D, the size of each embedding."""
        return self.config.embed_dim

    @property
    def attention_heads(self) -> int:
        """H, the number of attention maps per item (0 when the method has none)."""
        return 0

    @property
    def probabilistic(self) -> bool:
        """True when encoders return log-sigma (PCME)."""
        return False


def single_embedding(feature: Tensor) -> EncoderOutput:
    """One L2-normalised embedding per item (K = 1) from a global feature (B, D), which is kept for training."""
    return EncoderOutput(emb=torch.nn.functional.normalize(feature, dim=-1).unsqueeze(1), feature=feature)


@dataclass(frozen=True)
class MethodSpec:
    """Everything registered for one method id: its config, model and criterion classes, a one-line summary,
    how it trains by default (its :class:`Recipe`), and the field values of its ``test`` preset beyond the tiny
    dimensions every method gets (see :func:`trainer.methods.registry.preset_values`). Each method module lists
    its specs in ``METHODS``."""

    name: str
    config_cls: type[MethodConfig]
    model_cls: type[RetrievalModel]
    criterion_cls: type[nn.Module]
    summary: str
    recipe: Recipe = field(default_factory=lambda: Recipe({}), hash=False, compare=False)
    test_preset: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
