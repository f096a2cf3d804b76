"""The catalog: one SQLite file per library that records media, annotations, models and vectors.

What it holds
    ``roots`` (folders the user added), ``media`` (one row per file, with its scan state), ``captions`` and
    ``pairs`` (the user's annotations and the pseudo ones), ``models`` (trained checkpoints, at most one
    active), ``embeddings`` (per model, per item, per head: one float32 vector) with ``embedding_extras``
    (other per-item arrays of a model, e.g. PCME's sigma). Schema v1 also made a ``jobs`` table that no code
    reads or writes; it stays so that the schema's history (and old catalogs) are left as they are.

Durability
    WAL journal with ``synchronous=NORMAL``: a killed process never loses a committed transaction and never
    corrupts the file; a power cut may lose the last few commits, never the file. Every public write is one
    transaction (``BEGIN IMMEDIATE`` ... ``COMMIT``), so a crash mid-write never leaves half a record; callers
    may group several writes with :meth:`SQLiteStore.transaction` (nested blocks become savepoints).

Threads
    One connection per :class:`Catalog` (``check_same_thread=False``); a re-entrant lock serialises every
    statement on it, so one object may be shared by threads -- but a reader then waits behind a long write
    on that object (storing 100k vectors takes seconds). So each thread that must not wait (the GUI thread
    above all) opens its own ``Catalog`` on the same file: WAL lets readers run beside one writer, and the
    busy timeout makes a second writer wait instead of failing. Writes begin ``IMMEDIATE`` so two writers
    queue up rather than fail with a stale snapshot (which is why transactions are ours, not
    ``sqlite_utils``' deferred ``atomic()``; ``Catalog.db`` is the ``sqlite_utils`` view for introspection).

Schema
    A ``meta`` table holds ``schema_version``; ``MIGRATIONS[v]`` takes a catalog from version ``v`` to
    ``v + 1`` and runs in one transaction on open, so an interrupted upgrade leaves the old version intact.
    v1 is the first layout; v2 adds ``media.features_backbone``, ``embedding_extras``, the lookup indexes
    and the "one pseudo caption per item" / "one active model" rules (fixing rows that broke them); v3 adds
    ``roots.device`` (the ``st_dev`` a folder was on, so an unplugged drive's empty mount point is told apart
    from an emptied folder); v4 adds ``media.name_key`` (the file name, case-folded) and the indexes that let the
    library be browsed a page at a time in SQL, by date or by name, whatever its size; v5 adds when and with what
    each photo was taken (``taken_at``, ``taken_ns``, ``camera_make``, ``camera_model``: EXIF, read at indexing;
    ``capture_read`` marks the rows whose file was asked, so the items indexed before v5 are read once by the next
    scan) and the index that browses by date taken, the file's mtime standing in where there is none; v6 writes
    ``media.name_key`` again with numbers compared as numbers ("video114" before "video1130").

Annotations outlive files
    Captions and pairs are the user's work. A scan never deletes a media row: a file that is gone is marked
    ``missing`` (offline) and keeps its captions, pairs and content hash, so it gets them back when the same
    content shows up again, at its old path or another one. Only the user deletes rows (:meth:`Catalog.purge_missing`,
    :meth:`Catalog.remove_root`), and both first write a snapshot of every annotation
    (:mod:`engine.library.catalog.snapshots`) beside the catalog.

Rooms
    One class, :class:`Catalog`, made of the package's rooms, each a part of it over the same connection:
    :mod:`~engine.library.catalog.schema` (tables and migrations), :mod:`~engine.library.catalog.records` (the rows
    it returns, paths as stored), :mod:`~engine.library.catalog.media` (roots, scanning, media rows, browsing),
    :mod:`~engine.library.catalog.annotations` (captions, pairs, and :mod:`~engine.library.catalog.snapshots` of
    them) and :mod:`~engine.library.catalog.models` (models and their vectors). Each room imports only the ones
    before it in that list.

Paths are stored as given and must be absolute; the scanner decides how to normalise them.
"""

from __future__ import annotations

from pathlib import Path

from engine.library.catalog.annotations import AnnotationRoom
from engine.library.catalog.models import ModelRoom
from engine.library.catalog.records import (
    CaptionRecord,
    FoundFile,
    MediaRecord,
    MediaStatus,
    ModelRecord,
    NotFound,
    PairRecord,
    ScanPlan,
)
from engine.library.catalog.schema import LATEST_SCHEMA_VERSION, MIGRATIONS, name_key
from engine.sqlitestore import CatalogError

__all__ = [
    "LATEST_SCHEMA_VERSION", "CaptionRecord", "Catalog", "CatalogError", "FoundFile", "MediaRecord", "MediaStatus",
    "ModelRecord", "NotFound", "PairRecord", "ScanPlan", "name_key",
]


class Catalog(AnnotationRoom, ModelRoom):
    """A library's catalog file. ``Catalog(path)`` creates or upgrades it; use as a context manager."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, MIGRATIONS)

    def __enter__(self) -> Catalog:
        return self
