"""Retrieval metrics against naive Python-loop references on tiny seeded matrices."""

from __future__ import annotations

import json

import numpy as np
import pytest
from scipy.stats import spearmanr

from engine.trainercontract import metrics
from engine.trainercontract.metrics import (
    five_fold_1k,
    mean_rank,
    median_rank,
    normalized_median_rank,
    plausible_match_r_precision,
    r_precision,
    ranks_i2t,
    ranks_t2i,
    recall_at,
    recall_by_uncertainty_decile,
    retrieval_report,
    spearman_rho,
)

# ---------------------------------------------------------------- naive references


def pessimistic_order(scores: list[float], relevant: set[int]) -> list[int]:
    """Candidates best first; among equal scores the irrelevant ones come first."""
    return sorted(range(len(scores)), key=lambda c: (-scores[c], c in relevant))


def naive_i2t(S: np.ndarray, c2m: list[int]) -> list[int]:
    ranks = []
    for i in range(S.shape[0]):
        relevant = {c for c, m in enumerate(c2m) if m == i}
        if relevant:
            order = pessimistic_order(list(S[i]), relevant)
            ranks.append(next(pos for pos, c in enumerate(order, 1) if c in relevant))
    return ranks


def naive_t2i(S: np.ndarray, c2m: list[int]) -> list[int]:
    return [pessimistic_order(list(S[:, c]), {c2m[c]}).index(c2m[c]) + 1 for c in range(S.shape[1])]


def naive_r_precision(rows: np.ndarray, relevance: np.ndarray) -> float:
    values = []
    for scores, rel in zip(rows, relevance, strict=True):
        relevant = {int(c) for c in np.flatnonzero(rel)}
        if relevant:
            top = pessimistic_order(list(scores), relevant)[: len(relevant)]
            values.append(sum(c in relevant for c in top) / len(relevant))
    return 100 * sum(values) / len(values)


def random_case(seed: int, n_media: int, captions_per_media: int, levels: int | None = None):
    """A seeded (S, caption_to_media); ``levels`` makes integer scores so ties are frequent."""
    rng = np.random.default_rng(seed)
    c2m = rng.permutation(np.repeat(np.arange(n_media), captions_per_media))
    shape = (n_media, c2m.size)
    S = rng.integers(0, levels, shape).astype(np.float32) if levels else rng.standard_normal(shape)
    return S, c2m


CASES = [(seed, n, k, levels) for seed in range(3) for n, k in [(1, 1), (1, 4), (7, 1), (9, 5), (12, 3)]
         for levels in (None, 3)]


# ---------------------------------------------------------------- ranks


@pytest.mark.parametrize("seed,n_media,per_media,levels", CASES)
def test_ranks_match_naive_reference(seed, n_media, per_media, levels):
    S, c2m = random_case(seed, n_media, per_media, levels)
    assert ranks_i2t(S, c2m).tolist() == naive_i2t(S, c2m.tolist())
    assert ranks_t2i(S, c2m).tolist() == naive_t2i(S, c2m.tolist())


def test_perfect_scores_give_rank_one():
    c2m = np.array([0, 0, 1, 2, 2, 2])
    S = (c2m[None, :] == np.arange(3)[:, None]).astype(float)
    assert ranks_i2t(S, c2m).tolist() == [1, 1, 1]
    assert ranks_t2i(S, c2m).tolist() == [1] * 6


def test_all_equal_scores_are_pessimistic():
    c2m = np.array([0, 0, 1, 1, 2, 2])
    S = np.zeros((3, 6))
    # each media has 4 wrong captions tied with its correct ones: rank 5; each caption has 2 wrong media
    assert ranks_i2t(S, c2m).tolist() == [5, 5, 5]
    assert ranks_t2i(S, c2m).tolist() == [3] * 6


def test_media_without_captions_are_only_candidates():
    c2m = np.array([0, 2])
    S = np.array([[0.9, 0.1], [0.8, 0.95], [0.2, 0.5]])
    assert ranks_i2t(S, c2m).tolist() == [1, 1]  # media 0 and 2 are queries, media 1 is not
    assert ranks_t2i(S, c2m).tolist() == [1, 2]  # media 1 outranks media 2 for caption 1


def test_chunked_and_memmap_input_give_same_ranks(tmp_path, monkeypatch):
    S, c2m = random_case(5, 30, 5, levels=4)
    expected_i2t, expected_t2i = ranks_i2t(S, c2m), ranks_t2i(S, c2m)
    mm = np.lib.format.open_memmap(tmp_path / "s.npy", mode="w+", dtype=np.float32, shape=S.shape)
    mm[:] = S
    monkeypatch.setattr(metrics, "CHUNK_BYTES", 16 * S.shape[1] * 4)  # 4 rows per block
    assert np.array_equal(ranks_i2t(mm, c2m), expected_i2t)
    assert np.array_equal(ranks_t2i(mm, c2m), expected_t2i)
    assert r_precision(mm, c2m) == r_precision(S, c2m)


