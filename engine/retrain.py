"""The library loop: the user's annotations -> an A3VSE training run -> a new model version -> before/after.

One retraining (:class:`Retrain`, run by ``polyseek retrain`` and by the GUI in a worker) goes:

1. **Training set** (:func:`build_training_set`). A caption folder under the library's folder whose media are
   symbolic links to the library's files. Split ``train`` holds the annotated items (their user and imported
   captions, plus the queries of accepted pairs) - A3VSE's annotated corpus D^l - and every un-annotated item
   with no caption at all, which the trainer pairs with its regional-semantics pseudo caption: A3VSE's D^u
   (Huang et al. 2019, §3.2 and §4.1; ``trainer.data.load_training_data`` with ``with_pseudo``). Split
   ``heldout`` holds the annotated items kept aside, which the run never trains on.
2. **Before**: the model searches use now (a trained one or the zero-shot ranking) is scored on ``heldout``.
3. **Training**: ``python -m trainer train --method a3vse ... --json-progress`` in its own process; the
   method's recipe is the paper's schedule unless ``--epochs`` / ``--set`` say otherwise.
4. **New model version**: the run's folder is registered under a new name and made active; the library is
   re-indexed, which embeds every item with it.
5. **After**: the new model is scored on ``heldout`` the same way as in step 2, so the two numbers compare.

Held-aside annotations. An annotated item is held aside when ``u(seed, content hash) < holdout``, where
``u`` maps the pair to [0, 1) through BLAKE2b. The decision depends on nothing but the item's content, so
an item stays on its side across retrains and however many items are annotated later: a model is never
evaluated on an item an earlier version trained on (unless ``holdout`` or ``seed`` change). The fraction is
respected on average (each item is held with probability ``holdout``), not exactly: with few annotations
it may hold none, which is why the set warns below :data:`MIN_ANNOTATED_ITEMS` annotated items or
:data:`MIN_HELDOUT_ITEMS` held-aside ones - fewer than 3 items give R@K in steps of 33 points or more, and
fewer than 10 annotated items leave too little to train on for a difference to mean anything.

Caveat: the trainer selects its best epoch on the validation split, which is ``heldout``; with a fixed
epoch budget that only picks among epochs, but the "after" number is then slightly optimistic.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from engine.captionfolder import (
    MEDIA_DIR_NAMES,
    MEDIA_EXTENSIONS,
    CaptionFolder,
    CaptionFolderError,
    Item,
    check_file_key,
    export_coco_captions,
    load_caption_folder,
    read_coco_captions,
    write_caption_folder,
)
from engine.catalog import Catalog, MediaRecord, MediaStatus, content_hash
from engine.featurestore import FeatureRecord
from engine.progress import Cancelled, CancelToken, Progress
from engine.types import CaptionSource

if TYPE_CHECKING:
    from engine.service import SearchService
    from engine.trained import TrainedSearch

log = logging.getLogger(__name__)

TRAIN_SPLIT = "train"
HELDOUT_SPLIT = "heldout"
DEFAULT_HOLDOUT = 0.2
DEFAULT_METHOD = "a3vse"
MIN_ANNOTATED_ITEMS = 10  # below this, a retrained model's numbers mean little (module docstring)
MIN_HELDOUT_ITEMS = 3  # below this, R@K moves in steps of 33 points or more
MARKER_FILE = ".polyseek-training-set"  # only a folder carrying it is ever replaced
ANNOTATION_FORMATS = ("folder", "coco")
SUGGEST_POLICIES = ("auto", "uncertainty", "disagreement", "random")
MATCH_SEED = 0  # PCME Monte-Carlo samples of the evaluation: the same numbers every run


class RetrainError(RuntimeError):
    """A retraining cannot run or failed; the message says which step and why."""


class AnnotationError(ValueError):
    """An annotation export or import cannot be done; the message names the file or the format."""


# ------------------------------------------------------------------------------------------ the training set


@dataclass(frozen=True, slots=True)
class TrainingSet:
    """A caption folder written from a library for one retraining (see the module docstring)."""

    folder: Path
    train_split: str = TRAIN_SPLIT
    val_split: str = HELDOUT_SPLIT
    n_annotated_items: int = 0  # annotated items, held-aside ones included
    n_captions: int = 0  # training captions of the annotated items, held-aside ones included
    n_heldout_items: int = 0
    n_unannotated: int = 0  # D^u: items of the train split with no caption
    warning: str | None = None

    @property
    def n_train_annotated(self) -> int:
        """Annotated items the run trains on (D^l)."""
        return self.n_annotated_items - self.n_heldout_items


def holdout_key(content_hash_: str, seed: int = 0) -> float:
    """A number in [0, 1) fixed by an item's content hash and ``seed`` (BLAKE2b, so no PYTHONHASHSEED)."""
    digest = hashlib.blake2b(f"{seed}:{content_hash_}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0 ** 64


def is_held_aside(content_hash_: str, holdout: float, seed: int = 0) -> bool:
    """Whether an annotated item with this content is kept out of training (module docstring)."""
    check_holdout(holdout)
    return holdout_key(content_hash_, seed) < holdout


def check_holdout(holdout: float) -> float:
    """``holdout`` if it is a fraction in [0, 1); raises :class:`ValueError` naming it otherwise."""
    if not 0.0 <= float(holdout) < 1.0:
        raise ValueError(f"holdout: expected a fraction in [0, 1), got {holdout!r}")
    return float(holdout)


def training_warning(n_annotated: int, n_heldout: int) -> str | None:
    """The "too few annotations" message for a training set, or None when there are enough."""
    problems = []
    if n_annotated < MIN_ANNOTATED_ITEMS:
        problems.append(f"{n_annotated} annotated items (at least {MIN_ANNOTATED_ITEMS} recommended)")
    if n_heldout < MIN_HELDOUT_ITEMS:
        problems.append(f"{n_heldout} held aside for evaluation (at least {MIN_HELDOUT_ITEMS} needed for "
                        "R@K to mean much)")
    if not problems:
        return None
    return "too few annotations: " + "; ".join(problems) + ". Annotate more items to see whether retraining helps."


def library_annotations(catalog: Catalog) -> dict[int, list[str]]:
    """Training captions per media id: user and imported captions and accepted pairs' queries, each text once
    per item, oldest first. Pseudo captions and rejected pairs are not training captions."""
    out: dict[int, list[str]] = {}
    for caption in catalog.iter_captions():
        if caption.source != CaptionSource.PSEUDO:
            out.setdefault(caption.media_id, []).append(caption.text)
    for pair in catalog.pairs():
        if pair.label > 0:
            out.setdefault(pair.media_id, []).append(pair.query)
    return {media_id: list(dict.fromkeys(texts)) for media_id, texts in out.items()}


def build_training_set(catalog: Catalog, dest: Path, holdout: float = DEFAULT_HOLDOUT,
                       seed: int = 0) -> TrainingSet:
    """Write the retraining caption folder of a library at ``dest`` (replacing an earlier one there)."""
    check_holdout(holdout)
    annotations = library_annotations(catalog)
    checked = {m.id for m in pseudo_check_media(catalog, seed)}  # the gate's check set is never trained on
    media = [m for m in catalog.iter_media(MediaStatus.OK) if m.path.is_file() and m.id not in checked]
    entries: list[tuple[str, Path]] = []
    splits: list[str] = []
    captions: list[tuple[int, str]] = []
    n_annotated = n_heldout = n_captions = 0
    for record in media:
        texts = annotations.get(record.id, [])
        held = bool(texts) and is_held_aside(record.content_hash, holdout, seed)
        captions.extend((len(entries), text) for text in texts)
        entries.append((_training_key(record), record.path))
        splits.append(HELDOUT_SPLIT if held else TRAIN_SPLIT)
        n_annotated += bool(texts)
        n_heldout += held
        n_captions += len(texts)
    write_linked_folder(dest, entries, captions, splits)
    return TrainingSet(Path(dest), n_annotated_items=n_annotated, n_captions=n_captions,
                       n_heldout_items=n_heldout, n_unannotated=len(media) - n_annotated,
                       warning=training_warning(n_annotated, n_heldout))


def _training_key(record: MediaRecord) -> str:
    """``<id>-<file name>``: unique within the folder whatever the library's folders hold."""
    name = record.path.name
    try:
        name.encode("utf-8")
        return check_file_key(f"{record.id:06d}-{name}", str(record.path))
    except (UnicodeEncodeError, CaptionFolderError):  # a name a TSV cannot hold: keep only its extension
        suffix = record.path.suffix.lower()
        return f"{record.id:06d}{suffix if suffix in MEDIA_EXTENSIONS else ''}"


def write_linked_folder(dest: Path, entries: Sequence[tuple[str, Path]], captions: Sequence[tuple[int, str]],
                        splits: Sequence[str] | None = None) -> CaptionFolder:
    """Write a caption folder whose ``media/<key>`` are links to the given files, built beside ``dest`` and
    swapped in, so a reader never sees half a folder. An existing ``dest`` is only replaced when it is empty
    or was written by this function (it carries :data:`MARKER_FILE`)."""
    dest = Path(os.path.abspath(Path(dest).expanduser()))
    if dest.exists() and (not dest.is_dir() or (any(dest.iterdir()) and not (dest / MARKER_FILE).is_file())):
        raise AnnotationError(f"{dest} exists and is not a folder Polyseek wrote; choose an empty or new folder")
    dest.parent.mkdir(parents=True, exist_ok=True)
    build = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        media_dir = build / MEDIA_DIR_NAMES[1]
        for key, source in entries:
            _link(Path(source), media_dir / key)
        (build / MARKER_FILE).write_text("written by polyseek; replaced on the next export\n", encoding="utf-8")
        write_caption_folder(build, [media_dir / key for key, _ in entries], captions, splits, copy_media=False)
        old = None
        if dest.exists():
            old = dest.with_name(f".{dest.name}.old-{os.getpid()}-{time.monotonic_ns()}")
            os.replace(dest, old)
        os.replace(build, dest)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return load_caption_folder(dest)


def _link(source: Path, target: Path) -> None:
    """A symbolic link to ``source`` (a hard link or a copy where the system refuses symbolic links)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        target.symlink_to(source.resolve())
    except OSError:
        try:
            os.link(source, target)
        except OSError:
            shutil.copy2(source, target)


# ------------------------------------------------------------------------------------------ evaluation


def evaluate_trained(service: SearchService, folder: Path, split: str | None, model: str,
                     distractors: Sequence[Path] = ()) -> dict[str, Any]:
    """R@K both ways of a registered model on one split of a caption folder, ranked the way the app ranks:
    K x K max cosine (PVSE §3.4; VSE++ for K = 1), PCME's match probability (PCME eq. 2) for PCME models.
    ``distractors``: more media files each caption's media is ranked among (text-to-media only; see
    :func:`engine.metrics.retrieval_report`)."""
    from engine.evaluate import ensure_features
    from engine.metrics import retrieval_report
    from engine.trained import TrainedSearch
    from engine.vectorindex import kxk_scores

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
            from engine.modelrunner import match_probability

            m = trained.runner.manifest
            mu = np.concatenate([e.mu for e in items])
            log_sigma = np.concatenate([e.log_sigma for e in items])
            return match_probability(texts.mu, texts.log_sigma, mu, log_sigma, m.match_scale, m.match_shift,
                                     m.num_samples or 7, np.random.default_rng(MATCH_SEED)).T
        emb = np.concatenate([e.emb for e in items])
        return np.stack([kxk_scores(query, emb)[0] for query in texts.emb], axis=1)

    scores = scores_of([feats[i] for i in keep])
    others = [f for f in (service.features.get(content_hash(p), backbone) for p in extra) if f is not None]
    report = retrieval_report(scores.astype(np.float64), np.array([row for row, _ in captions]),
                              distractors=scores_of(others).astype(np.float64) if others else None)
    report.update(model=model, method=trained.runner.method, split=split or "all",
                  n_failed=len(view.items) - len(keep))
    return report


def _with_local(record: FeatureRecord) -> FeatureRecord:
    """A photo past the feature store's local-feature cap has no ``local``: its global feature stands in for
    every region, as :meth:`engine.trained.TrainedSearch.encode_items` does."""
    if record.local is None and record.frames is None:
        return dataclasses.replace(record, local=np.repeat(record.global_[None], 49, 0))
    return record


def _split_view(folder: Path, split: str | None) -> CaptionFolder:
    data = load_caption_folder(folder)
    try:
        return data if split is None else data.split(split)  # CaptionFolder.split names the missing split
    except CaptionFolderError as exc:
        raise RetrainError(str(exc)) from exc


# ------------------------------------------------------------------------------------------ active learning


def suggest(catalog: Catalog, trained: TrainedSearch | None, n: int = 20, policy: str = "auto",
            rng: np.random.Generator | None = None) -> list[tuple[int, float]]:
    """``(media_id, score)`` of the un-annotated items worth annotating next, best first (:mod:`engine.active`).

    ``uncertainty`` needs an active PCME model (score: geometric mean of the item's sigma); ``disagreement``
    an active model with K >= 2 heads (score: 1 - mean Jaccard overlap of the heads' nearest library captions,
    or pseudo captions when the library has none); ``random`` always applies (score 0). ``auto`` takes the
    first that applies in that order. ``trained`` is the active :class:`engine.trained.TrainedSearch`, or None
    while the zero-shot ranking is active.
    """
    from engine import active

    if policy not in SUGGEST_POLICIES:
        raise ValueError(f"policy: expected one of {', '.join(SUGGEST_POLICIES)}, got {policy!r}")
    annotated = library_annotations(catalog)
    candidates = np.array([m.id for m in catalog.iter_media(MediaStatus.OK) if m.id not in annotated],
                          dtype=np.int64)
    if n <= 0 or not len(candidates):
        return []
    chosen = policy
    if policy == "auto":
        chosen = "random"
        if trained is not None and trained.runner.probabilistic:
            chosen = "uncertainty"
        elif trained is not None and trained.runner.num_embeddings >= 2:
            chosen = "disagreement"
    if chosen == "random":
        rows = active.pick(np.zeros(len(candidates)), n, rng=rng or np.random.default_rng(), policy="random")
        return [(int(candidates[r]), 0.0) for r in rows]
    if trained is None:
        raise ValueError(f"policy {policy!r} needs an active trained model; the zero-shot ranking is active")
    for _ in trained.sync():  # items indexed since the model became active get their vectors first
        pass
    ids, vectors, extras = catalog.get_embeddings(trained.record.id, candidates.tolist())
    if not len(ids):
        return []
    if chosen == "uncertainty":
        if not trained.runner.probabilistic:
            raise ValueError(f"policy 'uncertainty' needs a PCME model; {trained.record.name!r} is "
                             f"{trained.runner.method}")
        scores = active.uncertainty_scores(extras["log_sigma"])
    else:
        if trained.runner.num_embeddings < 2:
            raise ValueError(f"policy 'disagreement' needs a model with K >= 2 heads; {trained.record.name!r} "
                             "has one")
        scores = active.head_disagreement(vectors, _caption_vectors(catalog, trained))
    rows = active.pick(scores, n)
    return [(int(ids[r]), float(scores[r])) for r in rows]


def _caption_vectors(catalog: Catalog, trained: TrainedSearch) -> np.ndarray:
    """(M x K, D) the library's training captions (else its pseudo captions) through the model's text encoder;
    every head of every caption is one row, so each item head finds its neighbours among all of them."""
    texts = sorted({t for texts in library_annotations(catalog).values() for t in texts})
    if not texts:
        texts = sorted({c.text for c in catalog.iter_captions(CaptionSource.PSEUDO)})
    if not texts:
        raise ValueError("policy 'disagreement' needs captions or pseudo captions in the library; index it first")
    encoded, _ = trained.encode_text(texts)
    return encoded.emb.reshape(-1, encoded.emb.shape[-1])


# ------------------------------------------------------------------------------------------ export / import


def annotation_keys(catalog: Catalog, media: Sequence[MediaRecord]) -> dict[int, str]:
    """A portable key per item: its path relative to its library folder, prefixed with that folder's name
    where two folders hold the same relative path (an item outside every folder: its file name)."""
    roots = catalog.roots()
    relative: dict[int, tuple[str, str]] = {}
    for record in media:
        root = next((r for r in roots if _is_under(record.path, r)), None)
        rel = record.path.relative_to(root).as_posix() if root is not None else record.path.name
        relative[record.id] = (root.name if root is not None else "", rel)
    counts: dict[str, int] = {}
    for _, rel in relative.values():
        counts[rel] = counts.get(rel, 0) + 1
    keys: dict[int, str] = {}
    used: set[str] = set()
    for media_id, (root_name, rel) in relative.items():
        key = rel if counts[rel] == 1 else f"{root_name or media_id}/{rel}"
        key = key if key not in used else f"{media_id}/{rel}"  # two folders of the same name
        keys[media_id] = key
        used.add(key)
    return keys


def _is_under(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
        return True
    except ValueError:
        return False


class AnnotationExport(int):
    """The number of captions an export wrote (an int, so callers that only count keep working), with
    ``skipped``: the keys (or paths) of the annotated items it had to leave out."""

    skipped: tuple[str, ...]

    def __new__(cls, captions: int, skipped: Sequence[str] = ()) -> AnnotationExport:
        made = super().__new__(cls, captions)
        made.skipped = tuple(skipped)
        return made


def export_annotations(catalog: Catalog, dest: Path, fmt: str = "folder") -> AnnotationExport:
    """Write the library's training captions (user, imported, accepted pairs) of every annotated item as a
    caption folder (media are links to the library's files) or a COCO captions JSON; returns the number of
    captions written. Keys are paths relative to the library's folders, which is what an import matches.

    Items whose files are missing or offline are exported too: their captions are in the catalog. A COCO JSON
    holds them all; a caption folder cannot link to a file that is not there, so it leaves them out and names
    them in the result's ``skipped`` (so does either format for a name an annotation file cannot hold)."""
    if fmt not in ANNOTATION_FORMATS:
        raise AnnotationError(f"format: expected one of {', '.join(ANNOTATION_FORMATS)}, got {fmt!r}")
    annotations = library_annotations(catalog)
    media = [m for m in catalog.iter_media() if m.id in annotations]
    keys = annotation_keys(catalog, media)
    usable, skipped = [], []
    for record in media:
        try:
            keys[record.id].encode("utf-8")
            check_file_key(keys[record.id], str(record.path))
        except (UnicodeEncodeError, CaptionFolderError):
            log.warning("%s: its name cannot be written to an annotation file; its captions are skipped",
                        record.path)
            skipped.append(str(record.path))
            continue
        if fmt == "folder" and not record.path.is_file():
            skipped.append(keys[record.id])
            continue
        usable.append(record)
    if skipped:
        log.warning("%d annotated items were not exported (files missing or names unwritable), e.g. %s",
                    len(skipped), skipped[0])
    captions = [(i, text) for i, record in enumerate(usable) for text in annotations[record.id]]
    dest = Path(dest)
    if fmt == "coco":
        items = [Item(keys[r.id], r.path, "all") for r in usable]
        export_coco_captions(CaptionFolder(dest.parent, dest.parent, items, captions), dest)
    else:
        if not usable:
            if skipped:
                raise AnnotationError(f"{dest}: none of the {len(skipped)} annotated items' files is there (offline "
                                      "or missing) to link into a caption folder; export to a .json (COCO) file, "
                                      "which needs no files")
            raise AnnotationError(f"{dest}: the library has no annotations to export")
        write_linked_folder(dest, [(keys[r.id], r.path) for r in usable], captions)
    return AnnotationExport(len(captions), skipped)


def import_annotations(catalog: Catalog, path: Path) -> int:
    """Add the captions of a caption folder or a COCO captions JSON to the library's items, with provenance
    ``imported``; returns how many were added. An entry matches an item by content (when the folder's file
    can be read), else by its relative path: the longest trailing part of it that names exactly one item
    (so ``trip/IMG_1.jpg`` matches ``.../Photos/trip/IMG_1.jpg``). Captions an item already has are skipped;
    entries that match nothing are logged."""
    from engine.captionfolder import normalize_caption

    path = Path(path)
    entries = _coco_entries(path) if path.is_file() else _folder_entries(path)
    # every item, missing and offline ones too (restoring a backup while a drive is unplugged must reach its
    # items); where two items share content, a present one is preferred (it is listed last, so it wins)
    media = sorted(catalog.iter_media(), key=lambda m: (m.status != MediaStatus.MISSING, m.id))
    by_hash = {m.content_hash: m.id for m in media}
    by_suffix = _suffix_index(catalog, media)
    existing = library_annotations(catalog)
    added = matched = 0
    unmatched: list[str] = []
    for key, file, texts in entries:
        media_id = by_hash.get(_safe_hash(file)) if file is not None else None
        media_id = media_id if media_id is not None else _match_key(key, by_suffix)
        if media_id is None:
            unmatched.append(key)
            continue
        matched += 1
        have = set(existing.get(media_id, []))
        for text in texts:
            text = normalize_caption(text)
            if text and text not in have:
                catalog.add_caption(media_id, text, CaptionSource.IMPORTED)
                have.add(text)
                added += 1
        existing[media_id] = list(have)
    if entries and not matched:
        raise AnnotationError(f"{path}: none of its {len(entries)} files is in the library (e.g. {entries[0][0]!r})")
    if unmatched:
        log.warning("%s: %d files are not in the library and were skipped, e.g. %s", path, len(unmatched),
                    unmatched[0])
    return added


def _folder_entries(path: Path) -> list[tuple[str, Path | None, list[str]]]:
    try:
        folder = load_caption_folder(path)
    except CaptionFolderError as exc:
        raise AnnotationError(f"{path}: not a caption folder or a COCO captions JSON ({exc})") from exc
    return [(item.file, item.path, texts) for item, texts in folder.item_captions() if texts]


def _coco_entries(path: Path) -> list[tuple[str, Path | None, list[str]]]:
    """``(file_name, None, captions)`` of a COCO captions JSON, read by the caption-folder importer's parser."""
    try:
        grouped, _ = read_coco_captions(path)
    except CaptionFolderError as exc:
        raise AnnotationError(str(exc)) from exc
    return [(key.replace("\\", "/"), None, texts) for key, texts in grouped.items() if texts]


def _safe_hash(path: Path) -> str | None:
    try:
        return content_hash(path)
    except OSError:  # a link to a file on another machine, say: match by path instead
        return None


def _suffix_index(catalog: Catalog, media: Sequence[MediaRecord]) -> dict[str, set[int]]:
    """Every trailing part of every item's path relative to its folder (and the folder's name) -> item ids."""
    roots = catalog.roots()
    index: dict[str, set[int]] = {}
    for record in media:
        root = next((r for r in roots if _is_under(record.path, r)), None)
        parts = (record.path.relative_to(root.parent) if root is not None else Path(record.path.name)).parts
        for start in range(len(parts)):
            index.setdefault("/".join(parts[start:]), set()).add(record.id)
    return index


def _match_key(key: str, by_suffix: dict[str, set[int]]) -> int | None:
    """The one item the longest trailing part of ``key`` names, or None."""
    parts = [p for p in key.split("/") if p not in ("", ".")]
    for start in range(len(parts)):
        ids = by_suffix.get("/".join(parts[start:]))
        if ids is not None:
            return next(iter(ids)) if len(ids) == 1 else None
    return None


# ------------------------------------------------------------------------------------------ the gate

# How a retrain warm-starts from the active model (trainer ``--init-from``; the trainer adds L2-SP toward the
# start and keeps the start unless an epoch beats it on the held-aside captions searched among un-annotated
# items). Chosen on tests/bench/bench_user_loop.py (docs/benchmarks.md, "the user's loop"): with the starter's
# lr of 5e-5 and batches of 128, 100 captions made 1 step an epoch and nothing was learnt; batches of 32 at 1e-4
# for 20 epochs, with the library's pseudo pairs as extra pairs and negatives (VSE), learnt a user's own word.
WARM_START_EPOCHS = 20
WARM_START_ARGS: tuple[str, ...] = ("--lr", "1e-4", "--batch-size", "32", "--patience", "20",
                                    "--schedule", "constant")
WARM_START_PSEUDO_WEIGHT = {"vse": 1.0}  # methods whose config has pseudo_weight (A3VSE has its own D^u terms)


def warm_start_args(method: str) -> list[str]:
    """The trainer arguments of a warm start of ``method`` (after ``--init-from DIR``)."""
    weight = WARM_START_PSEUDO_WEIGHT.get(method)
    return [*WARM_START_ARGS, *(["--set", f"pseudo_weight={weight}"] if weight is not None else [])]


PSEUDO_CHECK_ITEMS = 300  # un-annotated items whose pseudo captions check that a retrain kept the general skill
MIN_PSEUDO_CHECK_ITEMS = 20
PSEUDO_TOLERANCE = 12.0  # rsum a retrain may lose on the pseudo pairs (noisy labels): 2 points of mean recall


def mean_r10(report: dict[str, Any]) -> float:
    """The mean of text->item and item->text R@10 of a retrieval report."""
    return 0.5 * (float(report["i2t"]["r10"]) + float(report["t2i"]["r10"]))


def heldout_tolerance(report: dict[str, Any]) -> float:
    """The rsum that one query in each direction moves on a held-aside set by slipping one place out of a top
    K: 100/items + 100/captions. A new model within this of the old one is "not worse": a set this small cannot
    tell them apart. (R@10 alone cannot judge a set of 10 items or fewer: it is 100 for any model.)"""
    return 100.0 / max(1, int(report["n_media"])) + 100.0 / max(1, int(report["n_captions"]))


def gate(result: RetrainResult | Judgement) -> tuple[bool, str]:
    """Whether a retrained model replaces the active one, and why, as one line.

    The rule: the new model is activated when its rsum (R@1+R@5+R@10, both directions) on the held-aside
    annotations (at least :data:`MIN_HELDOUT_ITEMS` of them) is not below the old model's by more than
    :func:`heldout_tolerance`, AND its rsum on the
    library's pseudo pairs (:func:`pseudo_check_set`; not measured when the old ranking is zero-shot, which wrote
    those captions) is not below the old one's by more than :data:`PSEUDO_TOLERANCE`. With neither measure it is
    not activated: nothing says it is not worse. A model that is not activated stays registered.
    """
    checks: list[tuple[bool, str]] = []
    if (result.before is not None and result.after is not None
            and int(result.after["n_media"]) >= MIN_HELDOUT_ITEMS):  # fewer: R@K moves 33+ points an item
        old, new, tol = float(result.before["rsum"]), float(result.after["rsum"]), heldout_tolerance(result.after)
        checks.append((new >= old - tol, f"held-aside rsum {old:.0f} -> {new:.0f} "
                                         f"(R@10 {mean_r10(result.before):.0f} -> {mean_r10(result.after):.0f})"))
    if result.pseudo_before is not None and result.pseudo_after is not None:
        old, new = float(result.pseudo_before["rsum"]), float(result.pseudo_after["rsum"])
        checks.append((new >= old - PSEUDO_TOLERANCE, f"pseudo-pair rsum {old:.0f} -> {new:.0f}"))
    name = result.model_name
    if not checks:
        return False, (f"not activated: nothing to compare {name} with (fewer than {MIN_HELDOUT_ITEMS} "
                       "annotated items held aside, and no pseudo pairs to check); "
                       f"`polyseek models --activate {name}` uses it")
    measured = ", ".join(text for _, text in checks)
    if all(ok for ok, _ in checks):
        return True, f"activated {name}: {measured}"
    worse = ", ".join(text for ok, text in checks if not ok)
    return False, (f"not activated: {worse}, worse than {result.old_model or 'zero-shot'}; {name} is kept, "
                   f"`polyseek models --activate {name}` uses it")


@dataclass
class Judgement:
    """A new model measured beside the active one, and the gate's decision (:func:`judge`)."""

    model_name: str
    old_model: str | None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    pseudo_before: dict[str, Any] | None = None
    pseudo_after: dict[str, Any] | None = None
    activated: bool = False
    decision: str = ""
    warnings: list[str] = field(default_factory=list)


def judge(service: SearchService, new_model: str, old_model: str | None, folder: Path, split: str | None,
          seed: int = 0) -> Judgement:
    """Measure a registered new model and the old one (None: zero-shot) on the held-aside split of a training
    folder (``split`` None: nothing held aside) and on the library's pseudo pairs, then apply :func:`gate`.
    The one evaluation path for the CLI's retrain and the GUI's training dialog; it activates nothing."""
    from engine.modelrunner import ModelLoadError

    out = Judgement(new_model, old_model)

    def old(on: Path, on_split: str | None, distractors: Sequence[Path] = ()) -> dict[str, Any] | None:
        try:
            return service.evaluate_on(on, on_split, old_model, distractors)
        except (ModelLoadError, OSError, LookupError) as exc:  # a broken old model must not block its successor
            out.warnings.append(f"the current model {old_model!r} could not be evaluated ({exc})")
            return None

    pseudo = (pseudo_check_set(service.catalog, Path(folder).parent / "pseudo-check", seed)
              if old_model is not None else None)  # zero-shot wrote the pseudo captions itself
    if split is not None:
        # each held-aside caption searches its item among the other held-aside items and the check set's
        # un-annotated items, as a search runs in the library (a set of ten dog photos cannot show that a
        # new word for the dog was learnt; the same photos among a library's others can)
        distractors = [item.path for item in load_caption_folder(pseudo).items] if pseudo is not None else []
        out.before = old(folder, split, distractors)
        out.after = service.evaluate_on(folder, split, new_model, distractors)
    if pseudo is not None:
        out.pseudo_before = old(pseudo, None)
        if out.pseudo_before is not None:
            out.pseudo_after = service.evaluate_on(pseudo, None, new_model)
    out.activated, out.decision = gate(out)
    return out


def pseudo_check_media(catalog: Catalog, seed: int = 0, limit: int | None = None) -> list[MediaRecord]:
    """Up to ``limit`` un-annotated items with a pseudo caption (and at most half of them), chosen from their
    content hashes (the same items every time for the same library); none when the library has fewer than
    :data:`MIN_PSEUDO_CHECK_ITEMS`. :func:`build_training_set` leaves them out, so the check is never trained on."""
    annotated = set(library_annotations(catalog)) | {p.media_id for p in catalog.pairs()}
    pseudo = {c.media_id for c in catalog.iter_captions(CaptionSource.PSEUDO)}
    media = [m for m in catalog.iter_media(MediaStatus.OK)
             if m.id in pseudo and m.id not in annotated and m.path.is_file()]
    if len(media) < MIN_PSEUDO_CHECK_ITEMS:
        return []
    # at most half of them: the other half stays in the training set (pseudo pairs, a warm start's distractors)
    keep = min(limit or PSEUDO_CHECK_ITEMS, len(media) // 2)
    return sorted(media, key=lambda m: holdout_key(m.content_hash, seed + 1))[:keep]


def pseudo_check_set(catalog: Catalog, dest: Path, seed: int = 0, limit: int | None = None) -> Path | None:
    """A caption folder of :func:`pseudo_check_media` with their pseudo captions (A3VSE's regional semantics);
    None when the library has too few."""
    media = pseudo_check_media(catalog, seed, limit)
    if not media:
        return None
    pseudo = {c.media_id: c.text for c in catalog.iter_captions(CaptionSource.PSEUDO)}
    write_linked_folder(dest, [(_training_key(m), m.path) for m in media],
                        [(i, pseudo[m.id]) for i, m in enumerate(media)])
    return Path(dest)


# ------------------------------------------------------------------------------------------ the retraining job


@dataclass(frozen=True)
class RetrainOptions:
    """One retraining's settings; ``trainer_args`` are extra ``python -m trainer train`` options."""

    method: str | None = None  # None: the active model's method, warm-started from it (a3vse from zero-shot)
    warm_start: bool = True  # start from the active model's weights when it has a warm-startable method
    always_activate: bool = False  # activate the new model whatever :func:`gate` says (the decision is still given)
    holdout: float = DEFAULT_HOLDOUT
    seed: int = 0
    epochs: int | None = None
    overrides: tuple[str, ...] = ()  # "key=value", the trainer's --set
    trainer_args: tuple[str, ...] = ()
    name: str | None = None  # the new model's name (default: <method>-<library>-<timestamp>)
    out: Path | None = None  # the new model's folder (default: under engine.paths.models_dir())
    dest: Path | None = None  # the training set's folder (default: under the library's folder)


@dataclass
class RetrainResult:
    """What a retraining did: the set it trained on, the new model, and R@K on the held-aside annotations
    before (the model that was active) and after (the new model), both measured by :func:`evaluate_trained`
    or the zero-shot evaluation. ``trainer_metrics`` is the trainer's own ``metrics.json``."""

    training_set: TrainingSet
    old_model: str | None = None
    model_name: str | None = None
    model_dir: Path | None = None
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None
    trainer_metrics: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    init_from: str | None = None  # the model the run started from (None: random weights)
    pseudo_before: dict[str, Any] | None = None  # R@K on the library's pseudo pairs (:func:`pseudo_check_set`)
    pseudo_after: dict[str, Any] | None = None
    activated: bool = False
    decision: str = ""  # why the new model was or was not activated (:func:`gate`)

    def to_json(self) -> dict[str, Any]:
        """A plain-JSON summary (``polyseek retrain --json``'s last line)."""
        from engine.metrics import rounded

        ts = self.training_set
        return rounded({
            "event": "result", "model": self.model_name, "model_dir": str(self.model_dir) if self.model_dir else None,
            "old_model": self.old_model or "zero-shot", "training_set": {
                "folder": str(ts.folder), "train_split": ts.train_split, "val_split": ts.val_split,
                "annotated_items": ts.n_annotated_items, "captions": ts.n_captions,
                "heldout_items": ts.n_heldout_items, "unannotated_items": ts.n_unannotated},
            "before": self.before, "after": self.after, "trainer_metrics": self.trainer_metrics,
            "init_from": self.init_from, "pseudo_before": self.pseudo_before, "pseudo_after": self.pseudo_after,
            "activated": self.activated, "decision": self.decision, "warnings": self.warnings})

    def summary_lines(self) -> list[str]:
        """Before/after R@1/5/10 on the held-aside annotations, as lines for a terminal."""
        ts = self.training_set
        lines = [f"trained {self.model_name} on {ts.n_train_annotated} annotated + {ts.n_unannotated} "
                 f"un-annotated items; {ts.n_heldout_items} held aside"]
        if self.before is None and self.after is None:
            return lines + ["no held-aside annotations: before/after cannot be compared"]
        shown = self.after or self.before
        assert shown is not None
        lines.append(f"held-aside annotations ({shown['n_media']} items, {shown['n_captions']} captions):")
        for label, report, name in (("before", self.before, self.old_model or "zero-shot"),
                                    ("after ", self.after, self.model_name)):
            if report is None:
                lines.append(f"  {label} not available ({name})")
                continue
            cells = "  ".join(f"{way} R@1 {report[way]['r1']:5.1f} R@5 {report[way]['r5']:5.1f} "
                              f"R@10 {report[way]['r10']:5.1f}" for way in ("i2t", "t2i"))
            lines.append(f"  {label} {cells}  rsum {report['rsum']:6.1f}  ({name})")
        return lines + ([self.decision] if self.decision else [])


class Retrain:
    """The whole loop as one job: ``for p in Retrain(service, options).run(cancel): ...``, then ``.result``.

    The trainer runs as its own process; ``on_event`` receives each of its ``--json-progress`` events
    (the CLI prints them with ``--json``). The GUI runs :meth:`run` in a worker like any other job.
    """

    def __init__(self, service: SearchService, options: RetrainOptions | None = None,
                 on_event: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.service, self.options = service, options or RetrainOptions()
        self.on_event = on_event or (lambda _event: None)
        self.result: RetrainResult | None = None

    def run(self, cancel: CancelToken | None = None) -> Iterator[Progress]:
        """Export, evaluate the old model, train from it, register, evaluate the new one, and activate it
        only when :func:`gate` finds it not worse (then re-index with it)."""
        cancel = cancel or CancelToken()
        service, options = self.service, self.options
        yield Progress(0, 0, "writing the training set")
        ts = service.export_training_set(options.dest, options.holdout, options.seed)
        result = self.result = RetrainResult(ts, old_model=_active_name(service))
        if ts.warning:
            result.warnings.append(ts.warning)
        yield Progress(0, 0, f"training set: {ts.n_train_annotated} annotated and {ts.n_unannotated} "
                             f"un-annotated items, {ts.n_heldout_items} held aside")  # warnings are shown now
        if ts.n_train_annotated < 1:
            raise RetrainError(f"nothing to train on: {ts.n_annotated_items} annotated items, "
                               f"{ts.n_heldout_items} of them held aside; annotate some items first")
        method, start = self._method_and_start()
        result.init_from = str(start) if start is not None else None
        cancel.raise_if_cancelled()
        if not ts.n_heldout_items:
            result.warnings.append("no annotated item is held aside: the trainer validates on a part of the "
                                   "training items and before/after cannot be compared")
        name, out = self._name_and_folder(method)
        yield from self._train(ts, out, cancel, method, start)
        metrics_file = out / "metrics.json"
        result.trainer_metrics = json.loads(metrics_file.read_text()) if metrics_file.is_file() else {}
        result.model_name = service.register_model(out, name)
        result.model_dir = out
        yield Progress(0, 0, f"comparing {result.model_name} with {result.old_model or 'zero-shot'} on the "
                             "held-aside annotations and the library's pseudo pairs")
        verdict = judge(service, result.model_name, result.old_model, ts.folder,
                        ts.val_split if ts.n_heldout_items else None, options.seed)
        result.warnings.extend(verdict.warnings)
        for name_ in ("before", "after", "pseudo_before", "pseudo_after", "activated", "decision"):
            setattr(result, name_, getattr(verdict, name_))
        if options.always_activate and not result.activated:
            result.activated, result.decision = True, f"activated as asked ({result.decision})"
        if result.activated:
            service.set_active_model(result.model_name)
            yield from _staged(service.reindex(cancel), f"re-indexing with {result.model_name}")
        yield Progress(1, 1, "done")

    def _method_and_start(self) -> tuple[str, Path | None]:
        """The method to train and the model folder to start from: the active model's own method and
        weights when it can warm-start (and the options do not name another method), else random weights."""
        active = self.service.catalog.active_model()
        method = self.options.method
        if active is not None and self.options.warm_start and method in (None, active.method):
            start = Path(active.path)
            if (start / "model.safetensors").is_file() and (start / "config.json").is_file():
                return active.method, start
            self.result.warnings.append(f"{active.name}: no weights in {start}; training from scratch")
        return method or DEFAULT_METHOD, None

    def _name_and_folder(self, method: str) -> tuple[str, Path]:
        from engine import paths

        options = self.options
        taken = {m.name for m in self.service.models()}
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = options.name or f"{method}-{self.service.name}-{stamp}"
        if options.name and options.name in taken:
            raise RetrainError(f"a model named {options.name!r} is already registered")
        name, n = base, 1
        while name in taken or (options.out is None and (paths.models_dir() / name).exists()):
            n += 1
            name = f"{base}-{n}"
        return name, Path(options.out) if options.out else paths.models_dir() / name

    def _train(self, ts: TrainingSet, out: Path, cancel: CancelToken, method: str,
               start: Path | None) -> Iterator[Progress]:
        """Run ``python -m trainer train`` and turn its JSON events into progress records."""
        options = self.options
        warm = ["--init-from", str(start), *warm_start_args(method)] if start is not None else []
        epochs = options.epochs or (WARM_START_EPOCHS if start is not None else None)
        command = [sys.executable, "-m", "trainer", "train", "--method", method, "--data", str(ts.folder),
                   "--train-split", ts.train_split, "--val-split", ts.val_split, "--out", str(out),
                   "--json-progress", *warm, *(["--epochs", str(epochs)] if epochs else []),
                   *[arg for pair in options.overrides for arg in ("--set", pair)], *options.trainer_args]
        log.info("running %s", " ".join(command))
        out.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as stderr:
            error: str | None = None
            with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, encoding="utf-8",
                                  errors="replace", env={**os.environ, "PYTHONUNBUFFERED": "1"}) as process:
                try:
                    for event in _events(process, cancel):
                        self.on_event(event)
                        if event.get("event") == "error":
                            error = str(event.get("message"))
                        progress = _event_progress(event)
                        if progress is not None:
                            yield progress
                except BaseException:  # cancelled, or the consumer closed the generator: no orphan trainer
                    _stop(process)
                    raise
                status = process.wait()
            if status != 0:
                stderr.seek(0)
                tail = error or (stderr.read().strip().splitlines() or ["no message"])[-1]
                raise RetrainError(f"training failed (trainer exit status {status}): {tail}")


def _active_name(service: SearchService) -> str | None:
    active = service.catalog.active_model()
    return active.name if active is not None else None


def _events(process: subprocess.Popen, cancel: CancelToken) -> Iterator[dict[str, Any]]:
    """The trainer's stdout events; a reader thread lets cancellation act while the trainer is quiet."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        try:
            for line in process.stdout or ():
                lines.put(line)
        except (OSError, ValueError):  # the pipe was closed under us: the job is over either way
            pass
        lines.put(None)

    threading.Thread(target=read, daemon=True, name="trainer-stdout").start()
    while True:
        if cancel.cancelled:
            raise Cancelled()
        try:
            line = lines.get(timeout=0.2)
        except queue.Empty:
            continue
        if line is None:
            return
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            log.debug("trainer: %s", line.rstrip())
            continue
        if isinstance(event, dict):
            yield event


def _event_progress(event: dict[str, Any]) -> Progress | None:
    kind = event.get("event")
    if kind == "step":
        loss = event.get("loss", {}).get("total")
        text = f", loss {loss:.3f}" if isinstance(loss, (int, float)) else ""
        return Progress(int(event.get("step", 0)), int(event.get("total", 0)),
                        f"training epoch {event.get('epoch')}{text}")
    if kind == "progress":
        return Progress(int(event.get("done", 0)), int(event.get("total", 0)),
                        f"training: {event.get('message') or event.get('stage')}")
    if kind == "epoch":
        rsum = (event.get("val") or {}).get("rsum")
        text = f" (held-aside rsum {rsum:.1f})" if isinstance(rsum, (int, float)) else ""
        return Progress(1, 1, f"epoch {event.get('epoch')} done{text}")
    return None


def _stop(process: subprocess.Popen) -> None:
    """Ask the trainer to stop (SIGINT: it writes a resumable checkpoint), then make sure it has."""
    if process.poll() is not None:
        return
    try:
        process.send_signal(signal.SIGINT)
        process.wait(timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        process.kill()
        process.wait()


def _staged(progress: Iterator[Progress], stage: str) -> Iterator[Progress]:
    for p in progress:
        yield Progress(p.done, p.total, f"{stage}: {p.message}" if p.message else stage)
