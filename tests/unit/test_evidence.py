"""One ranking of several kinds of evidence (engine/search/evidence.py) and the user's words (engine/search/words.py).

Every assertion here is on an order or a construction whose answer is known exactly (no trained model, no
threshold near a measured value), so it holds on any CPU.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from engine.search import evidence
from engine.search.words import LookAlikes, UserWords, query_terms, spread
from engine.workspace import Workspace
from tests.mediagen import make_jpeg


def test_a_source_on_a_larger_scale_does_not_dominate_the_fusion():
    rows = np.arange(4)
    small = evidence.ArrayEvidence("model", np.array([0.4, 0.3, 0.2, 0.1]))  # says 0 best
    large = evidence.ArrayEvidence("zero_shot", np.array([100.0, 200.0, 300.0, 400.0]))  # says 3 best
    ranking = evidence.fuse({"model": small, "zero_shot": large}, rows)
    # both are standardised, so the weights alone decide: the model's (MODEL > 0.5) wins the first place
    assert evidence.MODEL > 0.5
    assert int(ranking.rows[ranking.order()[0]]) == 0
    scaled = evidence.fuse({"model": small, "zero_shot": evidence.ArrayEvidence("zero_shot", large.values / 1e6)},
                           rows)
    assert np.allclose(ranking.total, scaled.total, atol=1e-5)


def test_standardising_with_a_sample_uses_the_samples_mean_and_spread():
    reference = np.array([0.0, 2.0])  # mean 1, std 1
    assert np.allclose(evidence.standardise(np.array([1.0, 3.0]), reference), [0.0, 2.0])
    assert np.all(evidence.standardise(np.array([5.0, 5.0])) == 0)  # no spread: no evidence
    assert np.array_equal(evidence.fixed_sample(10_000), evidence.fixed_sample(10_000))


def test_the_users_words_add_and_a_rejection_removes():
    rows = np.arange(3)
    model = evidence.ArrayEvidence("model", np.array([0.3, 0.2, 0.1]))
    ranking = evidence.fuse({"model": model}, rows, words=np.array([0.0, 0.0, 1.0]),
                            rejected=np.array([1.0, 0.0, 0.0]))
    assert [int(ranking.rows[p]) for p in ranking.order()] == [2, 1, 0]


def _no_semantics(texts: list[str]) -> np.ndarray:
    return np.zeros((len(texts), 4), np.float32)


def test_a_name_written_on_items_finds_exactly_them_and_stems_words():
    words = UserWords([(1, "Biscuit running on the beach", False), (2, "Biscuit asleep", False),
                       (3, "a dog runs in the park", False), (4, "Biscuit", True)], _no_semantics)
    match = words.match("Biscuit", np.zeros(4, np.float32))
    assert set(match.positive) == {1, 2} and match.positive[1] == pytest.approx(1.0)
    assert match.rejected == {4: pytest.approx(1.0)}
    running = words.match("dogs running", np.zeros(4, np.float32))  # porter: dogs ~ dog, running ~ runs
    assert set(running.positive) == {1, 3}
    assert running.positive[3] > running.positive[1]  # "dog" is rarer than... both words are on item 3
    assert query_terms("The dog and THE cat") == ["dog", "cat"]


def test_spread_gives_look_alikes_of_many_named_items_more_than_of_one():
    def neighbours(ids):  # item 11 resembles both items named "biscuit", item 12 only one; 13 is too far
        table = {20: ([20, 11, 12], [1.0, 0.9, 0.8]), 21: ([21, 11, 13], [1.0, 0.9, -0.1])}
        return [np.array(table[i][0]) for i in ids], [np.array(table[i][1]) for i in ids]

    shares = spread({"biscuit": (1.0, (20, 21))}, neighbours)
    assert 20 not in shares and 21 not in shares and 13 not in shares  # themselves; below the floor
    assert shares[11] > shares[12] > 0
    alone = spread({"grass": (1.0, (20,))}, neighbours)
    assert alone[11] < shares[11]  # a word written on one item spreads less


def test_look_alikes_tell_the_same_dog_from_a_photo_with_more_of_what_every_photo_has():
    """All-positive pooled features share a large part: by the raw cosine, item 102 (that common part and little
    else) looks most like item 100; centred on the library's mean, item 101, which shares what 100 has of its own."""
    matrix = np.array([(3, 1, 0), (1, 1, 0), (5, 0, 0), (3, -2, 0), (3, 0, 1), (3, 0, -1)], np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    ids = np.arange(100, 106)
    raw = matrix @ matrix[0]
    assert raw[2] > raw[1] > raw[3]  # uncentred: 102 first
    alike = LookAlikes(ids, matrix)
    near, sims = alike.nearest([100, 999], top=2)
    assert near[0].tolist() == [100, 101] and sims[0][0] == pytest.approx(1.0, abs=1e-5)
    centred = matrix - matrix.mean(axis=0)
    centred /= np.linalg.norm(centred, axis=1, keepdims=True)
    assert np.allclose(alike.similarities([100])[0], centred @ centred[0], atol=1e-5)  # the identity it relies on
    assert len(near[1]) == 0 and 999 not in alike  # an item without features has no look-alikes
    shares = spread({"biscuit": (1.0, (100,))}, alike.nearest)
    assert set(shares) == {101}  # the only look-alike above the floor (centred cosine 0)


def test_a_caption_finds_its_item_at_once_and_a_rejection_removes_it(library: Workspace):
    media = sorted(library.state.catalog.iter_media(), key=lambda m: m.id)
    library.annotations.add_caption(media[5].id, "Biscuit sleeping on the sofa")
    library.annotations.add_caption(media[2].id, "Biscuit in the garden")
    top = [h.media_id for h in library.search.text("Biscuit", top=2)]
    assert set(top) == {media[5].id, media[2].id}
    victim = library.search.text("a cat on a sofa", top=1)[0].media_id
    library.annotations.reject_pair("a cat on a sofa", victim)
    # REJECT z-units put it under every item of this 8-item library (a library of any size: under its top 60)
    assert library.search.text("a cat on a sofa", top=60)[-1].media_id == victim
    # and for a paraphrase of the rejected query (same content words; MiniLM cosine above SEM_FULL)
    assert library.search.text("a cat on the sofa", top=60)[-1].media_id == victim
    library.annotations.delete_pair(library.state.catalog.pairs()[0].id)
    assert library.search.text("a cat on a sofa", top=1)[0].media_id == victim


def test_the_users_words_built_on_one_thread_are_read_on_another() -> None:
    """A search builds the index of the user's words on its worker thread; the next search or the inspector's
    explanation reads it on another (it failed: SQLite objects created in a thread can only be used there)."""
    import threading

    from engine.search.words import UserWords

    rng = np.random.default_rng(0)
    words = UserWords([(1, "Biscuit asleep on the rug", False), (2, "a red kite", False)],
                      lambda texts: rng.standard_normal((len(texts), 8)).astype(np.float32))
    got: list = []
    reader = threading.Thread(target=lambda: got.append(words.match("Biscuit", np.ones(8, np.float32) / 8 ** 0.5)))
    reader.start()
    reader.join()
    assert got and got[0].positive.get(1, 0.0) > 0 and 2 not in got[0].positive


def test_a_large_librarys_zero_shot_sample_is_scored_once_and_as_any_rows_are():
    """Above DENSE_LIMIT the candidates are standardised with a fixed sample's terms: the sample's own scores are
    those of any row set with the same terms, and its terms are computed once per query."""
    from engine.search.zeroshot import ZeroShotIndex, combine_terms

    rng = np.random.default_rng(0)
    classes = rng.standard_normal((30, 16)).astype(np.float32)
    classes /= np.linalg.norm(classes, axis=1, keepdims=True)
    ids = np.stack([rng.choice(30, 4, replace=False) for _ in range(200)])
    probs = rng.dirichlet(np.ones(4), 200).astype(np.float32)
    index = ZeroShotIndex(classes, ids, probs)
    source = evidence.ZeroShotEvidence(index, classes[3], classes[[3, 7]])
    calls: list[int] = []
    real = index.terms
    index.terms = lambda *a, **k: (calls.append(len(a[2])), real(*a, **k))[1]
    sample = evidence.fixed_sample(200, 50)
    source.calibrate(sample)
    got = source.score(sample)
    assert calls == [50]  # the sample's terms once, whatever reads its scores
    reference = real(None, None, sample, query=source.query)
    np.testing.assert_allclose(got, combine_terms(reference), rtol=1e-6, atol=1e-6)
    rows = np.arange(0, 200, 3)  # candidates: standardised with the sample's terms
    expected = combine_terms(real(None, None, rows, query=source.query), reference)
    np.testing.assert_allclose(source.score(rows), expected, rtol=1e-6, atol=1e-6)


def test_a_photo_added_after_the_names_shares_them_when_it_looks_like_a_named_one(library: Workspace,
                                                                                 tmp_path: Path):
    """The spread reads the library as it is now: a photo indexed after the user named two (the same picture as
    one of them) comes next for the name, before any retrain."""
    media = sorted(library.state.catalog.iter_media(), key=lambda m: m.id)
    library.annotations.add_caption(media[5].id, "Biscuit sleeping on the sofa")
    library.annotations.add_caption(media[2].id, "Biscuit in the garden")
    library.search.text("Biscuit")  # the look-alikes are built here, before the new photo
    later = tmp_path / "later"
    later.mkdir()
    make_jpeg(later / "again.jpg", (48, 40), (250, 200, 0))  # photo5's colour
    list(library.library.index([later]))
    again = next(m.id for m in library.state.catalog.iter_media() if Path(m.path).name == "again.jpg")
    assert [h.media_id for h in library.search.text("Biscuit", top=3)][2] == again


class _Index:
    """A trained model's stored vectors (id -> (K, D)), as :class:`MultiVectorIndex` answers ``known`` / ``get``."""

    def __init__(self, vectors: dict[int, np.ndarray]) -> None:
        self.vectors = vectors

    def known(self, ids: np.ndarray) -> np.ndarray:
        return np.array([int(i) in self.vectors for i in ids], bool)

    def get(self, ids: np.ndarray) -> np.ndarray:
        return np.stack([self.vectors[int(i)] for i in ids]).astype(np.float32)


def test_a_name_moves_the_models_query_toward_the_items_it_is_written_on():
    """"Biscuit jumps" asks the model for what looks like the photos named Biscuit and jumps: the query's heads turn
    toward the mean of those items' vectors (by how new the word is), stay unit, and an item the model has not
    embedded is skipped; nothing named, or a word on fewer items than a name is written on, leaves the query as it
    is."""
    from types import SimpleNamespace

    from engine.search.modelrunner import Encoded
    from engine.search.ranking import ground_names

    e = np.eye(4, dtype=np.float32)
    vectors = {1: e[[0, 0]], 2: e[[0, 1]], 3: e[[0, 0]], 4: e[[0, 1]], 5: e[[2, 2]]}  # K = 2 heads an item
    trained = SimpleNamespace(index=_Index(vectors))
    query = Encoded(np.stack([e[[3, 2]]]))  # (1, K, D)
    assert ground_names(query, trained, {}, {}) is query
    assert ground_names(query, trained, {"henna": (1, 2, 99)}, {"henna": 1.0}) is query  # a rare word on two
    used: dict[str, int] = {}
    moved = ground_names(query, trained, {"biscuit": (1, 2, 3, 4, 99)}, {"biscuit": 1.0}, weight=2.0, used=used)
    assert used == {"biscuit": 4}  # the inspector says which name moved the query, and on how many items
    assert moved.emb.shape == query.emb.shape
    np.testing.assert_allclose(np.linalg.norm(moved.emb, axis=-1), 1.0, rtol=1e-6)
    toward = np.array([0.75, 0.25, 0, 0], np.float32) / np.linalg.norm([0.75, 0.25])  # items 1-4; 99 skipped
    assert (moved.emb[0] @ toward > query.emb[0] @ toward + 0.3).all()
    assert moved.emb[0, 0, 3] > moved.emb[0, 0, 2] == 0  # the query's own meaning stays first
    # a word the model already reads (novelty 0) moves nothing
    assert ground_names(query, trained, {"dog": (1, 2, 3, 4, 5)}, {"dog": 0.0}) is query


def test_a_function_word_the_caption_counts_leave_out_is_not_a_name():
    """The model's caption counts hold content words only: "through" is missing from them because it is in nearly
    every caption, not because the model never read it; "Biscuit" is missing because it is the user's own."""
    from types import SimpleNamespace

    trained = SimpleNamespace(caption_words=({"dog": 5000, "grass": 900}, 10000))
    labels = {w: (0.3, (1, 2, 3, 4)) for w in ("through", "while", "biscuit", "dog")}
    novelty = evidence.word_novelty(labels, np.arange(10), None, trained, None)
    assert novelty["through"] == novelty["while"] == 0.0
    assert novelty["biscuit"] == 1.0 and novelty["dog"] < 0.01


def test_the_inspector_names_a_name_as_the_search_spells_it():
    """The note that a name moved the model's query quotes it as the user typed it, not as the index keys it."""
    from engine.search.ranking import _as_written

    assert _as_written("biscuit", "Biscuit jumps over a log") == "Biscuit"
    assert _as_written("run", "dogs running") == "running"
    assert _as_written("pearl", "a white dog") == "pearl"


class CountingEvidence(evidence.ArrayEvidence):
    """Array evidence that records the rows it was asked to score."""

    def __init__(self, name, values):
        super().__init__(name, values)
        self.asked: list[int] = []

    def score(self, rows):
        self.asked += [int(r) for r in rows]
        return super().score(rows)


def test_past_the_dense_limit_a_companion_scores_only_the_models_top_candidates_and_the_users_items(monkeypatch):
    rng = np.random.default_rng(0)
    n = 2_000
    model = evidence.ArrayEvidence("model", rng.normal(size=n).astype(np.float32))
    companion = CountingEvidence(evidence.COMPANION, rng.normal(size=n).astype(np.float32))
    rows = np.arange(0, 600)  # the candidates
    sample = evidence.fixed_sample(n)
    words = np.zeros(len(rows), np.float32)
    words[550] = 1.0  # an item the user's words name, far down the model's order
    monkeypatch.setattr(evidence, "BESIDE_CANDIDATES", None)
    every = evidence.fuse({"model": model, evidence.COMPANION: companion}, rows, sample, words=words)
    assert set(companion.asked) >= set(rows.tolist())  # unset: every candidate
    monkeypatch.setattr(evidence, "BESIDE_CANDIDATES", 50)
    companion.asked = []
    cut = evidence.fuse({"model": model, evidence.COMPANION: companion}, rows, sample, words=words)
    top = set(np.argsort(-model.values[rows])[:50].tolist())
    asked_candidates = set(companion.asked) - set(sample[:: evidence.COMPANION_STRIDE].tolist())
    assert asked_candidates <= top | {550}
    assert 550 in companion.asked and top <= set(companion.asked)
    scored = sorted(top | {550})
    assert np.allclose(cut.parts[evidence.COMPANION][scored], companion.values[rows][scored])
    others = np.setdiff1d(np.arange(len(rows)), scored)  # the rest: the lowest score among those scored
    assert np.all(cut.parts[evidence.COMPANION][others] == companion.values[rows][scored].min())
    assert np.allclose(cut.total[scored], every.total[scored])  # the same z-scores where it scored
    # a small library's dense path (no sample) scores every row whatever the setting
    companion.asked = []
    evidence.fuse({"model": model, evidence.COMPANION: companion}, rows)
    assert sorted(companion.asked) == rows.tolist()
