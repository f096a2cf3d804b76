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
    A ``meta`` table holds ``schema_version``; ``_MIGRATIONS[v]`` takes a catalog from version ``v`` to
    ``v + 1`` and runs in one transaction on open, so an interrupted upgrade leaves the old version intact.
    v1 is the first layout; v2 adds ``media.features_backbone``, ``embedding_extras``, the lookup indexes
    and the "one pseudo caption per item" / "one active model" rules (fixing rows that broke them); v3 adds
    ``roots.device`` (the ``st_dev`` a folder was on, so an unplugged drive's empty mount point is told apart
    from an emptied folder); v4 adds ``media.name_key`` (the file name, case-folded) and the indexes that let the
    library be browsed a page at a time in SQL, by date or by name, whatever its size; v5 adds when and with what
    each photo was taken (``taken_at``, ``taken_ns``, ``camera_make``, ``camera_model``: EXIF, read at indexing;
    ``capture_read`` marks the rows whose file was asked, so the items indexed before v5 are read once by the next
    scan) and the index that browses by date taken, the file's mtime standing in where there is none.

Annotations outlive files
    Captions and pairs are the user's work. A scan never deletes a media row: a file that is gone is marked
    ``missing`` (offline) and keeps its captions, pairs and content hash, so it gets them back when the same
    content shows up again, at its old path or another one. Only the user deletes rows (:meth:`Catalog.purge_missing`,
    :meth:`Catalog.remove_root`), and both first write a snapshot of every annotation
    (:mod:`engine.library.snapshots`) beside the catalog.

Paths are stored as given and must be absolute; the scanner decides how to normalise them.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from engine.library import snapshots
from engine.sqlitestore import CatalogError, Migration, SQLiteStore
from engine.types import CaptionSource, CaptureInfo, MediaKind

_PAGE = 1000  # rows per page when iterating, so no cursor stays open across a yield


class NotFound(CatalogError):
    """A record asked for by id or name does not exist."""


class MediaStatus(StrEnum):
    """Where a media row is in the scan/index cycle."""

    PENDING = "pending"  # found, not yet indexed (an interrupted index resumes from these)
    OK = "ok"
    FAILED = "failed"  # retried only when the file's size or mtime changes
    MISSING = "missing"  # file gone (or its drive offline) at the last scan; kept, with its annotations


# ---------------------------------------------------------------------------------------------- records


class FoundFile(NamedTuple):
    """A file the scanner saw: its path, size in bytes and modification time in nanoseconds."""

    path: Path
    size: int
    mtime_ns: int


@dataclass(slots=True)
class ScanPlan:
    """What a scan found compared with the catalog (see :meth:`Catalog.plan_scan`)."""

    new: list[FoundFile] = field(default_factory=list)
    changed: list[FoundFile] = field(default_factory=list)
    unchanged: list[FoundFile] = field(default_factory=list)
    missing: list[Path] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class MediaRecord:
    """One row of ``media``."""

    id: int
    root_id: int | None
    path: Path
    size: int
    mtime_ns: int
    content_hash: str
    kind: MediaKind | None
    format: str | None
    width: int | None
    height: int | None
    n_frames: int | None
    duration_s: float | None
    status: MediaStatus
    error: str | None
    indexed_at: float | None
    features_backbone: str | None


@dataclass(frozen=True, slots=True)
class CaptionRecord:
    """One caption of one media item."""

    id: int
    media_id: int
    text: str
    source: CaptionSource
    created_at: float
    updated_at: float


@dataclass(frozen=True, slots=True)
class PairRecord:
    """A (query, item) judgement: label +1 accepts the match, -1 rejects it."""

    id: int
    media_id: int
    query: str
    label: int
    source: CaptionSource
    created_at: float


@dataclass(frozen=True, slots=True)
class ModelRecord:
    """A registered trained model."""

    id: int
    name: str
    method: str
    path: Path
    created_at: float
    metrics: dict[str, Any]
    is_active: bool


# ---------------------------------------------------------------------------------------------- plumbing


# ---------------------------------------------------------------------------------------------- schema


def _schema_v1(conn: sqlite3.Connection) -> None:
    """The first catalog layout."""
    statements = [
        """CREATE TABLE roots (
            id INTEGER PRIMARY KEY, path TEXT NOT NULL UNIQUE, added_at REAL NOT NULL)""",
        """CREATE TABLE media (
            id INTEGER PRIMARY KEY,
            root_id INTEGER REFERENCES roots(id) ON DELETE CASCADE,
            path TEXT NOT NULL UNIQUE, size INTEGER NOT NULL, mtime_ns INTEGER NOT NULL,
            content_hash TEXT NOT NULL, kind TEXT, format TEXT, width INTEGER, height INTEGER,
            n_frames INTEGER, duration_s REAL,
            status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending','ok','failed','missing')),
            error TEXT, indexed_at REAL)""",
        """CREATE TABLE captions (
            id INTEGER PRIMARY KEY,
            media_id INTEGER NOT NULL REFERENCES media(id) ON DELETE CASCADE,
            text TEXT NOT NULL,
            source TEXT NOT NULL CHECK (source IN ('user','imported','pseudo')),
            created_at REAL NOT NULL, updated_at REAL NOT NULL)""",
        """CREATE TABLE pairs (
            id INTEGER PRIMARY KEY,
            media_id INTEGER NOT NULL REFERENCES media(id) ON DELETE CASCADE,
            query TEXT NOT NULL, label INTEGER NOT NULL CHECK (label IN (1, -1)),
            source TEXT NOT NULL CHECK (source IN ('user','imported','pseudo')),
            created_at REAL NOT NULL)""",
        """CREATE TABLE models (
            id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, method TEXT NOT NULL, path TEXT NOT NULL,
            created_at REAL NOT NULL, metrics_json TEXT NOT NULL DEFAULT '{}',
            is_active INTEGER NOT NULL DEFAULT 0 CHECK (is_active IN (0, 1)))""",
        """CREATE TABLE embeddings (
            media_id INTEGER NOT NULL REFERENCES media(id) ON DELETE CASCADE,
            model_id INTEGER NOT NULL REFERENCES models(id) ON DELETE CASCADE,
            head INTEGER NOT NULL, vector BLOB NOT NULL,
            PRIMARY KEY (media_id, model_id, head))""",
        # the primary key serves per-media cascades; this one serves per-model reads and cascades
        "CREATE INDEX embeddings_by_model ON embeddings (model_id, media_id, head)",
        "CREATE INDEX media_by_root ON media (root_id)",
        """CREATE TABLE jobs (
            id INTEGER PRIMARY KEY, kind TEXT NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('queued','running','done','failed','cancelled')),
            payload_json TEXT NOT NULL DEFAULT '{}', done INTEGER NOT NULL DEFAULT 0,
            total INTEGER NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '',
            created_at REAL NOT NULL, updated_at REAL NOT NULL)""",
    ]
    for sql in statements:
        conn.execute(sql)


