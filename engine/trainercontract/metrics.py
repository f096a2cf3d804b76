"""Cross-modal retrieval metrics (numpy only).

Conventions shared by every function here:

- ``S`` is the similarity matrix, shape ``(n_media, n_captions)``, higher means more similar; it may be
  a ``np.memmap`` - rows are read in chunks of about :data:`CHUNK_BYTES`, never all at once.
- ``caption_to_media[c]`` is the index of the one media that caption ``c`` describes.
- Ranks are 1-based. **Ties are pessimistic**: a wrong candidate whose score equals the correct one's is
  ranked before it, so a model that gives every candidate the same score gets the worst rank, never the
  best. ``rank = 1 + #(wrong candidates scoring >= the correct one)``.
- i2t (media query -> captions): a media query is right when any of its captions is retrieved, so its
  rank is that of its first-ranked correct caption. Media with no caption are candidates for t2i but not
  i2t queries: ``ranks_i2t`` returns one rank per media that has at least one caption, in media order.
- Recall values are percentages (0-100). NaN or infinite scores are rejected with ``ValueError``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.trainercontract.reports import ReportError, RetrievalReport, read_number

CHUNK_BYTES = 64 * 1024 * 1024  # working memory for one block of comparisons

SimilarityFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _check(S: np.ndarray, caption_to_media: np.ndarray) -> np.ndarray:
    """Validate shapes and return ``caption_to_media`` as an int64 array."""
    if S.ndim != 2:
        raise ValueError(f"similarity matrix must be 2-D (n_media, n_captions), got shape {S.shape}")
    c2m = np.asarray(caption_to_media, dtype=np.int64)
    if c2m.shape != (S.shape[1],):
        raise ValueError(f"caption_to_media has shape {c2m.shape}, expected ({S.shape[1]},) for S {S.shape}")
    if c2m.size and (c2m.min() < 0 or c2m.max() >= S.shape[0]):
        raise ValueError(f"caption_to_media holds media indices outside 0..{S.shape[0] - 1}")
    return c2m


def _row_blocks(n_rows: int, n_cols: int) -> Iterator[tuple[int, int]]:
    """``(start, stop)`` row ranges whose ``rows x n_cols`` float64 comparisons fit in CHUNK_BYTES."""
    step = max(1, CHUNK_BYTES // (16 * max(1, n_cols)))
    for start in range(0, n_rows, step):
        yield start, min(n_rows, start + step)


def _block(S: np.ndarray, start: int, stop: int) -> np.ndarray:
    block = np.asarray(S[start:stop], dtype=np.float64)
    if not np.isfinite(block).all():
        raise ValueError(f"similarity matrix has NaN or infinite values in rows {start}..{stop - 1}")
    return block


def _positive_scores(S: np.ndarray, c2m: np.ndarray) -> np.ndarray:
    """``S[caption_to_media[c], c]`` for every caption ``c``."""
    return np.asarray(S[c2m, np.arange(c2m.size)], dtype=np.float64)


def ranks_i2t(S: np.ndarray, caption_to_media: np.ndarray) -> np.ndarray:
    """Rank (1-based, pessimistic ties) of each media query's first-ranked correct caption.

    Returns one rank per media that has at least one caption, in media order.
    """
    c2m = _check(S, caption_to_media)
    n_media = S.shape[0]
    positive = _positive_scores(S, c2m)
    best = np.full(n_media, -np.inf)
    np.maximum.at(best, c2m, positive)
    # captions of the same media that tie with its best one are correct, so they do not count as wrong
    n_tied_correct = np.bincount(c2m[positive == best[c2m]], minlength=n_media)
    ranks = np.empty(n_media, dtype=np.int64)
    for start, stop in _row_blocks(n_media, S.shape[1]):
        n_ge = (_block(S, start, stop) >= best[start:stop, None]).sum(axis=1)
        ranks[start:stop] = 1 + n_ge - n_tied_correct[start:stop]
    return ranks[np.bincount(c2m, minlength=n_media) > 0]


def ranks_t2i(S: np.ndarray, caption_to_media: np.ndarray) -> np.ndarray:
    """Rank (1-based, pessimistic ties) of each caption query's media among all media."""
    c2m = _check(S, caption_to_media)
    positive = _positive_scores(S, c2m)
    n_ge = np.zeros(c2m.size, dtype=np.int64)
    for start, stop in _row_blocks(S.shape[0], S.shape[1]):
        n_ge += (_block(S, start, stop) >= positive[None, :]).sum(axis=0)
    return n_ge  # the correct media itself is among the >= scores: 1 + (n_ge - 1)


