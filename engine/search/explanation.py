"""Why an item matched a query, as the inspector shows it: the trained model's attention, or (a model without
attention, or none) which classes seen in the item's regions match the query's words, and what the user wrote on
the item that the ranking counted. What such an explanation can honestly say is :mod:`engine.search.readings`.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from engine.features.encoders import Encoders
from engine.features.featurestore import FeatureRecord, FeatureStore
from engine.features.regional import content_words
from engine.library.catalog import MediaRecord
from engine.media import MediaError
from engine.search.readings import word_matches
from engine.search.trained import TrainedSearch
from engine.search.vectorindex.scoring import normalise
from engine.search.words import UserWords
from engine.types import Explanation, percent

EXAMPLE_NOTE = ("zero-shot ranking: no trained model, no attention; a search by example ranks items by how alike the "
                "backbone's features of the two pictures are")


def explain_item(query: str | Path, record: MediaRecord, trained: TrainedSearch | None, features: FeatureStore,
                 encoders: Encoders) -> Explanation:
    """The explanation of ``record`` for a sentence or an example file, under the active model ``trained``
    (None: the zero-shot ranking)."""
    if trained is None:
        feats = features.get(record.content_hash, encoders.backbone.id)
        if feats is None:
            raise LookupError(f"{record.path} has no features yet (index it first)")
        if isinstance(query, Path):  # ranked by how alike the backbone sees the two pictures: no words to match
            return _zero_shot_explanation((), EXAMPLE_NOTE)
        return _zero_shot_explanation(_word_matches(str(query), record, features, encoders))
    read: dict[str, FeatureRecord] = {}  # an example file's features, read once per backbone for every model asked
    if trained.companion is not None and trained.runner.num_embeddings == 1:
        # a K = 1 model has no heads (for a clip, one weight per frame): the companion's, which rank beside it
        # (engine.search.companion), explain, over a photo's regions or a clip's frames; asked first, so the model's
        # own explanation is not made for nothing
        beside = _model_explanation(query, record, trained.companion, read)
        if beside.item_attention.size:
            note = (f"{beside.notes[0]}: the heads of the model searched beside {trained.record.name} "
                    f"({trained.runner.method}, K={trained.runner.num_embeddings}, one vector per item); the two "
                    "rank together")
            return _with_uncertainty(replace(beside, notes=(note, *beside.notes[1:])), query, record,
                                     trained.companion.companion, read)
    explained = _model_explanation(query, record, trained, read)
    if explained.item_attention.size or isinstance(query, Path):
        return explained
    # no attention (VSE, K = 1): the regional semantics the ranking fuses with the model explain instead
    method = f"{trained.runner.method}, K={trained.runner.num_embeddings}"
    note = (f"model {trained.record.name} ({method}) makes one vector of the whole item and one of the whole "
            "query: it has no per-word or per-region attention to show. What can be shown: which classes "
            "seen in this item's regions match your words (the zero-shot semantics the search weighs beside "
            "the model).")
    return replace(explained, notes=(note, *explained.notes[1:]),
                   word_matches=_word_matches(str(query), record, features, encoders))


# What a probabilistic model's explanation adds to the heads': the match probability, the sigmas, their readings.
UNCERTAINTY_FIELDS = ("query_uncertainty", "item_uncertainty", "match_probability", "match_probability_by",
                      "query_sigma", "item_sigma",
                      "query_mu_2d", "item_mu_2d", "item_uncertainty_percentile", "library_items",
                      "library_uncertainty_range", "uncertainty_calibration")


def _with_uncertainty(explained: Explanation, query: str | Path, record: MediaRecord,
                      probabilistic: TrainedSearch | None, read: dict[str, FeatureRecord]) -> Explanation:
    """``explained`` (the heads') with the uncertainty of the probabilistic model searched beside it (the shipped
    companion's own companion, :mod:`engine.search.companion`): the item's and the query's sigma, where they sit in
    the library and what they meant on that model's validation split. Unchanged when there is none, or it
    cannot explain this item (logged nowhere: the heads still explain)."""
    if probabilistic is None or not probabilistic.runner.probabilistic:
        return explained
    try:
        sigma = _model_explanation(query, record, probabilistic, read)
    except (LookupError, MediaError):
        return explained
    note = (f"uncertainty: model {probabilistic.record.name} ({probabilistic.runner.method}), searched beside "
            "the two")
    return replace(explained, **{name: getattr(sigma, name) for name in UNCERTAINTY_FIELDS},
                   notes=(*explained.notes, note))


def _model_explanation(query: str | Path, record: MediaRecord, trained: TrainedSearch,
                       read: dict[str, FeatureRecord]) -> Explanation:
    """One trained model's explanation of ``record`` for a sentence or an example file (its attention, if any);
    ``read``: the example's features by backbone, filled here (the models beside one share its backbone pass)."""
    if isinstance(query, Path):
        backbone = trained.encoders.backbone.id
        if backbone not in read:
            result = trained.encoders.extractor().extract([query])[0]
            if isinstance(result, MediaError):
                raise result
            read[backbone] = result.record
        encoded = trained.encode_media_features(read[backbone])
        tokens = tuple(f"region {i}" for i in range(encoded.attention.shape[-1])) \
            if encoded.attention is not None else ("example",)
    else:
        encoded, token_lists = trained.encode_text([str(query)])
        tokens = tuple(token_lists[0])
    return trained.explain(encoded, tokens, record)


def your_words_note(query: str, media_id: int, words: UserWords, encoders: Encoders) -> str | None:
    """What the user wrote on this item that the ranking counts for ``query`` (the words evidence of
    :mod:`engine.search.evidence`), in words; None when it counts nothing."""
    if not len(words):
        return None
    found = words.match(query, normalise(encoders.minilm.encode([query]).sentence[0]))

    def quoted(rejected: bool) -> str:
        texts = [t for m, t, r in zip(words.media.tolist(), words.texts, words.rejected.tolist(), strict=True)
                 if m == media_id and r == rejected]
        return ", ".join(f"\u201c{t}\u201d" for t in texts[:2]) + (" ..." if len(texts) > 2 else "")

    lines = []
    if found.positive.get(media_id, 0.0) > 0:
        cover, near = found.lexical.get(media_id, 0.0), found.semantic.get(media_id, 0.0)
        meaning = "says what the search says" if near >= 0.8 else "is close in meaning" if near > 0.3 else \
            "is far from the search in meaning"
        # every word of the search written on the item (a name): how far the whole caption is from the few words
        # of the search says nothing more, and "far in meaning" beside a strong match read as a contradiction
        said = "." if cover >= 0.995 else f" and {meaning}."
        lines.append(f"What you wrote counts here: {quoted(False)} covers {cover:.0%} of this search's words{said}")
    if found.rejected.get(media_id, 0.0) > 0:
        lines.append(f"You rejected this item for {quoted(True)}, a search like this one: its chance of matching "
                     f"is cut by {found.rejected[media_id]:.0%}.")
    return " ".join(lines) or None


def ranking_note(ranking, position: int) -> str | None:
    """How the calibrated ranking (:mod:`engine.search.calibration`) placed the item at ``position`` of
    ``ranking.rows``, from the same numbers: its probability and what each kind of evidence added, in log-odds
    points; None for an uncalibrated ranking."""
    fitted = ranking.calibrated
    if fitted is None:
        return None
    parts = ranking.parts
    adds = fitted.contributions(ranking.features, position)
    p = float(parts["probability"][position])
    said = [f"the models' reading of the picture {adds['models']:+.1f}"]
    if abs(adds["captions"]) >= 0.05:
        said.append(f"what you wrote on it {adds['captions']:+.1f}")
    if abs(adds["look_alikes"]) >= 0.05:
        said.append(f"its look-alikes among the items you named {adds['look_alikes']:+.1f}")
    rejected = parts.get("rejected")
    tail = " It was rejected for a search like this one." if rejected is not None and rejected[position] > 0 else ""
    for word, items in sorted(ranking.names.items()):  # a name moved the model's query (ranking.ground_names)
        tail += (f" The model read \u201c{word}\u201d, a name you wrote on {items} items, as what those items look "
                 "like.")
    return (f"{fitted.word(p).capitalize()} match, {percent(p)}: the chance that this is what the search asks for, "
            f"calibrated on photos and videos no model here trained on. Log-odds: start {adds['start']:+.1f} (one item "
            f"among the library's), " + ", ".join(said) + "." + tail)


def _word_matches(query: str, record: MediaRecord, features: FeatureStore, encoders: Encoders) -> tuple:
    """Each content word of ``query`` against the item's regional semantics
    (:func:`engine.search.readings.word_matches`); empty when the item has none stored."""
    feats = features.get(record.content_hash, encoders.backbone.id)
    if feats is None or feats.region_top_ids is None or feats.region_top_probs is None:
        return ()
    return word_matches(content_words(query), feats.region_top_ids, feats.region_top_probs,
                        encoders.class_names, encoders.class_embeddings,
                        lambda words: encoders.minilm.encode(words).sentence)


def _zero_shot_explanation(matches: tuple, note: str | None = None) -> Explanation:
    """The zero-shot ranking has no attention: it ranks a sentence by the classes seen in the item's regions, so it
    explains by which of them match the query's words (``matches``, :func:`engine.search.readings.word_matches`);
    ``note`` says instead what ranked (a search by example)."""
    empty = np.zeros((0, 0), np.float32)
    found = [m for m in matches if m.class_name is not None]
    note = note or ("zero-shot ranking: no trained model, no attention; items are ranked by the classes seen in "
                    "their regions (regional semantics)"
                    + ("" if found else ", and none of them is close to a word of this query"))
    return Explanation(tuple(m.word for m in matches), empty, empty, None, empty, (0, 0), notes=(note,),
                       word_matches=matches)
