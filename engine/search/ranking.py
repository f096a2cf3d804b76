"""The ranking of a sentence over a library, in one room (issue #40): every kind of evidence gathered here and fused
by :func:`engine.search.evidence.fuse` on the calibrated scale of :mod:`engine.search.calibration`.

The service asks :func:`rank_sentence` and pages its result (:func:`page_of_hits`); the inspector reads the same
ranking's numbers (:func:`engine.search.explanation.ranking_note`); the benchmarks and ``tools/fit_calibration.py``
read its parts.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np

from engine.features.regional import content_words
from engine.library.browse import split_captions
from engine.library.catalog import MediaStatus
from engine.search import calibration, evidence
from engine.search.vectorindex.scoring import normalise
from engine.search.words import WordsMatch, spread
from engine.types import EvidenceKind, MediaKind, SearchHit, evidence_kinds

OWN_WORD = 0.5  # novelty (evidence.word_novelty) from which a word the user wrote is read as theirs alone
# What a name's items look like, in the model's query (:func:`ground_names`): its weight, a pseudo-count (a name on
# n items pulls n / (n + NAME_PRIOR) of it) and the fewest items that make a name. Chosen on the train side (the
# named dogs of the Flickr8k slice the starter held aside and tools/fit_calibration.py's situations): a rare word
# in one or two ordinary captions pulled queries about other photos toward them (R@10 -1.0), a name on 4+ does not
# (docs/benchmarks.md, "A name in the model's query").
NAME_LOOK = 0.5
NAME_PRIOR = 8
NAME_ITEMS = 4


def ground_names(encoded, trained, named: dict[str, tuple[int, ...]], novelty: dict[str, float],
                 weight: float | None = None, used: dict[str, int] | None = None):
    """The model's query with the user's own words read through their items: each head of the query vector moves
    toward the mean of the model's vectors of the items a word is written on (weighted by how new the word is to
    the model and by how many items carry it: :data:`NAME_PRIOR`, :data:`NAME_ITEMS`) and is normalised again, so
    "Biscuit jumps over a log" asks the model for something that looks like the photos named Biscuit *and* jumps
    over a log (the look-alikes' spread, :func:`spread`, adds evidence; this asks for both at once). Items the
    model has not embedded are skipped; nothing named: ``encoded`` itself. ``used`` (filled in): each word that
    moved the query, with its number of items (the inspector says so)."""
    weight = NAME_LOOK if weight is None else weight
    look = np.zeros(encoded.emb.shape[-1], np.float32)
    for word, items in named.items():
        ids = np.array(items, np.int64)
        ids = ids[trained.index.known(ids)]
        if not len(ids):
            continue
        vectors = trained.index.get(ids).mean(axis=1)  # (n, D): an item's heads together
        mean = normalise(vectors).mean(axis=0)
        strength = novelty.get(word, 1.0) * (len(ids) / (len(ids) + NAME_PRIOR) if len(ids) >= NAME_ITEMS else 0.0)
        look += strength * mean / max(float(np.linalg.norm(mean)), 1e-9)
        if strength > 0 and used is not None:
            used[word] = len(ids)
    if not look.any():
        return encoded
    moved = {"emb": normalise(encoded.emb + weight * look)}
    if encoded.mu is not None:
        moved["mu"] = encoded.mu + weight * look * np.linalg.norm(encoded.mu, axis=-1, keepdims=True)
    return replace(encoded, **moved)


def rank_sentence(text: str, indexes, encoders, trained, kinds: Collection[EvidenceKind | str]):
    """``(ids, ranking, trained, encoded query)`` of ``text`` over the library (None: nothing indexed).

    ``indexes``: the library's indexes (:class:`engine.search.libraryindexes.LibraryIndexes`: zero-shot, user
    words, look-alikes, frames); ``trained``: the active model's :class:`engine.search.trained.TrainedSearch` or
    None (zero-shot ranking); ``kinds``: the evidence used (:class:`engine.types.EvidenceKind`, or their names;
    benchmarks drop some; ``ValueError`` for a name that is no kind).
    """
    kinds = evidence_kinds(kinds)
    ids, index = indexes.zero_shot()
    if not len(ids):
        return None
    # a model with MiniLM layers of its own (the starter, #41) encodes the query on the helper meanwhile: the two
    # encodings (~4 ms each) overlap instead of adding up
    early = _helper_pool().submit(trained.encode_text, [text]) if _own_text(trained, kinds) else None
    stock = encoders.minilm.encode([text])  # the zero-shot semantics and a model on stock MiniLM share it
    sentence = stock.sentence[0]
    match = indexes.user_words().match(text, normalise(sentence)) if EvidenceKind.WORDS in kinds else WordsMatch({}, {})
    # a word the user wrote on items is theirs in proportion to how new it is to the ranking in use: "Biscuit"
    # means what its items show, not an ImageNet class; "dog" written on dog photos stays the semantics' word
    novelty = (evidence.word_novelty(match.labels, ids, index, trained, indexes.zero_shot_query)
               if match.labels else {})
    own = {word for word, new in novelty.items() if new >= OWN_WORD}
    named = {w: match.labels[w][1] for w in own if w in match.labels}
    beside = _start_beside(text, stock, trained, named, novelty, ids) if EvidenceKind.MODEL in kinds else {}
    dense: dict[str, evidence.Evidence] = {}
    if EvidenceKind.ZERO_SHOT in kinds or trained is None:
        _, words = indexes.zero_shot_query(text, exclude=own, sentence=sentence)
        dense[EvidenceKind.ZERO_SHOT] = evidence.ZeroShotEvidence(index, sentence, words, indexes.frames())
    encoded, names = None, {}
    if trained is not None:
        encoded, _ = early.result() if early is not None else trained.encode_text([text], minilm=stock)
        if named and NAME_LOOK:
            encoded = ground_names(encoded, trained, named, novelty, used=names)
        if EvidenceKind.MODEL in kinds:
            dense[EvidenceKind.MODEL] = evidence.ModelEvidence(trained, encoded, ids)
            dense.update(beside)  # its companions' scores beside it, by the same rule
    shared = spread(match.labels, indexes.look_alikes().nearest, novelty) if match.labels else {}
    named = np.array([*shared, *match.positive, *match.rejected], np.int64)
    rows, sample = evidence.candidate_rows(ids, trained, encoded, named)
    novel = evidence.novel_cover(match.labels, match.shares, novelty)
    described = dict.fromkeys(indexes.user_words().described(), 1.0) if EvidenceKind.WORDS in kinds else {}
    user = evidence.UserEvidence(*(evidence.on_rows(v, ids, rows) for v in
                                   (match.lexical, match.semantic, shared, match.rejected, novel, described)))
    content = content_words(text)
    share = sum(novelty.get(w, 0.0) for w in set(content)) / len(set(content)) if content else 0.0
    calibrated = calibration.load(EvidenceKind.MODEL if EvidenceKind.MODEL in dense else EvidenceKind.ZERO_SHOT)
    if calibrated is None:  # no fitted parameters: the hand-set sum of z-scores (before #40)
        positive = {**shared, **{k: max(v, shared.get(k, 0.0)) for k, v in match.positive.items()}}
        words_arr = evidence.on_rows(positive, ids, rows)
        ranking = evidence.fuse(dense, rows, sample, words_arr if positive else None,
                                user.rejected if match.rejected else None, user_share=share)
        return ids, ranking, trained, encoded
    log_frames = indexes.log_frames()[rows] if EvidenceKind.ZERO_SHOT in dense else None
    # the user's own words ("Biscuit", their dog) are no words of the models': what the models read in them (a
    # cookie) is no evidence of a match
    familiar = calibration.familiarity(
        content, lambda w: w not in own and (encoders.minilm.knows(w) or encoders.glove.knows(w)))
    ranking = evidence.fuse(dense, rows, sample, user_share=share, calibrated=calibrated, user=user,
                            familiar=familiar, n_items=len(ids), log_frames=log_frames)
    if EvidenceKind.MODEL in dense:  # each name as the query spells it ("Biscuit", not the index's "biscuit")
        ranking.names.update({_as_written(word, text): items for word, items in names.items()})
    return ids, ranking, trained, encoded


_helper: ThreadPoolExecutor | None = None
_helper_lock = threading.Lock()


def _start_beside(text: str, stock, trained, named: dict, novelty: dict, ids: np.ndarray) -> dict:
    """The sources of the models searched beside ``trained`` (:func:`evidence.beside`), made on a helper thread
    while this one reads the zero-shot semantics, encodes the model's query and finds its candidates: each
    companion's query encoded and, in a large library, its share of the fixed sample scored (ONNX Runtime, NumPy's
    products and the vector index let go of the GIL). Those were ~1.7 ms of a 14 ms query at 100,000 items on the
    query's one thread (docs/benchmarks.md, "Fewer candidates for the companions")."""
    others = evidence.beside(trained)
    if not others:
        return {}
    for _, other in others:
        other.frame_vectors()  # a library's clips are read from the catalog on first use: on the catalog's thread
    sample = evidence.fixed_sample(len(ids)) if evidence.takes_candidates(len(ids), trained) else None
    future = _helper_pool().submit(_beside_sources, others, text, stock, named, novelty, ids, sample)
    return {kind: evidence.Prefetched(kind, future) for kind, _ in others}