def test_bad_inputs_are_rejected():
    S = np.zeros((2, 3))
    with pytest.raises(ValueError, match="caption_to_media has shape"):
        ranks_i2t(S, np.array([0, 1]))
    with pytest.raises(ValueError, match="outside"):
        ranks_t2i(S, np.array([0, 1, 2]))
    with pytest.raises(ValueError, match="NaN"):
        ranks_t2i(np.array([[np.nan, 0.0, 0.0], [0.0, 0.0, 0.0]]), np.array([0, 1, 1]))
    with pytest.raises(ValueError, match="2-D"):
        ranks_i2t(np.zeros(3), np.array([0, 0, 0]))


# ---------------------------------------------------------------- summaries


def test_recall_and_rank_summaries():
    ranks = np.array([1, 2, 3, 10, 11, 40])
    assert recall_at(ranks, 1) == pytest.approx(100 / 6)
    assert recall_at(ranks, 10) == pytest.approx(400 / 6)
    assert median_rank(ranks) == 6.0  # floor(6.5)
    assert mean_rank(ranks) == pytest.approx(67 / 6)
    assert normalized_median_rank(ranks, 100) == pytest.approx(0.06)
    with pytest.raises(ValueError):
        recall_at(np.array([]), 1)


def test_retrieval_report_shape_and_values():
    S, c2m = random_case(1, 10, 5)
    report = retrieval_report(S, c2m)
    assert set(report) == {"i2t", "t2i", "rsum", "n_media", "n_captions"}
    assert set(report["i2t"]) == set(report["t2i"]) == {"r1", "r5", "r10", "medr", "meanr", "nmr"}
    i2t, t2i = naive_i2t(S, c2m.tolist()), naive_t2i(S, c2m.tolist())
    assert report["i2t"]["r5"] == pytest.approx(100 * np.mean(np.array(i2t) <= 5))
    assert report["t2i"]["meanr"] == pytest.approx(np.mean(t2i))
    assert report["i2t"]["nmr"] == pytest.approx(report["i2t"]["medr"] / 50)
    assert report["t2i"]["nmr"] == pytest.approx(report["t2i"]["medr"] / 10)
    expected_rsum = sum(report[d][f"r{k}"] for d in ("i2t", "t2i") for k in (1, 5, 10))
    assert report["rsum"] == pytest.approx(expected_rsum)
    assert (report["n_media"], report["n_captions"]) == (10, 50)
    json.dumps(report)  # plain Python numbers only


def test_single_media_report():
    report = retrieval_report(np.array([[0.3, 0.1]]), np.array([0, 0]))
    assert report["i2t"]["r1"] == report["t2i"]["r1"] == 100.0
    assert report["rsum"] == 600.0


def test_five_fold_averages_folds_with_array_or_function():
    S, c2m = random_case(2, 12, 2)
    folds = []
    for f in range(3):
        media = np.arange(4 * f, 4 * f + 4)
        caps = np.flatnonzero(np.isin(c2m, media))
        folds.append(retrieval_report(S[np.ix_(media, caps)], c2m[caps] - 4 * f))
    from_array = five_fold_1k(S, c2m, fold_size=4)
    from_fn = five_fold_1k(lambda m, c: S[np.ix_(m, c)], c2m, n_media=12, fold_size=4)
    assert from_array == from_fn
    assert from_array["n_folds"] == 3 and from_array["n_media"] == 4 and from_array["n_captions"] == 8
    assert from_array["rsum"] == pytest.approx(np.mean([f["rsum"] for f in folds]))
    assert from_array["t2i"]["r1"] == pytest.approx(np.mean([f["t2i"]["r1"] for f in folds]))
    with pytest.raises(ValueError, match="folds of 5"):
        five_fold_1k(S, c2m, fold_size=5)


# ---------------------------------------------------------------- R-Precision


@pytest.mark.parametrize("seed,n_media,per_media,levels", CASES)
def test_r_precision_matches_naive_reference(seed, n_media, per_media, levels):
    S, c2m = random_case(seed, n_media, per_media, levels)
    truth = c2m[None, :] == np.arange(n_media)[:, None]
    result = r_precision(S, c2m)
    assert result["i2t"] == pytest.approx(naive_r_precision(S, truth))
    assert result["t2i"] == pytest.approx(naive_r_precision(S.T, truth.T))
    # with one match per caption query, R-Precision is R@1
    assert result["t2i"] == pytest.approx(recall_at(ranks_t2i(S, c2m), 1))


