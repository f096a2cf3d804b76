"""The calibrated ranking's rules (issue #40, engine/search/calibration.py), on the shipped parameters.

What is pinned: a caption that shares one word of a four-word query does not outrank the model's clear best
match, while a caption that says what the query says does; a rejection removes; made-up words find no good match;
a name the user wrote still finds its items; the lexical cover counts the whole query.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine.search import calibration, evidence
from engine.search.words import UserWords
from engine.types import percent
from engine.workspace import Workspace

N = 40


def _ranking(lexical: dict[int, float], semantic: dict[int, float] | None = None,
             rejected: dict[int, float] | None = None, familiar: float = 1.0,
             novel: dict[int, float] | None = None, described: dict[int, float] | None = None) -> evidence.Ranking:
    """A 40-item library whose model clearly prefers item 0 (about 4 standard deviations above the rest, as the
    best match of a real search stands) and finds item 7 a little better than typical (about 1)."""
    rng = np.random.default_rng(0)
    cos = rng.normal(0.10, 0.03, N).astype(np.float32)
    cos[0], cos[7] = 0.10 + 4 * 0.03, 0.10 + 0.03

    def column(values: dict[int, float] | None) -> np.ndarray:
        out = np.zeros(N, np.float32)
        for row, value in (values or {}).items():
            out[row] = value
        return out

    user = evidence.UserEvidence(column(lexical), column(semantic), np.zeros(N, np.float32), column(rejected),
                                 column(novel), column(described) if described is not None else None)
    return evidence.fuse({"model": evidence.ArrayEvidence("model", cos)}, np.arange(N),
                         calibrated=calibration.load("model"), user=user, familiar=familiar, n_items=N)


def _first(ranking: evidence.Ranking) -> int:
    return int(ranking.rows[ranking.order()[0]])


def test_the_shipped_calibration_says_what_it_was_fitted_on_and_reads_known_features_only():
    for kind in ("model", "zero_shot"):
        fitted = calibration.load(kind)
        assert fitted is not None and set(fitted.coef) <= set(calibration.FEATURES)
        assert "train" in fitted.fitted_on and "dev" not in fitted.fitted_on.replace("never", "")
        assert 0 < fitted.good < fitted.strong < 1


def test_a_caption_sharing_one_word_of_four_does_not_outrank_the_models_clear_best():
    assert _first(_ranking({7: 0.25}, {7: 0.2})) == 0
    assert _first(_ranking({7: 0.25}, {7: 0.2}, novel={7: 0.25})) == 0  # even a new word, if one of four
    # a caption that says what the query says does, and a name the user gave (all of the query, new to the model)
    assert _first(_ranking({7: 1.0}, {7: 1.0})) == 7
    assert _first(_ranking({7: 1.0}, novel={7: 1.0})) == 7


def test_what_the_user_wrote_an_item_is_counts_before_the_models_guess_about_it():
    """An item the user described (a caption that says nothing of this query) loses some of the model's evidence:
    the caption says what it is, the model's score only guesses. Item 0 (the model's clear best, 4 standard
    deviations up) captioned "a red car" for a query about a dog loses more than one unit of log-odds, the others
    nothing; captioned with the query's words, it stays first."""
    plain = _ranking({})
    assert calibration.load("model").coef["dense_described"] < 0
    described = _ranking({}, described={0: 1.0})
    assert described.total[0] < plain.total[0] - 1.0
    np.testing.assert_allclose(described.total[1:], plain.total[1:], rtol=1e-6)
    assert _first(_ranking({0: 1.0}, {0: 1.0}, described={0: 1.0})) == 0


def test_a_rejection_removes_and_the_probabilities_say_how_likely():
    plain = _ranking({})
    assert plain.parts["probability"][0] == plain.parts["probability"].max()
    rejected = _ranking({}, rejected={0: 1.0})
    assert int(rejected.rows[rejected.order()[-1]]) == 0 and rejected.parts["probability"][0] < 1e-9


def test_made_up_words_give_no_item_a_good_match_whatever_its_z_score():
    fitted = calibration.load("model")
    nonsense = _ranking({}, familiar=0.0)
    assert nonsense.parts["probability"].max() < fitted.good
    known = _ranking({}, familiar=1.0)
    assert fitted.word(float(known.parts["probability"][0])) != "weak"


def test_the_lexical_cover_counts_every_word_of_the_query():
    def no_semantics(texts: list[str]) -> np.ndarray:
        return np.zeros((len(texts), 4), np.float32)

    words = UserWords([(1, "a small terrier in the grass under a red ball", False),
                       (2, "brown leather card wallet", False), (3, "a red car on the street", False)], no_semantics)
    match = words.match("a red car parked on the street", np.zeros(4, np.float32))
    assert match.lexical[1] <= 0.3  # "red" alone: one word of four
    assert match.lexical[3] > 0.6 > match.lexical[1]
    assert words.match("Biscuit", np.zeros(4, np.float32)).lexical == {}  # nobody wrote it