def recall_at(ranks: np.ndarray, k: int) -> float:
    """R@k: percentage of queries whose correct item is within the top ``k``."""
    ranks = np.asarray(ranks)
    if ranks.size == 0:
        raise ValueError("recall_at needs at least one rank")
    return float(100.0 * np.mean(ranks <= k))


def median_rank(ranks: np.ndarray) -> float:
    """Med R: the median rank, floored to an integer as in the VSE++/PVSE tables."""
    if np.size(ranks) == 0:
        raise ValueError("median_rank needs at least one rank")
    return float(np.floor(np.median(ranks)))


def mean_rank(ranks: np.ndarray) -> float:
    """Mean R: the mean rank."""
    if np.size(ranks) == 0:
        raise ValueError("mean_rank needs at least one rank")
    return float(np.mean(ranks))


def normalized_median_rank(ranks: np.ndarray, n_candidates: int) -> float:
    """nMR (PVSE section 5): the median rank divided by the number of candidates ranked per query."""
    if n_candidates <= 0:
        raise ValueError(f"n_candidates must be positive, got {n_candidates}")
    return median_rank(ranks) / n_candidates


def _direction(ranks: np.ndarray, n_candidates: int, ks: Sequence[int]) -> dict[str, float]:
    report = {f"r{k}": recall_at(ranks, k) for k in ks}
    report.update(medr=median_rank(ranks), meanr=mean_rank(ranks),
                  nmr=normalized_median_rank(ranks, n_candidates))
    return report


def retrieval_report(S: np.ndarray, caption_to_media: np.ndarray, ks: Sequence[int] = (1, 5, 10),
                     distractors: np.ndarray | None = None, per_query: bool = False) -> dict:
    """The ``evaluate --json`` record: R@k, medr, meanr, nmr both ways, rsum, n_media, n_captions.

    ``rsum`` is the sum of every R@k of both directions. Values are plain Python floats and ints.
    ``distractors`` (D, n_captions): scores of the captions against D more media that none of them describes;
    text-to-media then ranks each caption's media among all n_media + D (a small evaluation set searched inside
    a library, as a user searches), media-to-text is unchanged; the report adds ``n_distractors``.
    ``per_query`` (off by default: not part of ``evaluate --json``): the report adds ``ranks`` =
    ``{"t2i": [one rank per caption], "i2t": [one rank per media with a caption, in media order],
    "caption_media": caption_to_media}``, so two reports of the same set (same media and captions, same order)
    compare query by query (:mod:`engine.loop.interval`).
    """
    i2t_ranks = ranks_i2t(S, caption_to_media)
    i2t = _direction(i2t_ranks, S.shape[1], ks)
    gallery = S if distractors is None or not len(distractors) else np.vstack([S, distractors])
    t2i_ranks = ranks_t2i(gallery, caption_to_media)
    t2i = _direction(t2i_ranks, gallery.shape[0], ks)
    rsum = sum(i2t[f"r{k}"] + t2i[f"r{k}"] for k in ks)
    report = {"i2t": i2t, "t2i": t2i, "rsum": float(rsum), "n_media": int(S.shape[0]),
              "n_captions": int(S.shape[1])}
    if distractors is not None:
        report["n_distractors"] = int(len(distractors))
    if per_query:
        report["ranks"] = {"t2i": t2i_ranks.tolist(), "i2t": i2t_ranks.tolist(),
                           "caption_media": np.asarray(caption_to_media, dtype=np.int64).tolist()}
    return report


def measure(S: np.ndarray, caption_to_media: np.ndarray, ks: Sequence[int] = (1, 5, 10),
            distractors: np.ndarray | None = None, per_query: bool = False) -> RetrievalReport:
    """:func:`retrieval_report`, typed (:class:`RetrievalReport`)."""
    return RetrievalReport.from_dict(retrieval_report(S, caption_to_media, ks, distractors, per_query))