def _helper_pool() -> ThreadPoolExecutor:
    """The one helper thread the queries of every thread share."""
    global _helper
    with _helper_lock:
        if _helper is None:
            _helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="polyseek-beside")
    return _helper


def _own_text(trained, kinds) -> bool:
    """Whether ``trained`` reads a fine-tuned MiniLM of its own (its query is encoded apart from the stock one)."""
    return trained is not None and EvidenceKind.MODEL in kinds and trained.runner.manifest.text_model is not None


def _beside_sources(others: list, text: str, stock, named: dict, novelty: dict, ids: np.ndarray,
                    sample: np.ndarray | None) -> dict[str, evidence.ModelEvidence]:
    out = {}
    for kind, other in others:
        query, _ = other.encode_text([text], minilm=stock)
        if named and NAME_LOOK:
            query = ground_names(query, other, named, novelty)
        source = out[kind] = evidence.ModelEvidence(other, query, ids, kind)
        own = evidence.beside_sample(sample)
        if own is not None:
            source.calibrate(own)
            source.prefetch(own)
    return out


def _as_written(term: str, text: str) -> str:
    """``term`` (lower case, as the user-words index keys it) spelt as it appears in ``text``, else itself."""
    found = re.search(rf"\b{re.escape(term)}\w*", text, re.IGNORECASE)
    return found.group(0) if found else term


