"""What an explanation of one (query, item) pair can honestly say, as data and words (no Qt; the inspector draws it).

- A model's attention is shown only where the model has it (PVSE and A3VSE heads, PCME's attention pooling); the
  text encoder's own markers (``[CLS]``, ``[SEP]``) are no words of the query and are left out (:func:`query_words`).
- A model without attention (VSE++, K = 1, the shipped starter; the zero-shot ranking) gets the one explanation it
  can give: each query word read against the item's regional semantics (A3VSE §3.2), the ImageNet class among the
  item's regions that matches the word, and where it is (:func:`word_matches`). These are the semantics the search
  fuses with the model (:mod:`engine.search.evidence`), so they are part of why the item ranked where it did.
- PCME's uncertainty is read against the library's own items under that model: a sigma is a number only beside
  the library's least and most uncertain (:func:`sigma_text`), and its place among them in words
  (:func:`uncertainty_reading`); 1- and 2-sigma ellipses are drawn magnified, by a stated factor, when at true
  size they would be dots (:func:`ellipse_magnification`). What a sigma has meant for this model's mistakes is
  read from its own validation split (``metrics.json``'s R@1 per uncertainty decile, PCME fig. 6), never promised:
  where sigma did not predict a miss there, the reading says so (:func:`calibrated_reading`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from engine.search.zeroshot import WORD_FLOOR
from engine.trainercontract.metrics import UncertaintyCurve
from engine.trainercontract.reports import ReportError
from engine.types import WordMatch

SPECIAL_TOKENS = frozenset({"[CLS]", "[SEP]", "[PAD]", "[MASK]", "<s>", "</s>", "<pad>"})
STRONG_SHARE = 0.1  # a region "shows" a class when that class has at least this probability there
# the inspector names a class for a word from this cosine up (the ranking counts from WORD_FLOOR, 0.3): on the 500
# Flickr8k train photos the starter held aside, 82 % of the matches shown from 0.45 are words of the photo's own
# captions, against 59 % from 0.3 ("rug -> Pomeranian 0.38"); tests/bench/bench_word_floor.py, #44
SHOWN_FLOOR = 0.45


def query_words(tokens: Sequence[str], attention: np.ndarray) -> tuple[tuple[str, ...], np.ndarray]:
    """``tokens`` without the text encoder's markers, and ``attention`` (heads, tokens) without their columns,
    each row renormalised to sum to 1 over the words left (a head that looked only at a marker gets zeros)."""
    att = np.asarray(attention, dtype=np.float32)
    keep = [i for i, token in enumerate(tokens) if token not in SPECIAL_TOKENS]
    if att.ndim != 2 or att.shape[1] < len(tokens):
        return tuple(tokens[i] for i in keep), att
    kept = att[:, keep]
    sums = kept.sum(axis=1, keepdims=True)
    return tuple(tokens[i] for i in keep), np.where(sums > 0, kept / np.maximum(sums, 1e-12), 0.0).astype(np.float32)


def word_matches(words: Sequence[str], region_ids: np.ndarray, region_probs: np.ndarray,
                 class_names: Sequence[str], class_embeddings: np.ndarray,
                 encode: Callable[[list[str]], np.ndarray]) -> tuple[WordMatch, ...]:
    """Each of ``words`` against an item's regions (``region_ids`` / ``region_probs`` (R, k): each region's top
    classes, as the feature store keeps them): the class among them that matches the word best (probability in
    the region times the MiniLM cosine of word and class name) and that class's probability in every region.
    A word whose best cosine with any class of the item is below :data:`SHOWN_FLOOR` names nothing the regions
    show that a person would accept (``class_name`` None; under the zero-shot ranking's ``WORD_FLOOR`` the ranking
    itself counts it for nothing)."""
    if not len(words):
        return ()
    ids = np.asarray(region_ids, dtype=np.int64)
    probs = np.asarray(region_probs, dtype=np.float32)
    word_emb = np.asarray(encode(list(words)), dtype=np.float32)
    out: list[WordMatch] = []
    for word, emb in zip(words, word_emb, strict=True):
        cosine = np.asarray(class_embeddings, dtype=np.float32)[ids] @ emb  # (R, k): each region's classes
        evidence = probs * np.clip(cosine, 0.0, None)
        r, k = np.unravel_index(int(np.argmax(evidence)), evidence.shape)
        best = int(ids[r, k])
        similarity = float(cosine[r, k])
        regions = np.where(ids == best, probs, 0.0).max(axis=1).astype(np.float32)
        if similarity < max(WORD_FLOOR, SHOWN_FLOOR) or float(evidence[r, k]) <= 0.0:
            out.append(WordMatch(word, None, similarity, np.zeros(len(ids), np.float32)))
            continue
        out.append(WordMatch(word, str(class_names[best]), similarity, regions,
                             int((regions >= STRONG_SHARE).sum())))
    return tuple(out)


def word_match_text(match: WordMatch, regions: int, unit: str = "regions") -> str:
    """One line a person reads: "dog → Boston terrier (close, 0.62), in 9 of 49 regions"."""
    if match.class_name is None:
        return f"{match.word} → nothing in this item is close to it (no class above {SHOWN_FLOOR:.2f})"
    closeness = "close" if match.similarity >= 0.5 else "loosely related"
    where = (f"in {match.strong_regions} of {regions} {unit}" if match.strong_regions
             else f"faintly, in no {unit[:-1]} above {STRONG_SHARE:.0%}")
    return f"{match.word} → {match.class_name} ({closeness}, {match.similarity:.2f}), {where}"


AMBIGUOUS_PERCENTILE = 90.0  # the library's 10 % least certain items read "ambiguous"
CLEAR_PERCENTILE = 10.0  # its 10 % most certain read "clear"


def uncertainty_reading(percentile: float, items: int) -> str:
    """The item's uncertainty in words, from where it sits among the library's ``items`` (``percentile``: the
    share of them at most as uncertain, :attr:`engine.types.Explanation.item_uncertainty_percentile`)."""
    one_item = 100.0 / max(1, items)  # never a finer share than one item of the library
    if percentile >= AMBIGUOUS_PERCENTILE:
        # the share at least as uncertain, the item itself included (``percentile`` counts it among those at most
        # as uncertain): the second least certain of 12 is among the 17 %, not the 9 %
        share = max(1, math.ceil(round(100.0 - percentile + one_item, 6)))
        return f"Ambiguous: among the {share} % least certain of the {items:,} items in this library"
    if percentile <= CLEAR_PERCENTILE:
        share = max(1, math.ceil(percentile), math.ceil(one_item))
        return f"Clear: among the {share} % most certain of the {items:,} items in this library"
    return f"Typical: more uncertain than {percentile:.0f} % of the {items:,} items in this library"


PREDICTS = -0.6  # Spearman of R@1 over the sigma deciles at or below which sigma "predicted mistakes" (PCME fig. 6)
DOES_NOT_PREDICT = -0.3  # above this it did not
FEW = 5  # an uncertainty group of fewer validation queries than this gives no figure worth reading (#44)


def calibrated_reading(value: float, curve: UncertaintyCurve | Mapping[str, Any] | None, side: str,
                       split: str) -> str | None:
    """What ``value`` (an item's or a query's uncertainty) meant on the model's validation split: the R@1 of the
    decile it falls in, beside the most and least certain deciles, and whether R@1 fell as sigma rose there.

    ``curve`` is one way of ``metrics.json``'s ``r1_by_uncertainty_decile``
    (:class:`engine.trainercontract.runfolder.TrainerMetrics` ``uncertainty``; its JSON form is parsed):
    ``side`` "photo" reads the i2t curve (a photo's sigma, its captions found first), "clip" the same curve for a
    GIF's or video's sigma (the split's items are photos), "search" the t2i curve (a caption's sigma, its photo
    found first). None when the curve is missing or malformed."""
    if curve is not None and not isinstance(curve, UncertaintyCurve):
        try:
            curve = UncertaintyCurve.from_dict(curve)
        except ReportError:
            return None
    if curve is None:
        return None
    edges, r1, rho, counts = curve.bin_edges, curve.r1, curve.rho_bins, curve.counts
    if len(r1) < 2 or len(edges) != len(r1) + 1:
        return None
    if counts and min(counts) < FEW:
        kind = "searches" if side == "search" else "photos"
        return (f"The model's validation record ({split}) holds only {sum(int(c) for c in counts)} {kind}, "
                f"{min(int(c) for c in counts)} to {max(int(c) for c in counts)} in each of its {len(r1)} "
                "uncertainty groups: too few to say how often items this uncertain are found, or whether more "
                "uncertainty means more misses.")
    tenth = int(np.clip(np.searchsorted(edges[1:-1], value, side="right"), 0, len(r1) - 1))
    what = {"photo": "a photo this uncertain was found first by one of its captions",
            "clip": "a photo as uncertain as this clip was found first by one of its captions",
            "search": "a search this uncertain found its photo first"}[side]
    line = (f"On the model's validation photos ({split}, never trained on), {what} {r1[tenth]:.0f} % of the time "
            f"(uncertainty group {tenth + 1} of {len(r1)}; the most certain group {r1[0]:.0f} %, the least "
            f"{r1[-1]:.0f} %).")
    if not isinstance(rho, int | float) or not math.isfinite(rho):
        return line
    if rho <= PREDICTS:
        return line + f" There, more uncertainty meant more misses (Spearman {rho:+.2f})."
    if rho > DOES_NOT_PREDICT:
        return line + (f" There, uncertainty did not predict misses (Spearman {rho:+.2f}): read it as how "
                       "ambiguous the model finds this, not as a chance of error.")
    return line + f" There, more uncertainty meant somewhat more misses (Spearman {rho:+.2f})."


def significant(value: float, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits ("0.0152", "1.23"): a sigma of 0.0152 never reads "0.015"
    beside a library whose sigmas all round to it."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    decimals = max(0, digits - 1 - int(math.floor(math.log10(abs(value)))))
    return f"{value:.{decimals}f}"


def sigma_text(value: float, library_range: tuple[float, float] | None) -> str:
    """An item's sigma beside the library's range under the same model: "σ 0.0152 (this library: 0.0140 (most
    certain) to 0.0171 (least certain); 38 % of the way)". Without the range, the value alone."""
    if library_range is None:
        return f"σ {significant(value)}"
    low, high = library_range
    span = high - low
    where = (f"; {100.0 * (value - low) / span:.0f} % of the way" if span > 0 else "; every item the same")
    return (f"σ {significant(value)} (this library: {significant(low)} most certain to {significant(high)} least "
            f"certain{where})")


