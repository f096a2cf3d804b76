"""The words a model learnt from (engine/features/vocabulary.py) and what the search makes of them: a word the user
wrote that the model never read is theirs alone; an everyday word is the model's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from engine.features.vocabulary import (
    CAPTION_WORDS_FILE,
    FAMILIAR,
    count_caption_words,
    novelty,
    read_caption_words,
    write_caption_words,
)
from engine.search.evidence import word_novelty


def test_counts_are_per_caption_content_words_and_survive_a_round_trip(tmp_path: Path) -> None:
    counts = count_caption_words(["A dog runs after a dog.", "Two dogs on the grass", "a dog"])
    assert counts["dog"] == 2 and counts["dogs"] == 1 and counts["grass"] == 1  # once per caption
    assert "a" not in counts and "the" not in counts  # stop words are not content
    write_caption_words(tmp_path, counts, 3)
    assert read_caption_words(tmp_path) == (dict(counts), 3)
    (tmp_path / CAPTION_WORDS_FILE).write_text("{not json")
    assert read_caption_words(tmp_path) is None
    assert read_caption_words(tmp_path / "absent") is None


def test_novelty_is_one_for_an_unread_word_one_half_at_familiar_and_falls_with_use() -> None:
    assert novelty(0) == 1.0
    assert novelty(int(FAMILIAR)) == pytest.approx(0.5)
    assert novelty(2000) < 0.02 < novelty(5) < 1.0


def test_the_search_reads_a_words_novelty_from_the_models_training_captions() -> None:
    """A model that records its training captions' words: a name it never read is new (it spreads to look-alikes and
    is kept from the zero-shot classes), an everyday word is not, whatever the ranking makes of the bare word."""
    trained = SimpleNamespace(caption_words=({"girl": 2206, "shadow": 27}, 33500))
    labels = {"biscuit": (0.5, (1, 2)), "girl": (0.3, (3,)), "shadow": (0.2, (4,))}
    got = word_novelty(labels, np.arange(5), None, trained, None)  # no ranking is asked: the counts say
    assert got["biscuit"] == 1.0 and got["girl"] < 0.02 and 0.4 < got["shadow"] < 0.6


def test_a_retrained_model_that_read_the_users_own_captions_still_calls_their_words_theirs() -> None:
    """After a retrain on 16 captions naming "Shadow", the model's counts hold the starter's 27 shadows plus the user's
    16: the user's word is judged on the captions of others (27), not 43."""
    trained = SimpleNamespace(caption_words=({"shadow": 27 + 16}, 33516))
    labels = {"shadow": (1.0, tuple(range(16)))}
    got = word_novelty(labels, np.arange(20), None, trained, None)
    assert got["shadow"] == pytest.approx(novelty(27)) and got["shadow"] > 0.5
