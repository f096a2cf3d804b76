"""Plain data records shared by the engine, the CLI and the GUI (no Qt, no torch)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np

ZERO_SHOT = "zero-shot"  # the name of the zero-shot ranking wherever models are listed or chosen


class MediaKind(StrEnum):
    """What a media file is, decided from its content."""

    IMAGE = "image"
    ANIMATION = "animation"  # animated GIF / WebP / APNG
    VIDEO = "video"


class EvidenceKind(StrEnum):
    """A kind of evidence a sentence's ranking weighs (docs/contributing.md, "One ranking";
    :mod:`engine.search.evidence`). The values are the names ``resources/calibration.json`` keys its dense
    calibrations by (``model``, ``zero_shot``) and the ones a benchmark writes in ``LibraryState.evidence``."""

    MODEL = "model"  # the active trained model
    ZERO_SHOT = "zero_shot"  # the regional semantics (no model), the backbone's global features for a picture
    WORDS = "words"  # the user's captions and verdicts, spread to look-alikes

    @classmethod
    def parse(cls, value: object) -> EvidenceKind:
        """``value`` as a kind; ``ValueError`` naming it and the kinds there are when it is none."""
        try:
            return cls(value)
        except ValueError:
            known = ", ".join(kind.value for kind in cls)
            raise ValueError(f"unknown kind of evidence {value!r} (the kinds: {known})") from None


ALL_EVIDENCE: frozenset[EvidenceKind] = frozenset(EvidenceKind)  # what a library's searches weigh by default


def evidence_kinds(values: Iterable[object]) -> frozenset[EvidenceKind]:
    """A set of evidence kinds from kinds or their names (``{"model", "zero_shot"}``); ``ValueError`` for a name
    that is none (:meth:`EvidenceKind.parse`), or for a bare string (its letters would be read one by one)."""
    if isinstance(values, str):
        raise ValueError(f"expected a collection of evidence kinds, got the string {values!r}")
    return frozenset(EvidenceKind.parse(value) for value in values)


class CaptionSource(StrEnum):
    """Provenance of a caption or a pair."""

    USER = "user"
    IMPORTED = "imported"
    PSEUDO = "pseudo"


@dataclass(frozen=True, slots=True)
class SearchHit:
    """One ranked result."""

    media_id: int
    path: str
    kind: MediaKind
    score: float
    captions: tuple[str, ...] = ()  # what people wrote (the user's and imported captions)
    match_probability: float | None = None  # calibrated probability that the item is what the query asks (#40)
    uncertainty: float | None = None  # PCME: geometric mean of sigma of the item
    head_pair: tuple[int, int] | None = None  # PVSE: (query head, item head) that matched best
    frame: int | None = None  # a GIF or video: the sampled frame (0..T-1) that matched best
    guess: str | None = None  # the model's own caption (regional semantics), never one of ``captions``
    match: str | None = None  # the calibrated words for ``match_probability``: "strong", "good" or "weak" (#40)


def percent(p: float) -> str:
    """A probability as a person reads it: "62%", "4%", and under 1 % one decimal ("0.3%"), under 0.1 % "<0.1%";
    from 99.5 % ">99%" (a calibrated probability is never certain, and "100%" would say it is)."""
    if p >= 0.995:
        return ">99%"
    if p >= 0.0095:
        return f"{p:.0%}"
    return f"{p:.1%}" if p >= 0.001 else "<0.1%"


@dataclass(frozen=True, slots=True)
class WordMatch:
    """One word of a query read against an item's regional semantics (A3VSE §3.2): the ImageNet class among the
    item's regions that matches the word best, how well (``similarity``, the MiniLM cosine of word and class name)
    and, per region (or per sampled frame's region), that class's probability there (``regions``). ``class_name``
    is None when no class of the item comes near the word (below the zero-shot ranking's own word floor), so the
    word carries no regional evidence for this item."""

    word: str
    class_name: str | None
    similarity: float
    regions: np.ndarray
    strong_regions: int = 0  # regions where the class is at least a tenth of what the region shows


@dataclass(frozen=True, slots=True)
class Explanation:
    """Everything the inspector draws for one (query, item) pair.

    ``item_attention`` is K x R: per head, weights over the item's regions (49 = 7x7 for a photo) or
    frames (T for a GIF/video); ``query_attention`` is K x L over the query's tokens (or regions/frames
    for a media query). Each row sums to 1. ``similarity`` is the K x K head-to-head matrix.
    """

    query_tokens: tuple[str, ...]
    query_attention: np.ndarray
    item_attention: np.ndarray
    item_grid: tuple[int, int] | None  # (7, 7) for photos; None for frame attention
    similarity: np.ndarray
    head_pair: tuple[int, int]
    query_uncertainty: float | None = None
    item_uncertainty: float | None = None
    match_probability: float | None = None
    query_sigma: np.ndarray | None = None
    item_sigma: np.ndarray | None = None
    query_mu_2d: np.ndarray | None = None
    item_mu_2d: np.ndarray | None = None
    # PCME: the percentage of the library's items at most as uncertain as this one (0-100), and how many items
    # that is among; 95 reads "among the 5 % least certain items of this library"
    item_uncertainty_percentile: float | None = None
    library_items: int = 0
    notes: tuple[str, ...] = field(default_factory=tuple)
    # A model without attention (VSE, K = 1; the zero-shot ranking): what it can honestly say instead, each query
    # word's match among the item's regions (empty item_attention / query_attention then)
    word_matches: tuple[WordMatch, ...] = ()
    # PCME: the library's least and most uncertain items under the model (what the item's sigma is read against)
    library_uncertainty_range: tuple[float, float] | None = None
    # PCME: what the item's and the query's uncertainty meant on the model's own validation split (R@1 of that
    # uncertainty decile there, and whether sigma predicted misses), in words; empty without that record
    uncertainty_calibration: tuple[str, ...] = ()
    match_probability_by: str | None = None  # the probabilistic model whose own match probability that is


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """A model the user can pick (``Models.all``); the zero-shot ranking is always one of them.

    ``probabilistic``: it is a probabilistic model (PCME, with an uncertainty per item); it comes from the model's
    export manifest, never from its method's name. ``gives_probability``: text searches with it give each hit a
    match probability (the calibrated one of #40; without a calibration file, only a probabilistic model's own), so
    a ``p >= cutoff`` means something.
    """

    name: str
    method: str
    path: Path | None  # None: the zero-shot ranking
    metrics: dict[str, Any] = field(default_factory=dict)
    active: bool = False
    probabilistic: bool = False
    gives_probability: bool = False


def active_model(models: list[ModelInfo]) -> ModelInfo | None:
    """The active model of a ``models()`` list, if any."""
    return next((model for model in models if model.active), None)


@dataclass(frozen=True, slots=True)
class CaptureInfo:
    """When and with what a photo was taken, as its EXIF block says (None where it says nothing).

    ``taken_at`` is the camera's wall clock, ISO 8601 (``2019-07-04T15:30:12``, with ``+02:00`` when the file
    records its offset), shown as written, as photo managers do; ``taken_ns`` is the same instant in nanoseconds
    since the epoch (a time without an offset read as this machine's local time), what browsing sorts by.
    """

    taken_at: str | None = None
    taken_ns: int | None = None
    camera_make: str | None = None
    camera_model: str | None = None

    @property
    def camera(self) -> str | None:
        """Make and model in one line; a model that already names its maker ("Canon EOS R5") stands alone."""
        make, model = self.camera_make, self.camera_model
        if make and model:
            return model if model.casefold().startswith(make.split()[0].casefold()) else f"{make} {model}"
        return make or model


@dataclass(frozen=True, slots=True)
class MediaDetails:
    """What the viewer's details panel says about one item (``Library.details``): all of it read at
    indexing and stored in the catalog, so asking never decodes the file."""

    media_id: int
    path: Path
    kind: MediaKind
    format: str | None
    size_bytes: int
    modified_ns: int
    width: int | None
    height: int | None
    n_frames: int | None
    duration_s: float | None
    capture: CaptureInfo = CaptureInfo()
