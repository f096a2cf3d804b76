"""The training set of the library loop: the user's annotations as a caption folder with a fixed held-aside split.

:func:`build_training_set` writes a caption folder under the library's folder whose media are symbolic links to
the library's files. Split ``train`` holds the annotated items (their user and imported captions, plus the
queries of accepted pairs) - A3VSE's annotated corpus D^l - and every un-annotated item with no caption at all,
which the trainer pairs with its regional-semantics pseudo caption: A3VSE's D^u (Huang et al. 2019, §3.2 and
§4.1; ``trainer.splits.load_training_data`` with ``with_pseudo``). Split ``heldout`` holds the annotated items
kept aside, which the run never trains on (the whole loop: :mod:`engine.loop.retrain`).

Un-annotated items are sampled. A library of 100,000 items would otherwise put 100,000 pseudo pairs (and their
features, in the trainer's memory) into every retrain, whose cost should follow the annotations, not the library.
At most :data:`MAX_UNANNOTATED_ITEMS` un-annotated items go into ``train``, drawn by ``u(seed, round, content
hash)`` where the round is the number of annotated items: the sample is the same for the same library state (a
rerun trains on the same set) and changes as the user annotates, so over successive retrains the pseudo pairs
cover the library.

Held-aside annotations. An annotated item is held aside when ``u(seed, content hash) < holdout``, where
``u`` maps the pair to [0, 1) through BLAKE2b. The decision depends on nothing but the item's content, so
an item stays on its side across retrains and however many items are annotated later: a model is never
evaluated on an item an earlier version trained on (unless ``holdout`` or ``seed`` change). The fraction is
respected on average (each item is held with probability ``holdout``), not exactly: with few annotations
it may hold none, which is why the set warns below :data:`MIN_ANNOTATED_ITEMS` annotated items or
:data:`MIN_HELDOUT_ITEMS` held-aside ones - fewer than 3 items give R@K in steps of 33 points or more, and
fewer than 10 annotated items leave too little to train on for a difference to mean anything.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine.library.captionfolder import (
    MEDIA_DIR_NAMES,
    MEDIA_EXTENSIONS,
    Annotation,
    CaptionFolder,
    CaptionFolderError,
    check_file_key,
    load_caption_folder,
    write_annotation_tables,
    write_caption_folder,
)
from engine.library.catalog import Catalog, MediaRecord, MediaStatus
from engine.loop.defaults import DEFAULT_HOLDOUT
from engine.loop.errors import AnnotationError
from engine.types import CaptionSource

log = logging.getLogger(__name__)


TRAIN_SPLIT = "train"


HELDOUT_SPLIT = "heldout"




MIN_ANNOTATED_ITEMS = 10  # below this, a retrained model's numbers mean little (module docstring)


MIN_HELDOUT_ITEMS = 3  # below this, R@K moves in steps of 33 points or more


MARKER_FILE = ".polyseek-training-set"  # only a folder carrying it is ever replaced


PSEUDO_CHECK_ITEMS = 300  # un-annotated items whose pseudo captions check that a retrain kept the general skill


MIN_PSEUDO_CHECK_ITEMS = 20


MAX_UNANNOTATED_ITEMS = 5000  # D^u items in one training set (module docstring); the retrain's time and memory cap


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
    n_unannotated_library: int = 0  # un-annotated items the library had to sample D^u from
    warning: str | None = None

    @property
    def n_train_annotated(self) -> int:
        """Annotated items the run trains on (D^l)."""
        return self.n_annotated_items - self.n_heldout_items


def holdout_key(content_hash_: str, seed: int | str = 0) -> float:
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
    return _LibraryView.read(catalog, with_media=False).annotations


@dataclass(frozen=True, slots=True)
class _LibraryView:
    """What a training set and its check set are chosen from, read once: every ok item, the training captions
    per item (:func:`library_annotations`), the pseudo caption per item and the items with any pair. At 100,000
    items each read of the media rows costs seconds (a ``MediaRecord`` and a ``Path`` per row), and the export
    used to read them twice and the captions three times."""

    media: list[MediaRecord]
    annotations: dict[int, list[str]]
    pseudo: dict[int, str]
    paired: set[int]

    @classmethod
    def read(cls, catalog: Catalog, with_media: bool = True) -> _LibraryView:
        out: dict[int, list[str]] = {}
        pseudo: dict[int, str] = {}
        for caption in catalog.iter_captions():
            if caption.source == CaptionSource.PSEUDO:
                pseudo[caption.media_id] = caption.text
            else:
                out.setdefault(caption.media_id, []).append(caption.text)
        paired: set[int] = set()
        for pair in catalog.pairs():
            paired.add(pair.media_id)
            if pair.label > 0:
                out.setdefault(pair.media_id, []).append(pair.query)
        annotations = {media_id: list(dict.fromkeys(texts)) for media_id, texts in out.items()}
        media = list(catalog.iter_media(MediaStatus.OK)) if with_media else []
        return cls(media, annotations, pseudo, paired)


def training_set_dir(library_dir: Path) -> Path:
    """Where a library's retraining caption folder is written unless told otherwise."""
    return Path(library_dir) / "retrain" / "training-set"


