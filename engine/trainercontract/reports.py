"""The typed retrieval report (:class:`RetrievalReport`: one :class:`Recall` per direction, each query's
:class:`QueryRanks`) that :func:`engine.trainercontract.metrics.retrieval_report` writes as JSON (``evaluate --json``,
a run folder's ``metrics.json``), read back with the entry at fault named (:class:`ReportError`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np


class ReportError(ValueError):
    """A retrieval report (``evaluate --json``, ``metrics.json``) that does not have the shape
    :func:`retrieval_report` writes; says which entry."""


def read_number(data: Mapping[str, Any], key: str, where: str) -> float:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ReportError(f"{where}{key}: expected a number, got {value!r}")
    return float(value)


def read_count(data: Mapping[str, Any], key: str, where: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int | float) or not np.isfinite(value) \
            or value != int(value) or value < 0:
        raise ReportError(f"{where}{key}: expected a count, got {value!r}")
    return int(value)


def read_optional(data: Mapping[str, Any], key: str, kind: type, where: str) -> Any:
    value = data.get(key)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and kind is not bool):
        raise ReportError(f"{where}{key}: expected {kind.__name__}, got {value!r}")
    return value


_RANK_FIELDS = ("medr", "meanr", "nmr")


@dataclass(frozen=True, slots=True)
class Recall:
    """One direction of a retrieval report (``report["i2t"]`` / ``["t2i"]``): R@1/5/10 in percent, the median
    and mean rank, nMR. ``others`` keeps any other R@K a report carries (``r50``), in its order."""

    r1: float
    r5: float
    r10: float
    medr: float | None = None
    meanr: float | None = None
    nmr: float | None = None
    others: tuple[tuple[str, float], ...] = ()

    @property
    def recall_sum(self) -> float:
        """R@1 + R@5 + R@10 (this direction's share of rsum)."""
        return self.r1 + self.r5 + self.r10

    @classmethod
    def from_dict(cls, data: Any, where: str = "") -> Recall:
        """A direction's record as :func:`retrieval_report` writes it; :class:`ReportError` otherwise."""
        if not isinstance(data, Mapping):
            raise ReportError(f"{where}: expected an object of R@K, got {data!r}")
        where = f"{where}." if where else ""
        ranks = {k: read_number(data, k, where) if data.get(k) is not None else None for k in _RANK_FIELDS}
        others = tuple((k, read_number(data, k, where)) for k in data
                       if k not in ("r1", "r5", "r10", *_RANK_FIELDS) and k.startswith("r") and k[1:].isdigit())
        return cls(read_number(data, "r1", where), read_number(data, "r5", where), read_number(data, "r10", where),
                   **ranks, others=others)

    def as_dict(self) -> dict[str, float]:
        """The record in :func:`retrieval_report`'s form and order."""
        out = {"r1": self.r1, "r5": self.r5, "r10": self.r10, **dict(self.others)}
        out.update({k: v for k in _RANK_FIELDS if (v := getattr(self, k)) is not None})
        return out


@dataclass(frozen=True, slots=True)
class QueryRanks:
    """Each query's rank (a report's ``ranks``, :func:`retrieval_report` ``per_query``): ``t2i`` one per caption,
    ``i2t`` one per media with a caption (media order), ``caption_media`` each caption's media."""

    t2i: tuple[int, ...]
    i2t: tuple[int, ...]
    caption_media: tuple[int, ...]

    @classmethod
    def from_dict(cls, data: Any, where: str = "ranks") -> QueryRanks:
        if not isinstance(data, Mapping):
            raise ReportError(f"{where}: expected an object, got {data!r}")
        lists = []
        for key in ("t2i", "i2t", "caption_media"):
            value = data.get(key)
            if not isinstance(value, list | tuple) or not all(isinstance(v, int) for v in value):
                raise ReportError(f"{where}.{key}: expected a list of integers")
            lists.append(tuple(int(v) for v in value))
        return cls(*lists)

    def as_dict(self) -> dict[str, list[int]]:
        return {"t2i": list(self.t2i), "i2t": list(self.i2t), "caption_media": list(self.caption_media)}


# the keys a report's typed fields hold, in :func:`retrieval_report`'s order and then the evaluation's
_REPORT_FIELDS = ("i2t", "t2i", "rsum", "n_media", "n_captions", "n_distractors", "ranks", "model", "method",
                  "split", "n_failed")


@dataclass(frozen=True, slots=True)
class RetrievalReport:
    """A retrieval report, typed: what :func:`retrieval_report` measures (``i2t``, ``t2i``, ``rsum``, the set's
    size, per-query ``ranks`` on request) and what an evaluation adds (the ``model`` and its ``method``, the
    ``split``, ``n_failed`` media that could not be read). ``extra`` keeps, verbatim and in order, every other
    entry a writer put in the record (the trainer's ``r_precision``, ``similarity``...), so :meth:`as_dict` gives
    back the JSON record it was read from (``evaluate --json``, ``retrain --json``'s ``before`` / ``after``)."""

    i2t: Recall
    t2i: Recall
    rsum: float
    n_media: int
    n_captions: int
    n_distractors: int | None = None  # more media each caption's media was ranked among (text-to-media)
    ranks: QueryRanks | None = None
    model: str | None = None
    method: str | None = None
    split: str | None = None
    n_failed: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Any, where: str = "report") -> RetrievalReport:
        """Parse a report in its JSON form; :class:`ReportError` names the entry that does not fit."""
        if isinstance(data, RetrievalReport):
            return data
        if not isinstance(data, Mapping):
            raise ReportError(f"{where}: expected a retrieval report (an object), got {type(data).__name__}")
        at = f"{where}."
        ranks = data.get("ranks")
        distractors = data.get("n_distractors")
        failed = data.get("n_failed")
        return cls(
            Recall.from_dict(data.get("i2t"), f"{where}.i2t"), Recall.from_dict(data.get("t2i"), f"{where}.t2i"),
            read_number(data, "rsum", at), read_count(data, "n_media", at), read_count(data, "n_captions", at),
            read_count(data, "n_distractors", at) if distractors is not None else None,
            QueryRanks.from_dict(ranks, f"{where}.ranks") if ranks is not None else None,
            read_optional(data, "model", str, at), read_optional(data, "method", str, at),
            read_optional(data, "split", str, at),
            read_count(data, "n_failed", at) if failed is not None else None,
            {k: v for k, v in data.items() if k not in _REPORT_FIELDS})

    def as_dict(self) -> dict[str, Any]:
        """The JSON record (the form it was read from; :func:`rounded` rounds it for output)."""
        out: dict[str, Any] = {"i2t": self.i2t.as_dict(), "t2i": self.t2i.as_dict(), "rsum": self.rsum,
                               "n_media": self.n_media, "n_captions": self.n_captions}
        if self.n_distractors is not None:
            out["n_distractors"] = self.n_distractors
        if self.ranks is not None:
            out["ranks"] = self.ranks.as_dict()
        for key in ("model", "method", "split", "n_failed"):
            if (value := getattr(self, key)) is not None:
                out[key] = value
        out.update(self.extra)
        return out

    @property
    def mean_r10(self) -> float:
        """The mean of item-to-text and text-to-item R@10."""
        return 0.5 * (self.i2t.r10 + self.t2i.r10)

    def without_ranks(self) -> RetrievalReport:
        """The report without its per-query ranks."""
        return replace(self, ranks=None) if self.ranks is not None else self

    def evaluated(self, model: str | None = None, method: str | None = None, split: str | None = None,
                  n_failed: int | None = None) -> RetrievalReport:
        """The report with what an evaluation adds (each field given replaces the report's)."""
        given = {k: v for k, v in (("model", model), ("method", method), ("split", split), ("n_failed", n_failed))
                 if v is not None}
        return replace(self, **given)