def _schema_v2(conn: sqlite3.Connection) -> None:
    """Backbone per media, per-item extra arrays, lookup indexes, one pseudo caption and one active model."""
    conn.execute("ALTER TABLE media ADD COLUMN features_backbone TEXT")
    conn.execute(
        """CREATE TABLE embedding_extras (
            media_id INTEGER NOT NULL REFERENCES media(id) ON DELETE CASCADE,
            model_id INTEGER NOT NULL REFERENCES models(id) ON DELETE CASCADE,
            name TEXT NOT NULL, dtype TEXT NOT NULL, shape_json TEXT NOT NULL, data BLOB NOT NULL,
            PRIMARY KEY (media_id, model_id, name))"""
    )
    conn.execute("CREATE INDEX embedding_extras_by_model ON embedding_extras (model_id, media_id)")
    conn.execute("CREATE INDEX media_by_hash ON media (content_hash)")
    conn.execute("CREATE INDEX media_by_status ON media (status)")
    conn.execute("CREATE INDEX captions_by_media ON captions (media_id)")
    conn.execute("CREATE INDEX pairs_by_media ON pairs (media_id)")
    # v1 did not enforce these rules; keep the newest row so the unique indexes can be built
    conn.execute(
        "DELETE FROM captions WHERE source = 'pseudo' AND id NOT IN "
        "(SELECT MAX(id) FROM captions WHERE source = 'pseudo' GROUP BY media_id)"
    )
    conn.execute("CREATE UNIQUE INDEX one_pseudo_caption ON captions (media_id) WHERE source = 'pseudo'")
    conn.execute(
        "UPDATE models SET is_active = 0 WHERE is_active = 1 AND id <> "
        "(SELECT MAX(id) FROM models WHERE is_active = 1)"
    )
    conn.execute("CREATE UNIQUE INDEX one_active_model ON models (is_active) WHERE is_active = 1")


def _schema_v3(conn: sqlite3.Connection) -> None:
    """``roots.device``: the device id (``st_dev``) of each folder, recorded when it is first seen online."""
    conn.execute("ALTER TABLE roots ADD COLUMN device INTEGER")


def name_key(path: str | bytes | Path) -> str:
    """What the library sorts a file by when it is browsed by name: its file name, case-folded (a name that is
    not valid UTF-8 with its undecodable bytes replaced, so that it can be stored as text)."""
    name = os.path.basename(_path_text(path) if isinstance(path, str | bytes) else str(path))
    return os.fsencode(name).decode("utf-8", "replace").casefold()


def _schema_v4(conn: sqlite3.Connection) -> None:
    """``media.name_key`` and the browse indexes: a page of a 100,000-item library sorted by date or name is
    read from an index (status, then the order), not by loading and sorting every row in Python."""
    conn.execute("ALTER TABLE media ADD COLUMN name_key TEXT")
    conn.create_function("polyseek_name_key", 1, name_key, deterministic=True)
    conn.execute("UPDATE media SET name_key = polyseek_name_key(path)")
    conn.execute("CREATE INDEX media_browse_by_time ON media (status, mtime_ns, id)")
    conn.execute("CREATE INDEX media_browse_by_name ON media (status, name_key, path)")
    conn.execute("CREATE INDEX captions_by_source ON captions (source, media_id)")


_TAKEN_OR_MTIME = "COALESCE(taken_ns, mtime_ns)"  # the date-taken order; the same expression as its index's


def _schema_v5(conn: sqlite3.Connection) -> None:
    """When and with what each photo was taken (:class:`CaptureInfo`) and a browse index by it. Existing rows
    keep ``capture_read = 0`` until the next scan reads their headers (a migration never opens media files)."""
    for column in ("taken_at TEXT", "taken_ns INTEGER", "camera_make TEXT", "camera_model TEXT",
                   "capture_read INTEGER NOT NULL DEFAULT 0"):
        conn.execute(f"ALTER TABLE media ADD COLUMN {column}")
    conn.execute(f"CREATE INDEX media_browse_by_taken ON media (status, {_TAKEN_OR_MTIME}, id)")


_MIGRATIONS: tuple[Migration, ...] = (_schema_v1, _schema_v2, _schema_v3, _schema_v4, _schema_v5)
LATEST_SCHEMA_VERSION = len(_MIGRATIONS)

_MEDIA_COLUMNS = (
    "id, root_id, path, size, mtime_ns, content_hash, kind, format, width, height, n_frames, duration_s, "
    "status, error, indexed_at, features_backbone"
)

# a moved or returning row gets back the status it had before it went missing
_RESTORED_STATUS = (
    "CASE WHEN error IS NOT NULL THEN 'failed' WHEN indexed_at IS NOT NULL THEN 'ok' ELSE 'pending' END"
)
# missing rows whose content is not present anywhere else in the library (a purge loses their annotations)
_MISSING_WITHOUT_COPY = (
    "status = 'missing' AND NOT EXISTS (SELECT 1 FROM media p WHERE p.content_hash = media.content_hash "
    "AND p.status <> 'missing')"
)
_MODEL_SELECT = "SELECT id, name, method, path, created_at, metrics_json, is_active FROM models"


# a media path under a folder: the folder itself, or a path in [folder + "/", folder + "0") -- "0" follows "/"
# in byte order -- as text, or as bytes for the names stored as BLOBs (see _path_value; TEXT never equals a BLOB)
_UNDER_FOLDER = "(path = ? OR (path >= ? AND path < ?) OR (path >= ? AND path < ?))"


def _browse_filter(folder: Path | None, kind: MediaKind | str | None, annotation: str) -> tuple[str, list]:
    """The WHERE clause and its parameters of a browse listing (:meth:`Catalog.browse_media`)."""
    clauses, params = ["status = 'ok'"], []
    if kind is not None:
        clauses.append("kind = ?")
        params.append(MediaKind(kind).value)
    if folder is not None:
        clauses.append(_UNDER_FOLDER)
        params.extend(_folder_bounds(Path(folder)))
    human = "EXISTS (SELECT 1 FROM captions c WHERE c.media_id = media.id AND c.source <> 'pseudo')"
    filters = {"all": None, "captioned": human, "uncaptioned": f"NOT {human}",
               "judged": "EXISTS (SELECT 1 FROM pairs p WHERE p.media_id = media.id)"}
    if annotation not in filters:
        raise CatalogError(f"unknown annotation filter {annotation!r}")
    if filters[annotation]:
        clauses.append(filters[annotation])
    return " AND ".join(clauses), params


def _folder_bounds(folder: Path) -> tuple[str | bytes, ...]:
    """The parameters of :data:`_UNDER_FOLDER` for ``folder``."""
    text = str(folder).rstrip(os.sep) or os.sep
    raw = os.fsencode(text)
    prefix, raw_prefix = text.rstrip(os.sep) + os.sep, raw.rstrip(os.fsencode(os.sep)) + os.fsencode(os.sep)
    after, raw_after = prefix[:-1] + chr(ord(os.sep) + 1), raw_prefix[:-1] + bytes([raw_prefix[-1] + 1])
    if isinstance(_path_value(text), bytes):  # an undecodable folder holds only BLOB paths: no text range
        prefix = after = ""
    return _path_value(text), prefix, after, raw_prefix, raw_after


