"""How sure a difference of rsum between two models on the same set is: a paired bootstrap over the set's items
(standard library and numpy only).

Two models measured on the same items and captions (reports with per-query ranks,
:func:`engine.trainercontract.metrics.retrieval_report` ``per_query``) differ by ``new - old`` rsum. On 24 items
that number moves by tens of points when a few items are swapped for others like them, so the gate states how
far: resample the ITEMS with replacement (an item carries its captions, so its item-to-text query and its captions'
text-to-item queries go together), recompute both models' R@1/5/10 both ways on the resample, and take the
difference of their rsums. The same resample serves both models (paired), so what the items share - easy photos,
vague captions - cancels. :data:`RESAMPLES` resamples with a fixed seed; the interval is the central
:data:`LEVEL` of the differences (percentile bootstrap; Efron & Tibshirani 1993, ch. 13).

The verdict in words: "better" when the whole interval is above 0, "worse" when it is below, else "cannot tell".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.trainercontract.reports import QueryRanks, RetrievalReport

RESAMPLES = 2000
LEVEL = 0.90  # the central share of the resampled differences the interval spans
SEED = 43  # fixed: the same two reports always give the same interval
KS = (1, 5, 10)
BETTER, WORSE, CANNOT_TELL = "better", "worse", "cannot tell"
_BLOCK = 4_000_000  # resampled item indices drawn at once (32 MB of int64)


@dataclass(frozen=True, slots=True)
class RsumInterval:
    """The difference ``new - old`` of rsum on a set and its paired-bootstrap interval
    (:func:`paired_rsum_interval`)."""

    difference: float  # on the set itself
    low: float
    high: float
    resamples: int
    items: int  # the items resampled (those with at least one caption)
    level: float = LEVEL

    @property
    def verdict(self) -> str:
        """"better" (the interval is above 0), "worse" (below 0) or "cannot tell" (it holds 0)."""
        return BETTER if self.low > 0 else WORSE if self.high < 0 else CANNOT_TELL

    def text(self) -> str:
        """"difference +13 (90 % interval -20..+41: cannot tell)"."""
        return (f"difference {self.difference:+.0f} ({100 * self.level:.0f} % interval "
                f"{self.low:+.0f}..{self.high:+.0f}: {self.verdict})")

    def as_dict(self) -> dict[str, Any]:
        """The JSON form (``polyseek retrain --json``'s ``heldout_interval`` / ``pseudo_interval``)."""
        return {"difference": self.difference, "low": self.low, "high": self.high, "level": self.level,
                "resamples": self.resamples, "items": self.items, "verdict": self.verdict}


def _item_hits(ranks: QueryRanks, ks: Sequence[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per item with a caption (in media order): its item-to-text hits summed over ``ks`` (0..len(ks)), its
    captions' text-to-item hits summed over ``ks``, and its number of captions."""
    caption_media = np.asarray(ranks.caption_media, dtype=np.int64)
    t2i, i2t = np.asarray(ranks.t2i, dtype=np.int64), np.asarray(ranks.i2t, dtype=np.int64)
    items, item_of_caption = np.unique(caption_media, return_inverse=True)
    if t2i.shape != caption_media.shape or i2t.shape != items.shape:
        raise ValueError(f"ranks do not fit: {t2i.size} text-to-item ranks for {caption_media.size} captions, "
                         f"{i2t.size} item-to-text ranks for {items.size} captioned items")
    i2t_hits = sum((i2t <= k).astype(np.float64) for k in ks)
    t2i_hits = np.bincount(item_of_caption, weights=sum((t2i <= k).astype(np.float64) for k in ks),
                           minlength=items.size)
    return i2t_hits, t2i_hits, np.bincount(item_of_caption, minlength=items.size).astype(np.float64)


def paired_rsum_interval(old: QueryRanks | Mapping[str, Sequence[int]], new: QueryRanks | Mapping[str, Sequence[int]],
                         resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL,
                         ks: Sequence[int] = KS) -> RsumInterval:
    """The paired-bootstrap interval (module docstring) of ``new - old`` rsum from two models' per-query ranks
    of the same set (a report's ``ranks``, :class:`~engine.trainercontract.metrics.QueryRanks`; its JSON form,
    ``t2i``, ``i2t``, ``caption_media``, is parsed)."""
    old = old if isinstance(old, QueryRanks) else QueryRanks.from_dict(old)
    new = new if isinstance(new, QueryRanks) else QueryRanks.from_dict(new)
    if old.caption_media != new.caption_media:
        raise ValueError("the two models were not measured on the same captions")
    old_i2t, old_t2i, captions = _item_hits(old, ks)
    new_i2t, new_t2i, _ = _item_hits(new, ks)
    n = captions.size
    if n == 0:
        raise ValueError("no captioned item to resample")
    d_i2t, d_t2i = new_i2t - old_i2t, new_t2i - old_t2i  # per item, summed over ks

    def rsum_difference(picked: np.ndarray) -> np.ndarray:  # picked: (resamples, n) item indices
        return 100.0 * (d_i2t[picked].sum(axis=1) / n + d_t2i[picked].sum(axis=1) / captions[picked].sum(axis=1))

    rng = np.random.default_rng(seed)
    step = max(1, _BLOCK // n)
    differences = np.concatenate([rsum_difference(rng.integers(0, n, size=(min(step, resamples - start), n)))
                                  for start in range(0, resamples, step)])
    low, high = np.percentile(differences, [50 * (1 - level), 50 * (1 + level)])
    point = float(rsum_difference(np.arange(n)[None, :])[0])
    return RsumInterval(point, float(low), float(high), int(resamples), int(n), float(level))


def report_interval(old: RetrievalReport | Mapping[str, Any] | None,
                    new: RetrievalReport | Mapping[str, Any] | None) -> RsumInterval | None:
    """:func:`paired_rsum_interval` of two retrieval reports (their JSON form is parsed), or None unless both carry
    per-query ranks of the same set (the same captions of the same items, searched among as many distractors)."""
    if not old or not new:
        return None
    old, new = RetrievalReport.from_dict(old), RetrievalReport.from_dict(new)
    if old.ranks is None or new.ranks is None:
        return None
    same = (old.ranks.caption_media == new.ranks.caption_media and len(old.ranks.i2t) == len(new.ranks.i2t)
            and old.n_media == new.n_media and (old.n_distractors or 0) == (new.n_distractors or 0))
    return paired_rsum_interval(old.ranks, new.ranks) if same else None


def intervals_line(heldout: RsumInterval | None, pseudo: RsumInterval | None) -> str:
    """The two measures' intervals in one line for a person ("" when neither was measured): "new - old rsum,
    paired bootstrap over the items: held-aside annotations (24 items) difference +13 (90 % interval -20..+41:
    cannot tell); pseudo pairs (300 items) ..."."""
    parts = [f"{where} ({interval.items} item{'s' if interval.items != 1 else ''}) {interval.text()}"
             for where, interval in (("held-aside annotations", heldout), ("pseudo pairs", pseudo))
             if interval is not None]
    return f"new - old rsum, paired bootstrap over the items: {'; '.join(parts)}" if parts else ""