def page_of_hits(catalog, ids: np.ndarray, ranking, trained, encoded, top: int, offset: int,
                 min_probability: float | None, scope: np.ndarray | None = None,
                 exclude: int | None = None) -> list[SearchHit]:
    """A page of a ranking (:func:`rank_sentence`'s, or a picture's) as the hits a search returns: the calibrated
    probability and its word for every model, PCME's uncertainty beside it; ``min_probability`` drops what falls
    under it (a probabilistic model without a calibration: its own match probability, PCME eq. 2); ``scope``: the
    only media ids kept; ``exclude``: one left out (Find similar's own item). Two catalog reads for the page; an
    item gone since the index was loaded is skipped."""
    order = ranking.order()
    if scope is not None:
        order = order[np.isin(ids[ranking.rows[order]], scope)]
    if exclude is not None:
        order = order[ids[ranking.rows[order]] != exclude]
    probabilistic = trained is not None and encoded is not None and trained.runner.probabilistic
    calibrated = ranking.parts.get("probability")
    picked: list[tuple[int, float, float | None, float | None]] = []  # (position, score, prob, uncertainty)
    if calibrated is not None:  # one calibrated probability for every model (#40); PCME adds its sigma
        if min_probability is not None:
            order = order[calibrated[order] >= min_probability]
        chosen = order[offset:offset + top]
        unc = (trained.match_probability(encoded, ids[ranking.rows[chosen]])[1].tolist()
               if probabilistic and len(chosen) else [None] * len(chosen))
        picked = [(int(p), float(ranking.total[p]), float(calibrated[p]), u)
                  for p, u in zip(chosen.tolist(), unc, strict=True)]
    elif not probabilistic:
        picked = [(int(p), float(ranking.total[p]), None, None) for p in order[offset:offset + top]]
    else:
        want, start, kept = offset + top, 0, []
        while len(kept) < want and start < len(order):
            chunk = order[start:start + max(want, 200)]
            start += len(chunk)
            prob, unc = trained.match_probability(encoded, ids[ranking.rows[chunk]])
            for p, pr, un in zip(chunk.tolist(), prob.tolist(), unc.tolist(), strict=True):
                if min_probability is None or pr >= min_probability:
                    kept.append((p, float(ranking.total[p]), float(pr), float(un)))
        picked = kept[offset:offset + top]
    page = [int(ids[ranking.rows[p]]) for p, *_ in picked]
    records, texts = catalog.media_of(page), catalog.captions_of(page)
    hits = []
    for p, score, prob, unc in picked:
        row = int(ranking.rows[p])
        media = records.get(int(ids[row]))
        if media is None or media.status == MediaStatus.MISSING:  # gone since the index was loaded
            continue
        captions, guess = split_captions(texts.get(media.id, ()))
        word = ranking.calibrated.word(prob) if ranking.calibrated is not None and prob is not None else None
        hits.append(SearchHit(media.id, str(media.path), MediaKind(media.kind), score, captions, prob, unc,
                              ranking.head_pair_of(row), ranking.frame_of(row), guess, word))
    return hits