def _media_record(row: tuple[Any, ...]) -> MediaRecord:
    values = list(row)
    values[2] = Path(_path_text(values[2]))
    values[6] = MediaKind(values[6]) if values[6] is not None else None
    values[12] = MediaStatus(values[12])
    return MediaRecord(*values)


def _caption_record(row: tuple[Any, ...]) -> CaptionRecord:
    id_, media_id, text, source, created, updated = row
    return CaptionRecord(id_, media_id, text, CaptionSource(source), created, updated)


def _model_record(row: tuple[Any, ...]) -> ModelRecord:
    id_, name, method, path, created, metrics, active = row
    return ModelRecord(id_, name, method, Path(path), created, json.loads(metrics), bool(active))


def _metrics_json(model: str, metrics: dict[str, Any] | None) -> str:
    def plain(value: Any) -> Any:  # trainers report numpy scalars and arrays
        if isinstance(value, np.generic | np.ndarray):
            return value.tolist()
        raise TypeError(f"{type(value).__name__} is not JSON")

    try:
        return json.dumps(metrics or {}, default=plain)
    except (TypeError, ValueError) as exc:
        raise CatalogError(f"metrics of model {model!r} cannot be stored: {exc}") from exc


def _absolute(path: Path | str, what: str) -> str | bytes:
    if not Path(path).is_absolute():
        raise CatalogError(f"{what} path {str(path)!r} is not absolute")
    return _path_value(path)


def _path_value(path: Path | str) -> str | bytes:
    """A path as it is stored: its text, or its raw bytes when the name is not valid UTF-8.

    POSIX file names are bytes; Python shows an undecodable name with lone surrogates (PEP 383), which
    SQLite's UTF-8 text cannot hold (sqlite3 raises UnicodeEncodeError). Such a path is stored as a BLOB of
    its ``os.fsencode`` bytes -- TEXT affinity leaves BLOBs alone -- so every name round-trips and equality
    lookups and the UNIQUE constraint still work (one path always has the same stored form).
    """
    text = str(Path(path))
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(text)
    return text