def five_fold_1k(
    similarity: np.ndarray | SimilarityFn,
    caption_to_media: np.ndarray,
    n_media: int | None = None,
    fold_size: int = 1000,
    ks: Sequence[int] = (1, 5, 10),
) -> dict:
    """The COCO 1K protocol: :func:`retrieval_report` averaged over consecutive folds of ``fold_size`` media.

    ``similarity`` is the full ``S`` or a function ``(media_indices, caption_indices) -> S block`` (so the
    5K x 25K matrix never has to exist; then ``n_media`` is required). Fold ``f`` holds media
    ``f*fold_size .. (f+1)*fold_size-1`` and their captions. ``n_media`` must be a multiple of
    ``fold_size``. The result has the report's keys (every number averaged) plus ``n_folds``.
    """
    c2m = np.asarray(caption_to_media, dtype=np.int64)
    if n_media is None:
        if callable(similarity):
            raise ValueError("five_fold_1k needs n_media when given a similarity function")
        n_media = similarity.shape[0]
    if n_media < fold_size or n_media % fold_size:
        raise ValueError(f"{n_media} media do not split into folds of {fold_size}")
    reports = []
    for start in range(0, n_media, fold_size):
        media = np.arange(start, start + fold_size)
        captions = np.flatnonzero((c2m >= start) & (c2m < start + fold_size))
        if callable(similarity):
            block = similarity(media, captions)
        else:
            block = np.asarray(similarity[start:start + fold_size])[:, captions]
        reports.append(retrieval_report(np.asarray(block), c2m[captions] - start, ks))
    averaged = _average_reports(reports)
    averaged["n_folds"] = len(reports)
    return averaged


def _average_reports(reports: list[dict]) -> dict:
    first = reports[0]
    out: dict = {}
    for key, value in first.items():
        if isinstance(value, dict):
            out[key] = _average_reports([r[key] for r in reports])
        else:
            mean = float(np.mean([r[key] for r in reports]))
            out[key] = int(round(mean)) if isinstance(value, int) else mean
    return out


# ---------------------------------------------------------------- R-Precision (PCME section 4.1.1)


RelevanceFn = Callable[[int, int], np.ndarray]


def _r_precision_rows(S: np.ndarray, relevant_fn: RelevanceFn) -> np.ndarray:
    """R-Precision of each row of ``S`` as a query; ``relevant_fn(start, stop)`` is the rows' relevance.

    With R relevant candidates, the score is (relevant among the top R) / R. Pessimistic ties: among
    candidates tied with the R-th score, irrelevant ones fill the top R first. Rows with R = 0 are NaN.
    """
    n_rows, n_cols = S.shape
    out = np.empty(n_rows)
    for start, stop in _row_blocks(n_rows, n_cols):
        block, relevant = _block(S, start, stop), relevant_fn(start, stop)
        r = relevant.sum(axis=1)
        kth = np.maximum(r - 1, 0)
        # partitioning at every distinct R in the block places each row's R-th largest score at R - 1
        ordered = -np.partition(-block, np.unique(kth), axis=1)
        threshold = np.take_along_axis(ordered, kth[:, None], axis=1)
        above, tied = block > threshold, block == threshold
        n_above = above.sum(axis=1)
        tied_wrong = (tied & ~relevant).sum(axis=1)
        tied_right = (tied & relevant).sum(axis=1)
        hits = (above & relevant).sum(axis=1) + np.clip(r - n_above - tied_wrong, 0, tied_right)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[start:stop] = np.where(r > 0, hits / r, np.nan)
    return out


def _mean_percent(values: np.ndarray, what: str) -> float:
    if np.isnan(values).all():
        raise ValueError(f"no {what} query has a relevant candidate")
    return float(100 * np.nanmean(values))


def _i2t_truth(c2m: np.ndarray) -> RelevanceFn:
    return lambda a, b: c2m[None, :] == np.arange(a, b)[:, None]


def _t2i_truth(c2m: np.ndarray, n_media: int) -> RelevanceFn:
    return lambda a, b: c2m[a:b, None] == np.arange(n_media)[None, :]


def _plausible(query_labels: np.ndarray, candidate_labels: np.ndarray, zeta: int,
               truth: RelevanceFn) -> RelevanceFn:
    """Relevant = a ground-truth pair, or label vectors that differ in at most ``zeta`` positions."""
    return lambda a, b: (_hamming(query_labels[a:b], candidate_labels) <= zeta) | truth(a, b)