def test_familiarity_is_the_share_of_words_the_text_side_knows():
    known = {"red", "car", "street"}.__contains__
    assert calibration.familiarity(["red", "car", "blorf", "street"], known) == pytest.approx(0.75)
    assert calibration.familiarity([], known) == 0.0
    assert calibration.familiar_feature(0.0) < calibration.familiar_feature(0.5) < calibration.familiar_feature(1.0)
    assert calibration.log_items(10) == calibration.log_items(calibration.FITTED_ITEMS[0])
    assert calibration.log_items(10**6) == calibration.log_items(calibration.FITTED_ITEMS[1])


def test_a_search_says_how_well_each_hit_matches_in_calibrated_words(library: Workspace):
    media = sorted(library.state.catalog.iter_media(), key=lambda m: m.id)
    library.annotations.add_caption(media[4].id, "Biscuit asleep on the sofa")
    library.annotations.add_caption(media[1].id, "Biscuit in the garden")
    named = library.search.text("Biscuit", top=8)
    assert {h.media_id for h in named[:2]} == {media[4].id, media[1].id}
    assert all(h.match in ("good", "strong") for h in named[:2])
    assert all(0.0 <= h.match_probability <= 1.0 for h in named)
    made_up = library.search.text("blorfquiz zanglewop", top=8)
    assert len(made_up) == 8 and all(h.match == "weak" for h in made_up)
    cutoff = calibration.load("zero_shot").good
    assert library.search.text("blorfquiz zanglewop", min_probability=cutoff) == []


def test_the_inspector_reads_the_numbers_that_ranked_the_item(library: Workspace):
    media = sorted(library.state.catalog.iter_media(), key=lambda m: m.id)
    library.annotations.add_caption(media[3].id, "a small terrier in the grass under a red ball")
    hit = library.search.text("a red car parked on the street", top=8)
    terrier = next(h for h in hit if h.media_id == media[3].id)
    notes = " ".join(library.search.explain("a red car parked on the street", terrier.media_id).notes)
    assert percent(terrier.match_probability) in notes and "Log-odds" in notes
    assert "covers 2" in notes or "covers 1" in notes  # "red" alone: a quarter of the words or less
    assert "far from the search in meaning" in notes


def test_the_inspector_does_not_call_a_name_that_covers_the_whole_search_far_in_meaning(library: Workspace):
    media = sorted(library.state.catalog.iter_media(), key=lambda m: m.id)
    library.annotations.add_caption(media[2].id, "Doctor Nova explains space dust")
    notes = " ".join(library.search.explain("Doctor Nova", media[2].id).notes)
    assert "covers 100% of this search's words." in notes and "in meaning" not in notes


def test_a_name_covers_in_full_an_everyday_word_hardly():
    labels = {"biscuit": (0.5, (1, 2)), "beach": (0.5, (3,))}
    cover = evidence.novel_cover(labels, {"biscuit": 0.5, "beach": 0.25}, {"biscuit": 1.0, "beach": 0.02})
    assert cover[1] == cover[2] == pytest.approx(0.5) and cover[3] == pytest.approx(0.005)


def test_a_clip_scored_by_its_best_frame_loses_the_frames_bias():
    fitted = calibration.load("model")
    assert fitted.frames_bias > 0
    rows = np.arange(4)
    cos = evidence.ArrayEvidence("model", np.array([0.4, 0.4, 0.1, 0.1], np.float32))
    frames = np.log(np.array([1, 8, 1, 1], np.float32))  # row 1: a clip of 8 frames, as good as photo 0
    ranking = evidence.fuse({"model": cos}, rows, calibrated=fitted, familiar=1.0, n_items=4, log_frames=frames)
    assert int(ranking.rows[ranking.order()[0]]) == 0  # the photo first, the clip just below
    assert ranking.parts["dense"][0] - ranking.parts["dense"][1] == pytest.approx(fitted.frames_bias * np.log(8))


def test_the_inspector_says_when_a_name_moved_the_models_query():
    from engine.search.explanation import ranking_note

    ranking = _ranking({0: 1.0}, novel={0: 1.0})
    assert "a name you wrote" not in ranking_note(ranking, 0)
    ranking.names["biscuit"] = 7
    assert "\u201cbiscuit\u201d, a name you wrote on 7 items" in ranking_note(ranking, 0)
