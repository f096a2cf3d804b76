"""Active-learning policies (engine.loop.activelearning) against naive references on tiny seeded data."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from engine.loop.activelearning import ActiveLearningError, head_disagreement, pick, uncertainty_scores
from engine.search.pcme import uncertainty


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=-1, keepdims=True)


def naive_disagreement(items: np.ndarray, captions: np.ndarray, top: int) -> np.ndarray:
    captions = _unit(captions)
    out = []
    for heads in items:
        sets = []
        for head in heads:
            sims = [(float(head @ c), j) for j, c in enumerate(captions)]
            sets.append({j for _, j in sorted(sims, reverse=True)[:top]})
        pairs = list(itertools.combinations(sets, 2))
        out.append(1.0 - sum(len(a & b) / len(a | b) for a, b in pairs) / len(pairs) if pairs else 0.0)
    return np.array(out)


@pytest.mark.parametrize("shape", [(6, 5), (6, 3, 4)])
def test_uncertainty_is_the_geometric_mean_of_sigma(shape: tuple[int, ...]) -> None:
    log_sigma = np.random.default_rng(0).normal(size=shape)
    got = uncertainty_scores(log_sigma)
    want = [np.prod(np.exp(row.ravel())) ** (1.0 / row.size) for row in log_sigma]
    assert got.shape == (6,)
    assert np.allclose(got, want)
    assert np.allclose(got, uncertainty(log_sigma))  # the value the app shows next to a result


def test_uncertainty_ranks_log_variances_like_log_sigmas() -> None:
    log_sigma = np.random.default_rng(1).normal(size=(20, 8))
    assert (np.argsort(uncertainty_scores(log_sigma)) == np.argsort(uncertainty_scores(2 * log_sigma))).all()


@pytest.mark.parametrize("bad", [np.zeros(4), np.zeros((2, 0)), np.array([[0.0, np.nan]])])
def test_uncertainty_rejects_bad_input(bad: np.ndarray) -> None:
    with pytest.raises(ActiveLearningError, match="log_sigma"):
        uncertainty_scores(bad)


@pytest.mark.parametrize(("n", "heads", "m", "top"), [(7, 3, 30, 5), (4, 2, 12, 1), (5, 4, 9, 9), (3, 3, 6, 10)])
def test_head_disagreement_matches_the_naive_reference(n: int, heads: int, m: int, top: int) -> None:
    rng = np.random.default_rng(n * 100 + heads)
    items = _unit(rng.normal(size=(n, heads, 6)))
    captions = rng.normal(size=(m, 6))  # not normalised: the function normalises them
    got = head_disagreement(items, captions, top)
    assert got.shape == (n,)
    assert np.allclose(got, naive_disagreement(items, captions, top))
    assert ((got >= 0) & (got <= 1)).all()


def test_head_disagreement_extremes() -> None:
    rng = np.random.default_rng(3)
    captions = _unit(rng.normal(size=(40, 5)))
    same = np.repeat(_unit(rng.normal(size=(4, 1, 5))), 3, axis=1)
    assert np.allclose(head_disagreement(same, captions, top=5), 0.0)
    # heads pointing exactly at disjoint caption clusters share no neighbour
    basis = np.eye(5)
    clustered = _unit(np.concatenate([basis[i] + 0.01 * rng.normal(size=(4, 5)) for i in range(3)]))
    items = basis[None, :3, :].repeat(2, axis=0)
    assert np.allclose(head_disagreement(items, clustered, top=4), 1.0)
    assert np.allclose(head_disagreement(items[:, :1], clustered), 0.0)  # one head cannot disagree


def test_head_disagreement_works_in_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    import engine.loop.activelearning as active

    rng = np.random.default_rng(4)
    items, captions = _unit(rng.normal(size=(9, 3, 4))), rng.normal(size=(15, 4))
    whole = head_disagreement(items, captions, 4)
    monkeypatch.setattr(active, "_BLOCK", 50)  # 1 item per block
    assert np.allclose(head_disagreement(items, captions, 4), whole)


@pytest.mark.parametrize(("items", "captions", "top", "name"), [
    (np.zeros((2, 3)), np.zeros((4, 3)), 3, "item_vecs"),
    (np.zeros((2, 2, 3)), np.zeros((4, 5)), 3, "caption_vecs"),
    (np.zeros((2, 2, 3)), np.zeros((4, 3)), 0, "top"),
    (np.zeros((2, 2, 3)), np.zeros((0, 3)), 3, "caption_vecs"),
    (np.full((2, 2, 3), np.nan), np.zeros((4, 3)), 3, "item_vecs")])
def test_head_disagreement_rejects_bad_input(items: np.ndarray, captions: np.ndarray, top: int,
                                             name: str) -> None:
    with pytest.raises(ActiveLearningError, match=name):
        head_disagreement(items, captions, top)


def test_pick_takes_the_highest_scores_best_first_and_skips_excluded() -> None:
    scores = np.random.default_rng(5).normal(size=50)
    exclude = np.array([int(np.argmax(scores)), 3, 17])
    got = pick(scores, 6, exclude=exclude)
    naive = [i for i in sorted(range(50), key=lambda i: -scores[i]) if i not in set(exclude.tolist())][:6]
    assert got.tolist() == naive
    assert got.dtype == np.int64


def test_pick_breaks_ties_by_index_and_returns_what_is_left() -> None:
    scores = np.array([1.0, 2.0, 2.0, 0.0, 2.0])
    assert pick(scores, 2).tolist() == [1, 2]
    assert pick(scores, 10, exclude=np.array([1, 2])).tolist() == [4, 0, 3]
    assert pick(scores, 0).tolist() == []


def test_pick_random_is_seeded_uniform_and_never_excluded() -> None:
    scores = np.zeros(30)
    exclude = np.arange(0, 30, 2)
    first = pick(scores, 10, exclude, np.random.default_rng(9), policy="random")
    again = pick(scores, 10, exclude, np.random.default_rng(9), policy="random")
    assert first.tolist() == again.tolist()
    assert len(set(first.tolist())) == 10 and not set(first.tolist()) & set(exclude.tolist())
    counts = np.zeros(30)
    rng = np.random.default_rng(0)
    for _ in range(600):
        counts[pick(scores, 3, exclude, rng, policy="random")] += 1
    assert counts[exclude].sum() == 0
    assert counts[1::2].min() > 60  # each of the 15 candidates expects 120 picks


@pytest.mark.parametrize(("kwargs", "name"), [
    ({"scores": np.zeros((2, 2)), "n": 1}, "scores"),
    ({"scores": np.zeros(3), "n": -1}, "n"),
    ({"scores": np.zeros(3), "n": 1, "policy": "sigma"}, "policy"),
    ({"scores": np.zeros(3), "n": 1, "exclude": np.array([3])}, "exclude"),
    ({"scores": np.zeros(3), "n": 1, "exclude": np.array([0.5])}, "exclude"),
    ({"scores": np.array([0.0, np.nan]), "n": 1}, "scores")])
def test_pick_rejects_bad_input(kwargs: dict, name: str) -> None:
    with pytest.raises(ActiveLearningError, match=name):
        pick(**kwargs)
