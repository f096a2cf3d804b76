"""The ranking of a sentence over a library, in one room (issue #40): every kind of evidence gathered here and fused
by :func:`engine.search.evidence.fuse` on the calibrated scale of :mod:`engine.search.calibration`.

The service asks :func:`rank_sentence` and pages its result; the inspector reads the same ranking's numbers
(:func:`engine.search.explanation.ranking_note`); the benchmarks and ``tools/fit_calibration.py`` read its parts.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from engine.features.regional import content_words
from engine.search import calibration, evidence
from engine.search.vectorindex.scoring import normalise
from engine.search.words import WordsMatch, spread

OWN_WORD = 0.5  # novelty (evidence.word_novelty) from which a word the user wrote is read as theirs alone


def rank_sentence(text: str, indexes, encoders, trained, kinds: Collection[str]):
    """``(ids, ranking, trained, encoded query)`` of ``text`` over the library (None: nothing indexed).

    ``indexes``: the library's indexes (:class:`engine.search.libraryindexes.LibraryIndexes`: zero-shot, user
    words, look-alikes, frames); ``trained``: the active model's :class:`engine.search.trained.TrainedSearch` or
    None (zero-shot ranking); ``kinds``: the evidence used ("model", "zero_shot", "words"; benchmarks drop some).
    """
    ids, index = indexes.zero_shot()
    if not len(ids):
        return None
    stock = encoders.minilm.encode([text])  # the zero-shot semantics and a model on stock MiniLM share it
    sentence = stock.sentence[0]
    match = indexes.user_words().match(text, normalise(sentence)) if "words" in kinds else WordsMatch({}, {})
    # a word the user wrote on items is theirs in proportion to how new it is to the ranking in use: "Biscuit"
    # means what its items show, not an ImageNet class; "dog" written on dog photos stays the semantics' word
    novelty = (evidence.word_novelty(match.labels, ids, index, trained, indexes.zero_shot_query)
               if match.labels else {})
    own = {word for word, new in novelty.items() if new >= OWN_WORD}
    dense: dict = {}
    if "zero_shot" in kinds or trained is None:
        _, words = indexes.zero_shot_query(text, exclude=own, sentence=sentence)
        dense["zero_shot"] = evidence.ZeroShotEvidence(index, sentence, words, indexes.frames())
    encoded = None
    if trained is not None:
        encoded, _ = trained.encode_text([text], minilm=stock)
        if "model" in kinds:
            dense["model"] = evidence.ModelEvidence(trained, encoded, ids)
    shared = spread(match.labels, indexes.look_alikes().nearest, novelty) if match.labels else {}
    named = np.array([*shared, *match.positive, *match.rejected], np.int64)
    rows, sample = evidence.candidate_rows(ids, trained, encoded, named)
    novel = evidence.novel_cover(match.labels, match.shares, novelty)
    user = evidence.UserEvidence(*(evidence.on_rows(v, ids, rows) for v in
                                   (match.lexical, match.semantic, shared, match.rejected, novel)))
    content = content_words(text)
    share = sum(novelty.get(w, 0.0) for w in set(content)) / len(set(content)) if content else 0.0
    calibrated = calibration.load("model" if "model" in dense else "zero_shot")
    if calibrated is None:  # no fitted parameters: the hand-set sum of z-scores (before #40)
        positive = {**shared, **{k: max(v, shared.get(k, 0.0)) for k, v in match.positive.items()}}
        words_arr = evidence.on_rows(positive, ids, rows)
        ranking = evidence.fuse(dense, rows, sample, words_arr if positive else None,
                                user.rejected if match.rejected else None, user_share=share)
        return ids, ranking, trained, encoded
    log_frames = indexes.log_frames()[rows] if "zero_shot" in dense else None
    # the user's own words ("Biscuit", their dog) are no words of the models': what the models read in them (a
    # cookie) is no evidence of a match
    familiar = calibration.familiarity(
        content, lambda w: w not in own and (encoders.minilm.knows(w) or encoders.glove.knows(w)))
    ranking = evidence.fuse(dense, rows, sample, user_share=share, calibrated=calibrated, user=user,
                            familiar=familiar, n_items=len(ids), log_frames=log_frames)
    return ids, ranking, trained, encoded
