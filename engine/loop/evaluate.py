"""Evaluation on a caption folder of the zero-shot ranking and of a registered model, ranked the way the app
ranks (the same metrics the trainer reports).

Features of the folder's media come from the shared feature store (computed once, by content hash), so a
second evaluation of the same folder never runs the backbone again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from engine.features.extract import ensure_features
from engine.features.featurestore import FeatureRecord, FeatureStore
from engine.features.regional import content_words
from engine.files import content_hash
from engine.library.captionfolder import CaptionFolder, CaptionFolderError, load_caption_folder
from engine.loop.errors import RetrainError
from engine.search.evidence import ArrayEvidence, fuse
from engine.search.pcme import model_match_probability
from engine.search.trained import TrainedSearch
from engine.search.vectorindex import kxk_scores
from engine.search.zeroshot import ZeroShotIndex
from engine.state import LibraryState
from engine.trainercontract.metrics import measure
from engine.trainercontract.reports import RetrievalReport
from engine.types import ZERO_SHOT, EvidenceKind

# how a model is measured: (folder, split, model or None for zero-shot, distractors) -> a retrieval report
Evaluate = Callable[..., RetrievalReport]


def evaluate_on(service: LibraryState, folder: Path, split: str | None, model: str | None = None,
                distractors: Sequence[Path] = (), per_query: bool = False) -> RetrievalReport:
    """R@1/5/10 both ways and rsum (:class:`engine.trainercontract.metrics.RetrievalReport`) of a registered model
    of the library on one split of a caption folder; ``None`` (or ``zero-shot``) scores the zero-shot
    ranking. ``distractors`` (trained models): more media each caption's item is ranked among. ``per_query``: the
    report keeps each query's rank (``ranks``), which the gate's interval compares query by query."""
    if model in (None, ZERO_SHOT):
        return evaluate_zero_shot(Path(folder), split, service.features, service.encoders, per_query=per_query)
    return evaluate_trained(service, Path(folder), split, model, distractors, per_query=per_query)


def evaluate_zero_shot(folder: Path, split: str | None, store: FeatureStore, encoders,
                       progress=None, per_query: bool = False) -> RetrievalReport:
    """R@K both ways of the zero-shot ranking on one split of a caption folder (``per_query``: with each query's
    rank, :func:`engine.trainercontract.metrics.retrieval_report`)."""
    data = load_caption_folder(folder)
    if split:
        if split not in data.splits():
            raise ValueError(f"split {split!r} is not in {folder} (splits: {', '.join(data.splits())})")
        data = data.split(split)
    paths_ = [item.path for item in data.items]
    for p in ensure_features(paths_, store, encoders):
        if progress:
            progress(p)
    hashes = [content_hash(p) for p in paths_]
    backbone = encoders.backbone.id
    present = set(hashes) - set(store.missing(hashes, backbone))
    keep = [i for i, h in enumerate(hashes) if h in present]
    position = {item: row for row, item in enumerate(keep)}
    captions = [(position[i], text) for i, text in data.captions if i in position]
    scores = zero_shot_matrix([hashes[i] for i in keep], [t for _, t in captions], store, encoders)
    report = measure(scores, np.array([m for m, _ in captions]), per_query=per_query)
    return report.evaluated(model=ZERO_SHOT, split=split or "all", n_failed=len(paths_) - len(keep))


def zero_shot_matrix(hashes: list[str], texts: list[str], store: FeatureStore, encoders) -> np.ndarray:
    """The zero-shot scores (items, captions) of items (by content hash) for captions, as the app ranks."""
    backbone = encoders.backbone.id
    if not hashes:
        return np.zeros((0, len(texts)), np.float32)
    index = ZeroShotIndex(encoders.class_embeddings, store.stack(hashes, backbone, "image_top_ids"),
                          store.stack(hashes, backbone, "image_top_probs"))
    sentences = encoders.minilm.encode(texts).sentence
    vocab = sorted({w for t in texts for w in content_words(t)})
    word_index = {w: i for i, w in enumerate(vocab)}
    words = encoders.minilm.encode(vocab).sentence if vocab else np.zeros((0, 384), np.float32)
    scores = np.empty((len(hashes), len(texts)), np.float32)
    for j, text in enumerate(texts):
        scores[:, j] = index.score(sentences[j], words[[word_index[w] for w in content_words(text)]])
    return scores


def fused_matrix(model: np.ndarray, zero_shot: np.ndarray) -> np.ndarray:
    """Each caption's column ranked the way the app ranks it: the model and the zero-shot semantics fused by
    :func:`engine.search.evidence.fuse` over the items."""
    rows = np.arange(model.shape[0])
    out = np.empty(model.shape, np.float32)
    for j in range(model.shape[1]):
        out[:, j] = fuse({EvidenceKind.MODEL: ArrayEvidence(EvidenceKind.MODEL, model[:, j]),
                          EvidenceKind.ZERO_SHOT: ArrayEvidence(EvidenceKind.ZERO_SHOT, zero_shot[:, j])}, rows).total
    return out


def evaluate_trained(service: LibraryState, folder: Path, split: str | None, model: str,
                     distractors: Sequence[Path] = (), fused: bool = True,
                     per_query: bool = False) -> RetrievalReport:
    """R@K both ways of a registered model on one split of a caption folder, ranked the way the app ranks:
    K x K max cosine (PVSE §3.4; VSE++ for K = 1), PCME's match probability (PCME eq. 2) for PCME models.
    ``distractors``: more media files each caption's media is ranked among (text-to-media only; see
    :func:`engine.trainercontract.metrics.retrieval_report`). ``fused`` (the default): each caption ranked the way
    the app ranks it, the model beside the zero-shot semantics (:func:`fused_matrix`), so a retrain and its gate are
    judged on what the user gets; False: the model alone. ``per_query``: the report keeps each query's rank."""
    view = _split_view(folder, split)
    record = service.catalog.model(model)
    trained = TrainedSearch.open(record, service.catalog, service.features, service.encoders, service.library_dir)
    paths_ = [item.path for item in view.items]
    extra = [Path(p) for p in distractors]
    for _ in ensure_features([*paths_, *extra], service.features, trained.encoders):  # the model's backbone's
        pass
    backbone = trained.encoders.backbone.id
    feats = [service.features.get(content_hash(p), backbone) for p in paths_]
    keep = [i for i, f in enumerate(feats) if f is not None]
    position = {item: row for row, item in enumerate(keep)}
    captions = [(position[i], text) for i, text in view.captions if i in position]
    if not captions:
        raise RetrainError(f"{folder}: split {split or 'all'!r} has no captions of decodable media to evaluate on")
    texts, _ = trained.encode_text([t for _, t in captions])

    def scores_of(records: list[FeatureRecord]) -> np.ndarray:
        items = [trained.encode_media_features(_with_local(r)) for r in records]
        if trained.runner.probabilistic:
            mu = np.concatenate([e.mu for e in items])
            log_sigma = np.concatenate([e.log_sigma for e in items])
            return model_match_probability(trained.runner.manifest, texts.mu, texts.log_sigma, mu, log_sigma).T
        emb = np.concatenate([e.emb for e in items])
        return np.stack([kxk_scores(query, emb)[0] for query in texts.emb], axis=1)

    scores = scores_of([feats[i] for i in keep])
    others = [(p, f) for p in extra if (f := service.features.get(content_hash(p), backbone)) is not None]
    distracting = scores_of([f for _, f in others]) if others else None
    if fused:  # the ranking the user gets: the model beside the zero-shot semantics (engine/search/evidence.py)
        if trained.encoders.backbone.id != service.encoders.backbone.id:  # the stock features the semantics read
            for _ in ensure_features([*paths_, *extra], service.features, service.encoders):
                pass
        hashes = [content_hash(paths_[i]) for i in keep] + [content_hash(p) for p, _ in others]
        both = np.concatenate([scores, distracting]) if distracting is not None else scores
        zero = zero_shot_matrix(hashes, [t for _, t in captions], service.features, service.encoders)
        both = fused_matrix(both, zero)
        scores, distracting = both[:len(keep)], (both[len(keep):] if distracting is not None else None)
    report = measure(scores.astype(np.float64), np.array([row for row, _ in captions]),
                     distractors=distracting.astype(np.float64) if distracting is not None else None,
                     per_query=per_query)
    return report.evaluated(model=model, method=trained.runner.method, split=split or "all",
                            n_failed=len(view.items) - len(keep))


def _with_local(record: FeatureRecord) -> FeatureRecord:
    """A photo past the feature store's local-feature cap has no ``local``: its global feature stands in for
    every region, as :meth:`engine.search.trained.TrainedSearch.encode_items` does."""
    if record.local is None and record.frames is None:
        return dataclasses.replace(record, local=np.repeat(record.global_[None], 49, 0))
    return record


def _split_view(folder: Path, split: str | None) -> CaptionFolder:
    data = load_caption_folder(folder)
    try:
        return data if split is None else data.split(split)  # CaptionFolder.split names the missing split
    except CaptionFolderError as exc:
        raise RetrainError(str(exc)) from exc