def r_precision(S: np.ndarray, caption_to_media: np.ndarray) -> dict[str, float]:
    """Mean R-Precision (PCME section 4.1.1, after Musgrave et al.) in percent, both directions.

    For a query with R ground-truth matches (its captions for a media query; R = 1 for a caption
    query, where R-P equals R@1), the fraction of the top-R retrieved candidates that are matches.
    Returns ``{"i2t", "t2i"}``; media without captions are skipped as i2t queries.
    """
    c2m = _check(S, caption_to_media)
    i2t = _r_precision_rows(S, _i2t_truth(c2m))
    t2i = _r_precision_rows(_Transposed(S), _t2i_truth(c2m, S.shape[0]))
    return {"i2t": _mean_percent(i2t, "i2t"), "t2i": _mean_percent(t2i, "t2i")}


def plausible_match_r_precision(
    S: np.ndarray,
    caption_to_media: np.ndarray,
    media_labels: np.ndarray,
    caption_labels: np.ndarray | None = None,
    zetas: Sequence[int] = (0, 1, 2),
) -> dict[str, float]:
    """PMRP (PCME section 4.1.1): R-Precision where plausible pairs also count as matches, in percent.

    A (media, caption) pair is relevant when it is a ground-truth pair or when their binary label
    vectors (e.g. COCO class labels) differ in at most ``zeta`` positions; the R-Precision is averaged
    over ``zetas`` (PCME uses 0, 1, 2). ``caption_labels`` defaults to the labels of each caption's media.
    """
    c2m = _check(S, caption_to_media)
    media_labels = np.asarray(media_labels).astype(bool)
    if media_labels.ndim != 2 or media_labels.shape[0] != S.shape[0]:
        raise ValueError(f"media_labels must be ({S.shape[0]}, n_labels), got {media_labels.shape}")
    caption_labels = media_labels[c2m] if caption_labels is None else np.asarray(caption_labels).astype(bool)
    if caption_labels.shape != (S.shape[1], media_labels.shape[1]):
        raise ValueError(f"caption_labels must be {(S.shape[1], media_labels.shape[1])}, "
                         f"got {caption_labels.shape}")
    media_f, caption_f = media_labels.astype(np.float32), caption_labels.astype(np.float32)
    i2t_truth, t2i_truth, S_t = _i2t_truth(c2m), _t2i_truth(c2m, S.shape[0]), _Transposed(S)
    i2t = [_mean_percent(_r_precision_rows(S, _plausible(media_f, caption_f, z, i2t_truth)), "i2t")
           for z in zetas]
    t2i = [_mean_percent(_r_precision_rows(S_t, _plausible(caption_f, media_f, z, t2i_truth)), "t2i")
           for z in zetas]
    return {"i2t": float(np.mean(i2t)), "t2i": float(np.mean(t2i))}