def test_r_precision_perfect_only_when_all_matches_come_first():
    c2m = np.array([0, 0, 1, 1])
    S = np.array([[0.9, 0.8, 0.1, 0.2], [0.1, 0.3, 0.7, 0.6]])
    assert r_precision(S, c2m) == {"i2t": 100.0, "t2i": 100.0}
    S[0, 2] = 0.85  # a wrong caption between media 0's two captions: R@1 stays, R-P halves for media 0
    assert ranks_i2t(S, c2m)[0] == 1
    assert r_precision(S, c2m)["i2t"] == pytest.approx(75.0)


@pytest.mark.parametrize("seed", range(4))
def test_plausible_match_r_precision_matches_naive_reference(seed):
    S, c2m = random_case(seed, 8, 3, levels=5 if seed % 2 else None)
    labels = np.random.default_rng(seed).integers(0, 2, (8, 4)).astype(bool)
    caption_labels = labels[c2m]
    expected_i2t, expected_t2i = [], []
    for zeta in (0, 1, 2):
        hamming = (labels[:, None, :] != caption_labels[None, :, :]).sum(-1)
        relevance = (hamming <= zeta) | (c2m[None, :] == np.arange(8)[:, None])
        expected_i2t.append(naive_r_precision(S, relevance))
        expected_t2i.append(naive_r_precision(S.T, relevance.T))
    result = plausible_match_r_precision(S, c2m, labels)
    assert result["i2t"] == pytest.approx(np.mean(expected_i2t))
    assert result["t2i"] == pytest.approx(np.mean(expected_t2i))


def test_plausible_match_with_unique_labels_is_plain_r_precision():
    S, c2m = random_case(3, 6, 2)
    labels = np.repeat(np.eye(6, dtype=bool), 2, axis=1)  # disjoint label pairs: Hamming distance 4
    assert plausible_match_r_precision(S, c2m, labels) == pytest.approx(r_precision(S, c2m))


# ---------------------------------------------------------------- uncertainty


def test_spearman_matches_scipy_with_ties():
    rng = np.random.default_rng(0)
    x, y = rng.integers(0, 5, 40), rng.integers(0, 7, 40)
    assert spearman_rho(x, y) == pytest.approx(spearmanr(x, y).statistic)
    assert np.isnan(spearman_rho(np.ones(5), np.arange(5)))


def test_recall_falls_with_uncertainty():
    uncertainty = np.linspace(0.0, 1.0, 100)
    ranks = np.where(np.random.default_rng(0).random(100) < 1 - uncertainty, 1, 7)
    curve = recall_by_uncertainty_decile(ranks, uncertainty)
    assert curve.counts == [10] * 10
    for b in range(10):
        assert curve.r1[b] == pytest.approx(100 * np.mean(ranks[10 * b:10 * b + 10] == 1))
    assert curve.bin_edges[0] == 0.0 and curve.bin_edges[-1] == 1.0
    assert curve.rho_bins < -0.5 and curve.rho_queries > 0.3
    assert json.loads(json.dumps(curve.as_dict()))["r1"] == curve.r1


def test_uncertainty_bins_are_stable_and_uneven_sizes_allowed():
    uncertainty = np.array([0.5, 0.1, 0.5, 0.1, 0.9, 0.5, 0.1])
    ranks = np.array([1, 1, 2, 1, 3, 1, 4])
    curve = recall_by_uncertainty_decile(ranks, uncertainty, n_bins=3)
    assert curve.counts == [3, 2, 2]
    # stable order: [1, 3, 6] (u=0.1), [0, 2] (u=0.5), [5, 4]
    assert curve.r1 == pytest.approx([200 / 3, 50.0, 50.0])
    with pytest.raises(ValueError, match="bins"):
        recall_by_uncertainty_decile(ranks, uncertainty, n_bins=8)


def test_distractors_compete_for_text_to_media_only():
    from engine.trainercontract.metrics import retrieval_report

    S = np.array([[0.9, 0.1], [0.2, 0.8]])  # both captions rank their own media first
    c2m = np.array([0, 1])
    plain = retrieval_report(S, c2m)
    assert plain["t2i"]["r1"] == 100.0 and "n_distractors" not in plain
    D = np.array([[0.95, 0.0], [0.0, 0.1]])  # one distractor beats caption 0's media
    with_d = retrieval_report(S, c2m, distractors=D)
    assert with_d["t2i"]["r1"] == 50.0 and with_d["t2i"]["r5"] == 100.0
    assert with_d["i2t"] == plain["i2t"] and with_d["n_distractors"] == 2 and with_d["n_media"] == 2