def ellipse_axes(sigma: np.ndarray | None, uncertainty: float | None) -> tuple[float, float] | None:
    """The two half-axes of a 1-sigma ellipse: a 2-D sigma as given, else the scalar uncertainty (or the
    geometric mean of a higher-dimensional sigma) on both axes."""
    if sigma is not None:
        s = np.asarray(sigma, dtype=np.float64).reshape(-1, np.asarray(sigma).shape[-1])[0]
        if s.size == 2:
            return float(s[0]), float(s[1])
        if s.size > 0 and np.all(s > 0):
            g = float(np.exp(np.log(s).mean()))
            return g, g
    if uncertainty is not None:
        return float(uncertainty), float(uncertainty)
    return None


VISIBLE_SHARE = 0.1  # a 1-sigma half-axis smaller than this share of the plot's span draws as a dot
MAX_MAGNIFICATION = 1000.0


def ellipse_magnification(centres: Sequence[np.ndarray], axes: Sequence[tuple[float, float] | None]) -> float | None:
    """The factor the 1-sigma ellipses are drawn at so that the largest is visible: 1 when it already spans
    :data:`VISIBLE_SHARE` of the distance between the means (or of 1 for one point), else the next of 2, 5, 10,
    20, 50, ... that makes it so. None when no sigma is known, or when even :data:`MAX_MAGNIFICATION` would not
    (then the clouds are points at this scale and drawing them says nothing)."""
    sizes = [max(a) for a in axes if a is not None and max(a) > 0]
    if not sizes:
        return None
    points = np.concatenate([np.asarray(c, dtype=np.float64).reshape(-1, 2) for c in centres])
    span = float(np.ptp(points, axis=0).max()) if len(points) > 1 else 0.0
    needed = VISIBLE_SHARE * (span if span > 0 else 1.0) / max(sizes)
    if needed <= 1.0:
        return 1.0
    factor, step = 1.0, 0
    while factor < needed:
        factor *= (2.0, 2.5, 2.0)[step % 3]  # 2, 5, 10, 20, 50, 100, ...
        step += 1
    return factor if factor <= MAX_MAGNIFICATION else None