def _hamming(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pairwise Hamming distances between rows of two 0/1 float matrices."""
    return a.sum(1)[:, None] + b.sum(1)[None, :] - 2 * (a @ b.T)


class _Transposed:
    """``S.T`` read in row blocks without copying the whole matrix (works for memmaps too)."""

    def __init__(self, S: np.ndarray) -> None:
        self._S = S
        self.shape = (S.shape[1], S.shape[0])
        self.ndim = 2

    def __getitem__(self, rows: slice) -> np.ndarray:
        return np.asarray(self._S[:, rows]).T


# ---------------------------------------------------------------- uncertainty analysis (PCME fig. 6-7)


@dataclass(frozen=True, slots=True)
class UncertaintyCurve:
    """R@1 of the queries binned by uncertainty, lowest uncertainty first.

    ``rho_bins`` is the Spearman correlation between bin order and bin R@1 (negative when R@1 falls as
    uncertainty rises, PCME fig. 6); ``rho_queries`` is the Spearman correlation between each query's
    uncertainty and its rank (positive when uncertain queries rank worse).
    """

    r1: list[float]
    bin_edges: list[float]  # n_bins + 1 uncertainty values: min, the upper end of each bin
    counts: list[int]
    rho_bins: float
    rho_queries: float

    def as_dict(self) -> dict:
        """The JSON form used by ``evaluate --json``."""
        return {"r1": self.r1, "bin_edges": self.bin_edges, "counts": self.counts,
                "rho_bins": self.rho_bins, "rho_queries": self.rho_queries}

    @classmethod
    def from_dict(cls, data: Any, where: str = "curve") -> UncertaintyCurve:
        """The curve's JSON form read back (``metrics.json``'s ``r1_by_uncertainty_decile``: one per direction);
        a ``rho`` the trainer wrote as null (NaN is not JSON) reads as NaN; :class:`ReportError` otherwise."""
        if not isinstance(data, Mapping):
            raise ReportError(f"{where}: expected an object, got {data!r}")
        lists = []
        for key in ("r1", "bin_edges", "counts"):
            value = data.get(key, [] if key == "counts" else None)
            if not isinstance(value, list) or not all(isinstance(v, int | float) and not isinstance(v, bool)
                                                      for v in value):
                raise ReportError(f"{where}.{key}: expected a list of numbers")
            lists.append(value)
        r1, edges, counts = lists
        if len(edges) != len(r1) + 1:
            raise ReportError(f"{where}: {len(edges)} bin edges for {len(r1)} bins")

        def rho(key: str) -> float:
            value = data.get(key)
            if value is None:
                return float("nan")
            return read_number(data, key, f"{where}.")

        return cls([float(v) for v in r1], [float(v) for v in edges], [int(v) for v in counts], rho("rho_bins"),
                   rho("rho_queries"))


def recall_by_uncertainty_decile(
    ranks: np.ndarray, uncertainty: np.ndarray, n_bins: int = 10
) -> UncertaintyCurve:
    """R@1 per uncertainty bin (deciles by default) of the queries, as in PCME fig. 6.

    Queries are sorted by uncertainty (stable, so equal uncertainties keep query order) and cut into
    ``n_bins`` groups whose sizes differ by at most one.
    """
    ranks, uncertainty = np.asarray(ranks), np.asarray(uncertainty, dtype=np.float64)
    if ranks.shape != uncertainty.shape or ranks.ndim != 1:
        raise ValueError(f"ranks {ranks.shape} and uncertainty {uncertainty.shape} must be equal 1-D shapes")
    if not 1 <= n_bins <= ranks.size:
        raise ValueError(f"cannot cut {ranks.size} queries into {n_bins} bins")
    order = np.argsort(uncertainty, kind="stable")
    bins = np.array_split(order, n_bins)
    r1 = [recall_at(ranks[b], 1) for b in bins]
    edges = [float(uncertainty[order[0]])] + [float(uncertainty[b[-1]]) for b in bins]
    return UncertaintyCurve(r1, edges, [len(b) for b in bins], spearman_rho(np.arange(n_bins), np.array(r1)),
                            spearman_rho(uncertainty, ranks))


def spearman_rho(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rank correlation (average ranks for ties); NaN when either side is constant."""
    rx, ry = _average_ranks(np.asarray(x, dtype=np.float64)), _average_ranks(np.asarray(y, dtype=np.float64))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = np.sqrt((rx * rx).sum() * (ry * ry).sum())
    return float((rx * ry).sum() / denominator) if denominator > 0 else float("nan")


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks where tied values share the mean of the ranks they span."""
    order = np.argsort(values, kind="stable")
    sorted_values = values[order]
    starts = np.flatnonzero(np.r_[True, sorted_values[1:] != sorted_values[:-1]])
    ends = np.r_[starts[1:], values.size]
    ranks = np.empty(values.size)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def rounded(value: Any, digits: int = 4) -> Any:
    """A report with every float rounded to ``digits`` decimals (stable, readable JSON output)."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    return value


def report_lines(report: RetrievalReport | Mapping[str, Any]) -> list[str]:
    """A retrieval report (:class:`RetrievalReport`, or :func:`retrieval_report`'s record) as three lines for a
    terminal."""
    if isinstance(report, RetrievalReport):
        report = report.as_dict()
    lines = [f"{way}: R@1 {report[way]['r1']:.1f}  R@5 {report[way]['r5']:.1f}  R@10 {report[way]['r10']:.1f}  "
             f"medr {report[way]['medr']}" for way in ("i2t", "t2i")]
    extra = f", similarity: {report['similarity']}" if "similarity" in report else ""
    lines.append(f"rsum {report['rsum']:.1f}  ({report['n_media']} media, {report['n_captions']} captions{extra})")
    return lines