def _is_under_text(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _path_text(value: str | bytes) -> str:
    """The inverse of :func:`_path_value`, as text (with surrogates for an undecodable name)."""
    return os.fsdecode(value) if isinstance(value, bytes) else value


# ---------------------------------------------------------------------------------------------- catalog


class Catalog(SQLiteStore):
    """A library's catalog file. ``Catalog(path)`` creates or upgrades it; use as a context manager."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, _MIGRATIONS)

    def __enter__(self) -> Catalog:
        return self

    # -- roots ---------------------------------------------------------------------------------------------

    def add_root(self, path: Path, device: int | None = None) -> int:
        """Add a folder to the library (idempotent); returns its id. ``device`` (its ``st_dev``) is recorded
        when the root is new or has none yet."""
        text = _absolute(path, "root")
        with self.transaction(f"adding root {path}") as conn:
            conn.execute(
                "INSERT INTO roots (path, added_at, device) VALUES (?, ?, ?) ON CONFLICT(path) DO NOTHING",
                (text, time.time(), device),
            )
            root_id, known = conn.execute("SELECT id, device FROM roots WHERE path = ?", (text,)).fetchone()
            if known is None and device is not None:
                conn.execute("UPDATE roots SET device = ? WHERE id = ?", (device, root_id))
            return root_id

    def set_root_device(self, root_id: int, device: int) -> None:
        """Record the device a root is on now (its drive came back under another device id)."""
        with self.transaction(f"recording the device of root {root_id}") as conn:
            conn.execute("UPDATE roots SET device = ? WHERE id = ?", (device, root_id))

    def root_device(self, root_id: int) -> int | None:
        """The device id recorded for a root, or None (not known yet)."""
        rows = self._read("reading root device", "SELECT device FROM roots WHERE id = ?", (root_id,))
        return rows[0][0] if rows else None

    def root_media_paths(self, root_id: int, limit: int | None = None) -> list[Path]:
        """Paths of the media rows under a root (any status), oldest first; at most ``limit``."""
        rows = self._read(
            "listing media of a root",
            f"SELECT path FROM media WHERE root_id = ? ORDER BY id{'' if limit is None else f' LIMIT {int(limit)}'}",
            (root_id,),
        )
        return [Path(_path_text(p)) for (p,) in rows]

    def root_media_count(self, root_id: int) -> int:
        """How many media rows (any status) are under a root."""
        return self._read("counting media of a root", "SELECT COUNT(*) FROM media WHERE root_id = ?", (root_id,))[0][0]

    def mark_root_missing(self, root_id: int) -> int:
        """Mark every row under a root missing (its drive is offline); returns how many changed."""
        with self.transaction(f"marking root {root_id} offline") as conn:
            return conn.execute(
                "UPDATE media SET status = 'missing' WHERE root_id = ? AND status <> 'missing'", (root_id,)
            ).rowcount

    def remove_root(self, path: Path) -> None:
        """Remove a folder and, with it, every media row under it (and their captions, pairs, vectors).

        The user's annotations are first written to a snapshot (:mod:`engine.library.snapshots`); when it cannot be
        written (a full disk) nothing is removed."""
        text = str(Path(path))
        with self.transaction(f"removing root {text}") as conn:
            row = conn.execute("SELECT id FROM roots WHERE path = ?", (_path_value(text),)).fetchone()
            if row is None:
                raise NotFound(f"root {text} is not in {self.path}")
            if self._annotation_count(conn, "root_id = ?", (row[0],)) != (0, 0):
                self._snapshot(conn, "remove-root")
            conn.execute("DELETE FROM roots WHERE id = ?", (row[0],))

    def roots(self) -> list[Path]:
        """The library's folders, in the order they were added."""
        rows = self._read("listing roots", "SELECT path FROM roots ORDER BY id")
        return [Path(_path_text(p)) for (p,) in rows]

    def root_id(self, path: Path) -> int | None:
        """The id of a root folder, or None."""
        rows = self._read("finding root", "SELECT id FROM roots WHERE path = ?", (_path_value(path),))
        return rows[0][0] if rows else None

    # -- media: scanning -------------------------------------------------------------------------------------

    def plan_scan(
        self, found: Iterable[tuple[Path, int, int]], root_ids: Iterable[int] | None = None
    ) -> ScanPlan:
        """Compare what a scan found, ``(path, size, mtime_ns)`` for every present file, with the catalog.

        ``new``: no row has the path. ``changed``: size or mtime differ from the row, or the row was marked
        missing and has come back. ``unchanged``: the rest of the found files. ``missing``: rows whose path
        was not found (only rows under ``root_ids`` when given). Moves are recognised later, by
        :meth:`upsert_media`, from the content hash of new files.
        """
        rows = self._read("planning scan", "SELECT path, size, mtime_ns, status, root_id FROM media")
        rows = [(_path_text(path), *rest) for path, *rest in rows]
        known = {path: (size, mtime, status) for path, size, mtime, status, _ in rows}
        plan = ScanPlan()
        seen: set[str] = set()
        for path, size, mtime_ns in found:
            entry = FoundFile(Path(path), int(size), int(mtime_ns))
            key = str(entry.path)
            seen.add(key)
            row = known.get(key)
            if row is None:
                plan.new.append(entry)
            elif row[:2] != (entry.size, entry.mtime_ns) or row[2] == MediaStatus.MISSING:
                plan.changed.append(entry)
            else:
                plan.unchanged.append(entry)
        scope = None if root_ids is None else set(root_ids)
        plan.missing = [
            Path(path) for path, *_, root in rows if path not in seen and (scope is None or root in scope)
        ]
        return plan

    def upsert_media(
        self, path: Path, size: int, mtime_ns: int, content_hash: str, root_id: int | None
    ) -> tuple[int, str]:
        """Record a present file; returns ``(media_id, outcome)``.

        outcome is ``'unchanged'`` (same size, mtime and hash as the row at this path), ``'changed'`` (the
        row goes back to pending, so a failed file is retried; its vectors are dropped when the content
        hash differs), ``'moved'`` (a row marked missing, or whose path no longer exists, has this content
        hash: its path is updated and its captions, pairs and vectors are kept) or ``'new'`` (pending row).
        """
        text = _absolute(path, "media")
        with self.transaction(f"recording media {path}") as conn:
            row = conn.execute(
                "SELECT id, size, mtime_ns, content_hash, status FROM media WHERE path = ?", (text,)
            ).fetchone()
            if row is not None:
                return row[0], self._update_existing(conn, row, size, mtime_ns, content_hash, root_id)
            moved = self._find_moved(conn, size, content_hash)
            if moved is not None:
                conn.execute(
                    f"UPDATE media SET path = ?, name_key = ?, root_id = ?, mtime_ns = ?, status = {_RESTORED_STATUS} "
                    "WHERE id = ?",
                    (text, name_key(path), root_id, mtime_ns, moved),
                )
                return moved, "moved"
            cursor = conn.execute(
                "INSERT INTO media (root_id, path, name_key, size, mtime_ns, content_hash, status) "
                "VALUES (?, ?, ?, ?, ?, ?, 'pending')",
                (root_id, text, name_key(path), size, mtime_ns, content_hash),
            )
            return int(cursor.lastrowid or 0), "new"

    @staticmethod
    def _update_existing(
        conn: sqlite3.Connection,
        row: tuple[Any, ...],
        size: int,
        mtime_ns: int,
        content_hash: str,
        root_id: int | None,
    ) -> str:
        media_id, old_size, old_mtime, old_hash, status = row
        if (old_size, old_mtime, old_hash) == (size, mtime_ns, content_hash):
            if status == MediaStatus.MISSING:  # the file came back where it was
                conn.execute(f"UPDATE media SET status = {_RESTORED_STATUS} WHERE id = ?", (media_id,))
            return "unchanged"
        conn.execute(
            "UPDATE media SET size = ?, mtime_ns = ?, content_hash = ?, root_id = ?, status = 'pending', "
            "error = NULL, indexed_at = NULL WHERE id = ?",
            (size, mtime_ns, content_hash, root_id, media_id),
        )
        if old_hash != content_hash:  # same hash means same content, so the vectors still hold
            conn.execute("DELETE FROM embeddings WHERE media_id = ?", (media_id,))
            conn.execute("DELETE FROM embedding_extras WHERE media_id = ?", (media_id,))
            # the pseudo caption described the old content; indexing writes the new one, and an item whose
            # new content is already in the feature store gets it only when it has none
            conn.execute("DELETE FROM captions WHERE media_id = ? AND source = 'pseudo'", (media_id,))
        return "changed"

    @staticmethod
    def _find_moved(conn: sqlite3.Connection, size: int, content_hash: str) -> int | None:
        candidates = conn.execute(
            "SELECT id, path, status FROM media WHERE content_hash = ? AND size = ? "
            "ORDER BY status = 'missing' DESC, id",
            (content_hash, size),
        ).fetchall()
        for media_id, path, status in candidates:
            # a copy whose original still exists is a new item, not a move
            if status == MediaStatus.MISSING or not os.path.exists(path):
                return media_id
        return None

    def mark_missing(self, paths: Iterable[Path]) -> int:
        """Mark rows whose files are gone; returns how many rows were newly marked."""
        params = [(_path_value(p),) for p in paths]
        with self.transaction("marking missing media") as conn:
            before = conn.total_changes
            conn.executemany("UPDATE media SET status = 'missing' WHERE path = ? AND status <> 'missing'", params)
            return conn.total_changes - before

    def missing_summary(self) -> tuple[int, int, int]:
        """``(items, captions, pairs)`` that :meth:`purge_missing` would delete: the rows marked missing and
        the user and imported captions and pairs that go with them (pseudo ones are not counted: indexing
        remakes them; those of an item whose content is still in the library elsewhere move there instead)."""
        with self._lock:
            conn = self._live()
            items = conn.execute("SELECT COUNT(*) FROM media WHERE status = 'missing'").fetchone()[0]
            return (items, *self._annotation_count(conn, _MISSING_WITHOUT_COPY))

    def purge_missing(self) -> tuple[int, int, int, Path | None]:
        """Delete the rows marked missing with their captions, pairs and vectors -- only the user asks for
        this. The annotations of a missing item whose content is present at another path (a copy) move to
        that copy first. Returns ``(items, captions, pairs, snapshot)``: what went and the snapshot of every
        annotation written before (None when the missing items had none). A snapshot that cannot be written
        (a full disk) raises and deletes nothing."""
        with self.transaction("purging missing media") as conn:
            captions, pairs = self._annotation_count(conn, _MISSING_WITHOUT_COPY)
            annotated = self._annotation_count(conn, "status = 'missing'") != (0, 0)
            snapshot = self._snapshot(conn, "purge-missing") if annotated else None
            self._move_annotations_to_copies(conn)
            items = conn.execute("DELETE FROM media WHERE status = 'missing'").rowcount
            return items, captions, pairs, snapshot

    @staticmethod
    def _move_annotations_to_copies(conn: sqlite3.Connection) -> None:
        """Give each missing item's user and imported captions and pairs to a present item with the same
        content (one it does not already have); the rest stay, to go with the missing row."""
        twins = conn.execute(
            "SELECT m.id, (SELECT p.id FROM media p WHERE p.content_hash = m.content_hash AND p.status <> 'missing' "
            "ORDER BY p.id LIMIT 1) FROM media m WHERE m.status = 'missing'"
        ).fetchall()
        for gone, copy in twins:
            if copy is None:
                continue
            for table, key in (("captions", "text, source"), ("pairs", "query, label, source")):
                select = f"SELECT id, {key} FROM {table} WHERE media_id = ? AND source <> 'pseudo'"
                have = {tuple(r[1:]) for r in conn.execute(select, (copy,))}
                for row in conn.execute(select, (gone,)).fetchall():
                    if tuple(row[1:]) not in have:
                        conn.execute(f"UPDATE {table} SET media_id = ? WHERE id = ?", (copy, row[0]))
                        have.add(tuple(row[1:]))

    @staticmethod
    def _annotation_count(conn: sqlite3.Connection, media_where: str, params: Sequence[Any] = ()) -> tuple[int, int]:
        """``(captions, pairs)`` of the user's (user and imported) annotations on the media rows selected."""
        return tuple(  # type: ignore[return-value]
            conn.execute(
                f"SELECT COUNT(*) FROM {table} WHERE source <> 'pseudo' AND media_id IN "
                f"(SELECT id FROM media WHERE {media_where})",
                params,
            ).fetchone()[0]
            for table in ("captions", "pairs")
        )

    def annotation_snapshot(self) -> dict[str, Any]:
        """Every user and imported caption and pair, grouped per item with the item's content hash, path,
        size and mtime (the snapshot format of :mod:`engine.library.snapshots`)."""
        with self._lock:
            return snapshots.collect(self._live())

    def _snapshot(self, conn: sqlite3.Connection, reason: str) -> Path:
        """Write a snapshot of the annotations as they are in this (open) transaction."""
        try:
            return snapshots.write(snapshots.folder_of(self.path), snapshots.collect(conn), reason)
        except OSError as exc:
            raise CatalogError(
                f"cannot save a snapshot of the annotations before deleting ({exc}); nothing was deleted"
            ) from exc

    def snapshot_annotations(self, reason: str = "manual") -> Path:
        """Write a snapshot of every annotation now; returns its file."""
        with self.transaction("snapshotting annotations") as conn:
            return self._snapshot(conn, reason)

    def restore_media(self, path: Path, size: int, mtime_ns: int, content_hash: str) -> int:
        """A row for an item known only from a snapshot: its captions go on it now, and it is marked
        missing, so the next scan that finds the same content (anywhere) takes it over as a move."""
        text = _absolute(path, "media")
        with self.transaction(f"restoring media {path}") as conn:
            root = next((rid for rid, rpath in conn.execute("SELECT id, path FROM roots")
                         if _is_under_text(str(path), _path_text(rpath))), None)
            cursor = conn.execute(
                "INSERT INTO media (root_id, path, name_key, size, mtime_ns, content_hash, status) "
                "VALUES (?, ?, ?, ?, ?, ?, 'missing')",
                (root, text, name_key(path), size, mtime_ns, content_hash),
            )
            return int(cursor.lastrowid or 0)

    # -- media: indexing results -----------------------------------------------------------------------------

    def set_media_ok(
        self,
        media_id: int,
        kind: MediaKind | str,
        format: str,
        width: int,
        height: int,
        n_frames: int,
        duration_s: float | None,
        backbone: str,
    ) -> None:
        """Record a successfully indexed item and the backbone its features came from."""
        self._update_media(
            media_id,
            "status = 'ok', error = NULL, kind = ?, format = ?, width = ?, height = ?, n_frames = ?, "
            "duration_s = ?, features_backbone = ?, indexed_at = ?",
            (MediaKind(kind).value, format, width, height, n_frames, duration_s, backbone, time.time()),
        )

    def set_media_failed(self, media_id: int, error: str) -> None:
        """Record why an item could not be indexed; it is retried only when its size or mtime change."""
        self._update_media(media_id, "status = 'failed', error = ?, indexed_at = ?", (error, time.time()))

    def set_capture(self, media_id: int, capture: CaptureInfo) -> None:
        """Record when and with what an item was taken (all None: its file says nothing) and that it was asked."""
        self._update_media(
            media_id, "taken_at = ?, taken_ns = ?, camera_make = ?, camera_model = ?, capture_read = 1",
            (capture.taken_at, capture.taken_ns, capture.camera_make, capture.camera_model),
        )

    def capture(self, media_id: int) -> CaptureInfo:
        """What :meth:`set_capture` recorded for an item (all None before); raises :class:`NotFound`."""
        rows = self._read("reading the date taken",
                          "SELECT taken_at, taken_ns, camera_make, camera_model FROM media WHERE id = ?", (media_id,))
        if not rows:
            raise NotFound(f"media {media_id} is not in {self.path}")
        return CaptureInfo(*rows[0])

    def media_without_capture(self, limit: int = _PAGE) -> list[MediaRecord]:
        """Indexed items whose date taken was never read (indexed before schema v5), at most ``limit``."""
        rows = self._read("listing media without a date taken",
                          f"SELECT {_MEDIA_COLUMNS} FROM media WHERE status = 'ok' AND capture_read = 0 "
                          "ORDER BY id LIMIT ?", (max(0, int(limit)),))
        return [_media_record(r) for r in rows]

    def _update_media(self, media_id: int, assignments: str, params: tuple[Any, ...]) -> None:
        with self.transaction(f"updating media {media_id}") as conn:
            if (
                conn.execute(f"UPDATE media SET {assignments} WHERE id = ?", (*params, media_id)).rowcount
                == 0
            ):
                raise NotFound(f"media {media_id} is not in {self.path}")

    def media(self, media_id: int) -> MediaRecord:
        """One media row by id; raises :class:`NotFound`."""
        rows = self._read("reading media", f"SELECT {_MEDIA_COLUMNS} FROM media WHERE id = ?", (media_id,))
        if not rows:
            raise NotFound(f"media {media_id} is not in {self.path}")
        return _media_record(rows[0])

    def media_of(self, media_ids: Iterable[int]) -> dict[int, MediaRecord]:
        """Several media rows at once by id (a page of search results); unknown ids are left out."""
        rows = self._read_in("reading media", f"SELECT {_MEDIA_COLUMNS} FROM media WHERE id IN ({{marks}})", (),
                             sorted({int(m) for m in media_ids}))
        return {record.id: record for record in map(_media_record, rows)}

    def media_by_path(self, path: Path) -> MediaRecord | None:
        """The media row at a path, or None."""
        rows = self._read(
            "reading media", f"SELECT {_MEDIA_COLUMNS} FROM media WHERE path = ?", (_path_value(path),)
        )
        return _media_record(rows[0]) if rows else None

    def media_by_hash(self, digest: str) -> list[MediaRecord]:
        """The media rows with this content hash, present ones first, then oldest first."""
        rows = self._read(
            "reading media",
            f"SELECT {_MEDIA_COLUMNS} FROM media WHERE content_hash = ? ORDER BY status = 'missing', id",
            (digest,),
        )
        return [_media_record(r) for r in rows]

    def iter_media(self, status: MediaStatus | str | None = None) -> Iterator[MediaRecord]:
        """Every media row (optionally of one status) in id order, read a page at a time."""
        where = "" if status is None else "AND status = ?"
        extra = () if status is None else (MediaStatus(status).value,)
        last = 0
        while True:
            rows = self._read(
                "listing media",
                f"SELECT {_MEDIA_COLUMNS} FROM media WHERE id > ? {where} ORDER BY id LIMIT {_PAGE}",
                (last, *extra),
            )
            yield from map(_media_record, rows)
            if len(rows) < _PAGE:
                return
            last = rows[-1][0]

    def browse_media(self, offset: int = 0, limit: int = 60, order: str = "newest", folder: Path | None = None,
                     kind: MediaKind | str | None = None, annotation: str = "all") -> list[MediaRecord]:
        """One page of the indexed (ok) items, sorted and filtered in SQL (served by the v4 browse indexes).

        ``order``: ``newest`` / ``oldest`` (file mtime, then id), ``taken`` / ``taken-oldest`` (the EXIF date
        taken, the file's mtime where there is none, then id) or ``name`` (:func:`name_key`, then path).
        ``folder`` keeps the items under it; ``kind`` one media kind; ``annotation``: ``all``, ``captioned``
        (a user or imported caption), ``uncaptioned`` (none) or ``judged`` (a pair, accepted or rejected).
        """
        orders = {"newest": "mtime_ns DESC, id DESC", "oldest": "mtime_ns, id", "name": "name_key, path, id",
                  "taken": f"{_TAKEN_OR_MTIME} DESC, id DESC", "taken-oldest": f"{_TAKEN_OR_MTIME}, id"}
        if order not in orders:
            raise CatalogError(f"unknown browse order {order!r}")
        where, params = _browse_filter(folder, kind, annotation)
        rows = self._read(
            "browsing media",
            f"SELECT {_MEDIA_COLUMNS} FROM media WHERE {where} ORDER BY {orders[order]} LIMIT ? OFFSET ?",
            (*params, max(0, int(limit)), max(0, int(offset))),
        )
        return [_media_record(r) for r in rows]

    def count_browse_media(self, folder: Path | None = None, kind: MediaKind | str | None = None,
                           annotation: str = "all") -> int:
        """How many items :meth:`browse_media` lists with these filters, in all its pages."""
        where, params = _browse_filter(folder, kind, annotation)
        return self._read("counting browsed media", f"SELECT COUNT(*) FROM media WHERE {where}", tuple(params))[0][0]

    def media_ids(self, folder: Path | None = None, kind: MediaKind | str | None = None) -> np.ndarray:
        """The ids of the indexed items in ``folder`` and of ``kind`` (a search's scope), ascending."""
        where, params = _browse_filter(folder, kind, "all")
        rows = self._read("listing media ids", f"SELECT id FROM media WHERE {where} ORDER BY id", tuple(params))
        return np.fromiter((r[0] for r in rows), np.int64, len(rows))

    def captions_of(self, media_ids: Iterable[int]) -> dict[int, list[CaptionRecord]]:
        """The captions of several items at once (oldest first each); items without any are left out."""
        out: dict[int, list[CaptionRecord]] = {}
        rows = self._read_in(
            "reading captions",
            "SELECT id, media_id, text, source, created_at, updated_at FROM captions "
            "WHERE media_id IN ({marks}) ORDER BY id",
            (),
            sorted({int(m) for m in media_ids}),
        )
        for record in map(_caption_record, rows):
            out.setdefault(record.media_id, []).append(record)
        return out

    def pairs_of(self, media_ids: Iterable[int]) -> dict[int, list[PairRecord]]:
        """The pairs of several items at once (oldest first each); items without any are left out."""
        out: dict[int, list[PairRecord]] = {}
        rows = self._read_in(
            "listing pairs",
            "SELECT id, media_id, query, label, source, created_at FROM pairs WHERE media_id IN ({marks}) ORDER BY id",
            (),
            sorted({int(m) for m in media_ids}),
        )
        for i, m, q, lab, s, c in rows:
            out.setdefault(m, []).append(PairRecord(i, m, q, lab, CaptionSource(s), c))
        return out

    def count_captioned(self) -> tuple[int, int]:
        """``(indexed items with a user or imported caption, indexed items)``, counted in SQL."""
        rows = self._read(
            "counting captioned media",
            "SELECT COUNT(*), SUM(EXISTS (SELECT 1 FROM captions c WHERE c.media_id = media.id "
            "AND c.source <> 'pseudo')) FROM media WHERE status = 'ok'",
        )
        total, captioned = rows[0]
        return int(captioned or 0), int(total)

    def pending_media(self) -> list[MediaRecord]:
        """Rows still to be indexed; an interrupted index resumes from these."""
        return list(self.iter_media(MediaStatus.PENDING))

    def failures(self) -> list[tuple[Path, str]]:
        """``(path, error)`` of every file that could not be indexed."""
        rows = self._read(
            "listing failures", "SELECT path, error FROM media WHERE status = 'failed' ORDER BY id"
        )
        return [(Path(_path_text(path)), error or "") for path, error in rows]

    def annotation_version(self) -> tuple:
        """A value that changes whenever a caption or a pair is added, edited or deleted (what the search's
        index of the user's words is rebuilt on)."""
        captions = self._read("reading the annotations' version",
                              "SELECT count(*), max(id), max(updated_at), total(length(text)) FROM captions", ())
        pairs = self._read("reading the annotations' version",
                           "SELECT count(*), max(id), total(label), total(length(query)) FROM pairs", ())
        return tuple(captions[0]) + tuple(pairs[0])

    def version(self) -> tuple[int, int]:
        """A value that changes whenever the file's content may have: rows this connection changed, and SQLite's
        ``data_version`` (which moves when another connection commits). A re-scan that leaves it as it was
        changed nothing, so the service keeps its search caches (a 100,000-item index is not reloaded)."""
        with self._lock:
            conn = self._live()
            return conn.total_changes, conn.execute("PRAGMA data_version").fetchone()[0]

    def counts(self) -> dict[str, dict[str, int]]:
        """``{"status": {status: n}, "kind": {kind: n}}``; kinds count indexed (ok) items only."""
        by_status = self._read("counting media", "SELECT status, COUNT(*) FROM media GROUP BY status")
        by_kind = self._read(
            "counting media", "SELECT kind, COUNT(*) FROM media WHERE status = 'ok' GROUP BY kind"
        )
        return {"status": dict(by_status), "kind": dict(by_kind)}

    # -- captions ------------------------------------------------------------------------------------------

    def add_caption(self, media_id: int, text: str, source: CaptionSource | str) -> int:
        """Add a caption; returns its id. An item has at most one pseudo caption."""
        now = time.time()
        with self.transaction(f"adding caption to media {media_id}") as conn:
            cursor = conn.execute(
                "INSERT INTO captions (media_id, text, source, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (media_id, text, CaptionSource(source).value, now, now),
            )
            return int(cursor.lastrowid or 0)

    def update_caption(self, caption_id: int, text: str) -> None:
        """Replace a caption's text."""
        with self.transaction(f"updating caption {caption_id}") as conn:
            cursor = conn.execute(
                "UPDATE captions SET text = ?, updated_at = ? WHERE id = ?", (text, time.time(), caption_id)
            )
            if cursor.rowcount == 0:
                raise NotFound(f"caption {caption_id} is not in {self.path}")

    def delete_caption(self, caption_id: int) -> None:
        """Delete a caption."""
        with self.transaction(f"deleting caption {caption_id}") as conn:
            if conn.execute("DELETE FROM captions WHERE id = ?", (caption_id,)).rowcount == 0:
                raise NotFound(f"caption {caption_id} is not in {self.path}")

    def captions(
        self, media_id: int, sources: Iterable[CaptionSource | str] | None = None
    ) -> list[CaptionRecord]:
        """An item's captions (optionally only some sources), oldest first."""
        rows = self._read(
            "reading captions",
            "SELECT id, media_id, text, source, created_at, updated_at FROM captions "
            "WHERE media_id = ? ORDER BY id",
            (media_id,),
        )
        records = map(_caption_record, rows)
        if sources is None:
            return list(records)
        wanted = {CaptionSource(s) for s in sources}
        return [r for r in records if r.source in wanted]

    def set_pseudo_caption(self, media_id: int, text: str) -> int:
        """Replace the item's one pseudo caption; returns the new caption's id."""
        with self.transaction(f"setting pseudo caption of media {media_id}"):
            self._live().execute("DELETE FROM captions WHERE media_id = ? AND source = 'pseudo'", (media_id,))
            return self.add_caption(media_id, text, CaptionSource.PSEUDO)

    def iter_captions(self, source: CaptionSource | str | None = None) -> Iterator[CaptionRecord]:
        """Every caption (optionally of one source) in id order, read a page at a time."""
        where = "" if source is None else "AND source = ?"
        extra = () if source is None else (CaptionSource(source).value,)
        last = 0
        while True:
            rows = self._read(
                "listing captions",
                "SELECT id, media_id, text, source, created_at, updated_at FROM captions "
                f"WHERE id > ? {where} ORDER BY id LIMIT {_PAGE}",
                (last, *extra),
            )
            yield from map(_caption_record, rows)
            if len(rows) < _PAGE:
                return
            last = rows[-1][0]

    # -- pairs ---------------------------------------------------------------------------------------------

    def add_pair(self, media_id: int, query: str, label: int, source: CaptionSource | str) -> int:
        """Record that ``query`` matches (label +1) or does not match (-1) the item; returns the pair id."""
        if label not in (1, -1):
            raise CatalogError(f"pair label {label!r} for media {media_id} is not +1 or -1")
        with self.transaction(f"adding pair to media {media_id}") as conn:
            cursor = conn.execute(
                "INSERT INTO pairs (media_id, query, label, source, created_at) VALUES (?, ?, ?, ?, ?)",
                (media_id, query, label, CaptionSource(source).value, time.time()),
            )
            return int(cursor.lastrowid or 0)

    def delete_pair(self, pair_id: int) -> None:
        """Delete a pair."""
        with self.transaction(f"deleting pair {pair_id}") as conn:
            if conn.execute("DELETE FROM pairs WHERE id = ?", (pair_id,)).rowcount == 0:
                raise NotFound(f"pair {pair_id} is not in {self.path}")

    def pairs(
        self, media_id: int | None = None, source: CaptionSource | str | None = None
    ) -> list[PairRecord]:
        """Pairs, optionally of one item and/or one source, oldest first."""
        clauses, params = ["1"], []
        if media_id is not None:
            clauses.append("media_id = ?")
            params.append(media_id)
        if source is not None:
            clauses.append("source = ?")
            params.append(CaptionSource(source).value)
        rows = self._read(
            "listing pairs",
            "SELECT id, media_id, query, label, source, created_at FROM pairs "
            f"WHERE {' AND '.join(clauses)} ORDER BY id",
            params,
        )
        return [PairRecord(i, m, q, lab, CaptionSource(s), c) for i, m, q, lab, s, c in rows]

    # -- models --------------------------------------------------------------------------------------------

    def register_model(
        self, name: str, method: str, path: Path, metrics: dict[str, Any] | None = None
    ) -> int:
        """Register a trained model (inactive); returns its id. Names are unique."""
        with self.transaction(f"registering model {name!r}") as conn:
            if conn.execute("SELECT 1 FROM models WHERE name = ?", (name,)).fetchone():
                raise CatalogError(f"model {name!r} is already registered in {self.path}")
            cursor = conn.execute(
                "INSERT INTO models (name, method, path, created_at, metrics_json) VALUES (?, ?, ?, ?, ?)",
                (name, method, str(path), time.time(), _metrics_json(name, metrics)),
            )
            return int(cursor.lastrowid or 0)

    def models(self) -> list[ModelRecord]:
        """All registered models, oldest first."""
        return [_model_record(r) for r in self._read("listing models", f"{_MODEL_SELECT} ORDER BY id")]

    def model(self, name: str) -> ModelRecord:
        """A model by name; raises :class:`NotFound`."""
        rows = self._read("reading model", f"{_MODEL_SELECT} WHERE name = ?", (name,))
        if not rows:
            raise NotFound(f"model {name!r} is not registered in {self.path}")
        return _model_record(rows[0])

    def active_model(self) -> ModelRecord | None:
        """The model searches use, or None."""
        rows = self._read("reading active model", f"{_MODEL_SELECT} WHERE is_active = 1")
        return _model_record(rows[0]) if rows else None

    def set_active_model(self, name: str | None) -> None:
        """Make ``name`` the one active model (None: no model). Deletes nothing."""
        with self.transaction(f"activating model {name!r}") as conn:
            conn.execute("UPDATE models SET is_active = 0 WHERE is_active = 1")
            if name is not None:
                if conn.execute("UPDATE models SET is_active = 1 WHERE name = ?", (name,)).rowcount == 0:
                    raise NotFound(f"model {name!r} is not registered in {self.path}")

    def rename_model(self, name: str, new_name: str) -> None:
        """Register model ``name`` as ``new_name`` (its embeddings and active state stay with it)."""
        with self.transaction(f"renaming model {name!r}") as conn:
            if conn.execute("SELECT 1 FROM models WHERE name = ?", (new_name,)).fetchone():
                raise CatalogError(f"a model named {new_name!r} is already registered in {self.path}")
            if conn.execute("UPDATE models SET name = ? WHERE name = ?", (new_name, name)).rowcount == 0:
                raise NotFound(f"model {name!r} is not registered in {self.path}")

    def delete_model(self, name: str) -> None:
        """Unregister a model and delete its embeddings (the checkpoint file is the caller's to remove)."""
        with self.transaction(f"deleting model {name!r}") as conn:
            if conn.execute("DELETE FROM models WHERE name = ?", (name,)).rowcount == 0:
                raise NotFound(f"model {name!r} is not registered in {self.path}")

    # -- embeddings ----------------------------------------------------------------------------------------

    def put_embeddings(
        self,
        model_id: int,
        media_ids: Sequence[int],
        vectors: np.ndarray,
        extras: dict[str, np.ndarray] | None = None,
    ) -> None:
        """Store ``vectors`` (N, K, D) float32 and per-item ``extras`` (each (N, ...)) of ``media_ids``.

        One transaction; it replaces whatever the model had for those items (vectors and extras).
        """
        ids = [int(i) for i in media_ids]
        extras = extras or {}
        self._check_embeddings(model_id, ids, vectors, extras)
        vectors = np.ascontiguousarray(vectors, dtype="<f4")
        n, k = vectors.shape[:2]
        with self.transaction(f"storing {n} embeddings of model {model_id}") as conn:
            self._delete_embedding_rows(conn, model_id, ids)
            conn.executemany(
                "INSERT INTO embeddings (media_id, model_id, head, vector) VALUES (?, ?, ?, ?)",
                ((ids[i], model_id, h, vectors[i, h].tobytes()) for i in range(n) for h in range(k)),
            )
            for name, array in extras.items():
                array = np.ascontiguousarray(array)
                dtype, shape = array.dtype.newbyteorder("<").str, json.dumps(array.shape[1:])
                conn.executemany(
                    "INSERT INTO embedding_extras (media_id, model_id, name, dtype, shape_json, data) "
                    "VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        (ids[i], model_id, name, dtype, shape, array[i].astype(dtype).tobytes())
                        for i in range(n)
                    ),
                )

    @staticmethod
    def _check_embeddings(
        model_id: int, ids: list[int], vectors: np.ndarray, extras: dict[str, np.ndarray]
    ) -> None:
        if vectors.ndim != 3 or vectors.dtype != np.float32:
            raise CatalogError(
                f"embeddings of model {model_id} must be float32 (N, K, D), "
                f"got {vectors.dtype} {vectors.shape}"
            )
        if len(ids) != vectors.shape[0] or len(set(ids)) != len(ids):
            raise CatalogError(
                f"model {model_id}: {len(ids)} media ids (unique: {len(set(ids))}) "
                f"for {vectors.shape[0]} vectors"
            )
        for name, array in extras.items():
            if array.shape[:1] != (len(ids),):
                raise CatalogError(
                    f"extra {name!r} of model {model_id} has shape {array.shape}, want ({len(ids)}, ...)"
                )

    @staticmethod
    def _delete_embedding_rows(conn: sqlite3.Connection, model_id: int, ids: Sequence[int] | None) -> None:
        for table in ("embeddings", "embedding_extras"):
            if ids is None:
                conn.execute(f"DELETE FROM {table} WHERE model_id = ?", (model_id,))
            else:
                conn.executemany(
                    f"DELETE FROM {table} WHERE model_id = ? AND media_id = ?", ((model_id, i) for i in ids)
                )

    def get_embeddings(
        self, model_id: int, media_ids: Sequence[int] | None = None
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """``(ids, vectors (N, K, D) float32, extras)`` of a model, in ``media_ids`` order when given.

        Requested items the model has no vectors for are left out (compare ``ids``); with none at all the
        vectors have shape (0, 0, 0).
        """
        rows = self._embedding_rows(model_id, media_ids)
        ids, vectors = self._stack_vectors(model_id, rows)
        if media_ids is not None:
            position = {int(m): i for i, m in enumerate(ids)}
            order = np.array([position[int(m)] for m in media_ids if int(m) in position], dtype=np.int64)
            ids, vectors = ids[order], vectors[order]
        return ids, vectors, self._extras(model_id, ids, every_item=media_ids is None)

    def _embedding_rows(self, model_id: int, media_ids: Sequence[int] | None) -> list[tuple[Any, ...]]:
        what = f"reading embeddings of model {model_id}"
        select = "SELECT media_id, head, vector FROM embeddings WHERE model_id = ?"
        if media_ids is None:
            return self._read(what, f"{select} ORDER BY media_id, head", (model_id,))
        wanted = sorted({int(m) for m in media_ids})
        rows = self._read_in(
            what, f"{select} AND media_id IN ({{marks}}) ORDER BY media_id, head", (model_id,), wanted
        )
        return rows

    def _stack_vectors(self, model_id: int, rows: list[tuple[Any, ...]]) -> tuple[np.ndarray, np.ndarray]:
        if not rows:
            return np.zeros(0, dtype=np.int64), np.zeros((0, 0, 0), dtype=np.float32)
        media = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        heads = np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))
        k = int(heads.max()) + 1
        sizes = {len(r[2]) for r in rows}
        # rows are sorted by (media, head): a well-formed model has heads 0..K-1 for every item
        if (
            len(rows) % k
            or not np.array_equal(heads, np.tile(np.arange(k), len(rows) // k))
            or len(sizes) != 1
        ):
            raise CatalogError(f"embeddings of model {model_id} in {self.path} have uneven heads or sizes")
        vectors = np.frombuffer(b"".join(r[2] for r in rows), dtype="<f4").astype(np.float32)
        return media[::k].copy(), vectors.reshape(len(rows) // k, k, sizes.pop() // 4)

    def _extras(self, model_id: int, ids: np.ndarray, every_item: bool) -> dict[str, np.ndarray]:
        what = f"reading extras of model {model_id}"
        select = "SELECT media_id, name, dtype, shape_json, data FROM embedding_extras WHERE model_id = ?"
        if every_item:  # one scan of the model's rows instead of thousands of IN lists
            rows = self._read(what, select, (model_id,))
        else:
            rows = self._read_in(what, f"{select} AND media_id IN ({{marks}})", (model_id,), ids.tolist())
        by_name: dict[str, dict[int, np.ndarray]] = {}
        for media_id, name, dtype, shape, data in rows:
            array = np.frombuffer(data, dtype=dtype).reshape(json.loads(shape))
            by_name.setdefault(name, {})[media_id] = array
        extras = {}
        for name, items in by_name.items():
            if any(int(i) not in items for i in ids):
                raise CatalogError(
                    f"extra {name!r} of model {model_id} is missing for some items in {self.path}"
                )
            stacked = np.stack([items[int(i)] for i in ids])
            extras[name] = stacked.astype(stacked.dtype.newbyteorder("="))  # stored little-endian
        return extras

    def delete_embeddings(self, model_id: int, media_ids: Sequence[int] | None = None) -> None:
        """Delete a model's vectors and extras (of some items, or all)."""
        ids = None if media_ids is None else [int(i) for i in media_ids]
        with self.transaction(f"deleting embeddings of model {model_id}") as conn:
            self._delete_embedding_rows(conn, model_id, ids)

    def embedded_ids(self, model_id: int) -> set[int]:
        """Ids of the items the model has vectors for."""
        rows = self._read(
            f"listing embedded items of model {model_id}",
            "SELECT DISTINCT media_id FROM embeddings WHERE model_id = ?",
            (model_id,),
        )
        return {r[0] for r in rows}