def build_training_set(catalog: Catalog, dest: Path, holdout: float = DEFAULT_HOLDOUT, seed: int = 0,
                       max_unannotated: int | None = MAX_UNANNOTATED_ITEMS) -> TrainingSet:
    """Write the retraining caption folder of a library at ``dest`` (replacing an earlier one there).

    At most ``max_unannotated`` un-annotated items are written (None: all), sampled as the module docstring says.
    """
    check_holdout(holdout)
    view = _LibraryView.read(catalog)
    annotations = view.annotations
    checked = {m.id for m in _check_media(view, seed)}  # the gate's check set is never trained on
    media = [m for m in view.media if m.id not in checked]
    # only the files that go into the folder are looked at on disk (a stat each: ~1 s at 100,000 items)
    annotated = [m for m in media if annotations.get(m.id) and m.path.is_file()]
    unannotated = [m for m in media if not annotations.get(m.id)]
    sampled = sample_unannotated(unannotated, max_unannotated, seed, len(annotated), present=_present)
    keep = {m.id for m in annotated} | {m.id for m in sampled}
    media = [m for m in media if m.id in keep]
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
                       n_unannotated_library=len(unannotated), warning=training_warning(n_annotated, n_heldout))


def sample_unannotated(media: Sequence[MediaRecord], limit: int | None, seed: int = 0, round_: int = 0,
                       present: Callable[[MediaRecord], bool] | None = None) -> list[MediaRecord]:
    """At most ``limit`` of ``media`` (all when None or enough), the ones with the smallest
    ``u(seed, round, content hash)``, in their given order (module docstring). With ``present``, only items it
    accepts are taken, and it is asked about no more items than the sample needs (in key order)."""
    accept = present or (lambda _m: True)
    if limit is None or len(media) <= limit:
        return [m for m in media if accept(m)]
    key = f"{seed}:unannotated:{round_}"
    chosen = set(_first_accepted(sorted(media, key=lambda m: holdout_key(m.content_hash, key)), max(0, limit),
                                 accept))
    return [m for m in media if m.id in chosen]


def _first_accepted(media: Sequence[MediaRecord], limit: int, accept: Callable[[MediaRecord], bool]) -> list[int]:
    """Ids of the first ``limit`` items of ``media`` that ``accept`` takes, asking no further."""
    out: list[int] = []
    for m in media:
        if len(out) >= limit:
            break
        if accept(m):
            out.append(m.id)
    return out


def _present(record: MediaRecord) -> bool:
    """Whether an item's file is there now (a scan may not have seen it go yet)."""
    return record.path.is_file()


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
                        splits: Sequence[str] | None = None,
                        annotations: Sequence[Annotation] | None = None) -> CaptionFolder:
    """Write a caption folder whose ``media/<key>`` are links to the given files, built beside ``dest`` and
    swapped in, so a reader never sees half a folder. An existing ``dest`` is only replaced when it is empty
    or was written by this function (it carries :data:`MARKER_FILE`). ``annotations`` (every kind, with
    provenance) are written as the folder's annotation tables (:func:`write_annotation_tables`)."""
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
        if annotations is not None:
            write_annotation_tables(build, annotations)
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


def pseudo_check_media(catalog: Catalog, seed: int = 0, limit: int | None = None) -> list[MediaRecord]:
    """Up to ``limit`` un-annotated items with a pseudo caption (and at most half of them), chosen from their
    content hashes (the same items every time for the same library); none when the library has fewer than
    :data:`MIN_PSEUDO_CHECK_ITEMS`. :func:`build_training_set` leaves them out, so the check is never trained on."""
    return _check_media(_LibraryView.read(catalog), seed, limit)


def _check_media(view: _LibraryView, seed: int = 0, limit: int | None = None) -> list[MediaRecord]:
    """:func:`pseudo_check_media` from a library already read."""
    annotated = set(view.annotations) | view.paired
    media = [m for m in view.media if m.id in view.pseudo and m.id not in annotated]
    if len(media) < MIN_PSEUDO_CHECK_ITEMS:
        return []
    # at most half of them: the other half stays in the training set (pseudo pairs, a warm start's distractors);
    # only the chosen items' files are looked at on disk (an item whose file is gone is passed over)
    keep = min(limit or PSEUDO_CHECK_ITEMS, len(media) // 2)
    ordered = sorted(media, key=lambda m: holdout_key(m.content_hash, seed + 1))
    chosen = _first_accepted(ordered, keep, _present)
    by_id = {m.id: m for m in ordered}
    return [by_id[i] for i in chosen]


def pseudo_check_set(catalog: Catalog, dest: Path, seed: int = 0, limit: int | None = None) -> Path | None:
    """A caption folder of :func:`pseudo_check_media` with their pseudo captions (A3VSE's regional semantics);
    None when the library has too few."""
    view = _LibraryView.read(catalog)
    media = _check_media(view, seed, limit)
    if not media:
        return None
    write_linked_folder(dest, [(_training_key(m), m.path) for m in media],
                        [(i, view.pseudo[m.id]) for i, m in enumerate(media)])
    return Path(dest)
