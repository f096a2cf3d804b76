"""The catalog's media room: the library's folders, what a scan finds, the indexing results and every read of
media rows (one item, a page of the browse grid, the counts)."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from engine.library.catalog.records import (
    MEDIA_COLUMNS,
    PAGE,
    FoundFile,
    MediaRecord,
    MediaStatus,
    NotFound,
    ScanPlan,
    absolute_path,
    media_record,
    path_text,
    path_value,
)
from engine.library.catalog.schema import TAKEN_OR_MTIME, name_key
from engine.sqlitestore import CatalogError, SQLiteStore
from engine.types import CaptureInfo, MediaKind

# a moved or returning row gets back the status it had before it went missing
_RESTORED_STATUS = (
    "CASE WHEN error IS NOT NULL THEN 'failed' WHEN indexed_at IS NOT NULL THEN 'ok' ELSE 'pending' END"
)


# a media path under a folder: the folder itself, or a path in [folder + "/", folder + "0") -- "0" follows "/"
# in byte order -- as text, or as bytes for the names stored as BLOBs (see path_value; TEXT never equals a BLOB)
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
    if isinstance(path_value(text), bytes):  # an undecodable folder holds only BLOB paths: no text range
        prefix = after = ""
    return path_value(text), prefix, after, raw_prefix, raw_after


class MediaRoom(SQLiteStore):
    """Roots, scanning and media rows of a catalog (a part of :class:`engine.library.catalog.Catalog`)."""

    def add_root(self, path: Path, device: int | None = None) -> int:
        """Add a folder to the library (idempotent); returns its id. ``device`` (its ``st_dev``) is recorded
        when the root is new or has none yet."""
        text = absolute_path(path, "root")
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
        return [Path(path_text(p)) for (p,) in rows]

    def root_media_count(self, root_id: int) -> int:
        """How many media rows (any status) are under a root."""
        return self._read("counting media of a root", "SELECT COUNT(*) FROM media WHERE root_id = ?", (root_id,))[0][0]

    def mark_root_missing(self, root_id: int) -> int:
        """Mark every row under a root missing (its drive is offline); returns how many changed."""
        with self.transaction(f"marking root {root_id} offline") as conn:
            return conn.execute(
                "UPDATE media SET status = 'missing' WHERE root_id = ? AND status <> 'missing'", (root_id,)
            ).rowcount

    def roots(self) -> list[Path]:
        """The library's folders, in the order they were added."""
        rows = self._read("listing roots", "SELECT path FROM roots ORDER BY id")
        return [Path(path_text(p)) for (p,) in rows]

    def root_id(self, path: Path) -> int | None:
        """The id of a root folder, or None."""
        rows = self._read("finding root", "SELECT id FROM roots WHERE path = ?", (path_value(path),))
        return rows[0][0] if rows else None

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
        rows = [(path_text(path), *rest) for path, *rest in rows]
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
        text = absolute_path(path, "media")
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
        params = [(path_value(p),) for p in paths]
        with self.transaction("marking missing media") as conn:
            before = conn.total_changes
            conn.executemany("UPDATE media SET status = 'missing' WHERE path = ? AND status <> 'missing'", params)
            return conn.total_changes - before

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

    def media_without_capture(self, limit: int = PAGE) -> list[MediaRecord]:
        """Indexed items whose date taken was never read (indexed before schema v5), at most ``limit``."""
        rows = self._read("listing media without a date taken",
                          f"SELECT {MEDIA_COLUMNS} FROM media WHERE status = 'ok' AND capture_read = 0 "
                          "ORDER BY id LIMIT ?", (max(0, int(limit)),))
        return [media_record(r) for r in rows]

    def _update_media(self, media_id: int, assignments: str, params: tuple[Any, ...]) -> None:
        with self.transaction(f"updating media {media_id}") as conn:
            if (
                conn.execute(f"UPDATE media SET {assignments} WHERE id = ?", (*params, media_id)).rowcount
                == 0
            ):
                raise NotFound(f"media {media_id} is not in {self.path}")

    def media(self, media_id: int) -> MediaRecord:
        """One media row by id; raises :class:`NotFound`."""
        rows = self._read("reading media", f"SELECT {MEDIA_COLUMNS} FROM media WHERE id = ?", (media_id,))
        if not rows:
            raise NotFound(f"media {media_id} is not in {self.path}")
        return media_record(rows[0])

    def media_of(self, media_ids: Iterable[int]) -> dict[int, MediaRecord]:
        """Several media rows at once by id (a page of search results); unknown ids are left out."""
        rows = self._read_in("reading media", f"SELECT {MEDIA_COLUMNS} FROM media WHERE id IN ({{marks}})", (),
                             sorted({int(m) for m in media_ids}))
        return {record.id: record for record in map(media_record, rows)}

    def media_by_path(self, path: Path) -> MediaRecord | None:
        """The media row at a path, or None."""
        rows = self._read(
            "reading media", f"SELECT {MEDIA_COLUMNS} FROM media WHERE path = ?", (path_value(path),)
        )
        return media_record(rows[0]) if rows else None

    def media_by_hash(self, digest: str) -> list[MediaRecord]:
        """The media rows with this content hash, present ones first, then oldest first."""
        rows = self._read(
            "reading media",
            f"SELECT {MEDIA_COLUMNS} FROM media WHERE content_hash = ? ORDER BY status = 'missing', id",
            (digest,),
        )
        return [media_record(r) for r in rows]

    def iter_media(self, status: MediaStatus | str | None = None) -> Iterator[MediaRecord]:
        """Every media row (optionally of one status) in id order, read a page at a time."""
        where = "" if status is None else "AND status = ?"
        extra = () if status is None else (MediaStatus(status).value,)
        yield from map(media_record, self._pages("listing media", f"SELECT {MEDIA_COLUMNS} FROM media", where, extra))

    def _pages(self, what: str, select: str, where: str, params: tuple) -> Iterator[tuple]:
        """The rows of ``select WHERE id > ? where`` in id order, read a page at a time (a long listing never holds
        the database or the whole table); the rows' first column is the id."""
        last = 0
        while True:
            rows = self._read(what, f"{select} WHERE id > ? {where} ORDER BY id LIMIT {PAGE}", (last, *params))
            yield from rows
            if len(rows) < PAGE:
                return
            last = rows[-1][0]

    def browse_media(self, offset: int = 0, limit: int = 60, order: str = "newest", folder: Path | None = None,
                     kind: MediaKind | str | None = None, annotation: str = "all") -> list[MediaRecord]:
        """One page of the indexed (ok) items, sorted and filtered in SQL (served by the v4 and v5 browse indexes).

        ``order``: ``newest`` / ``oldest`` (the EXIF date taken, the file's mtime where there is none, then id),
        ``modified`` / ``modified-oldest`` (the file's mtime, then id) or ``name`` (:func:`name_key`, then path).
        ``folder`` keeps the items under it; ``kind`` one media kind; ``annotation``: ``all``, ``captioned``
        (a user or imported caption), ``uncaptioned`` (none) or ``judged`` (a pair, accepted or rejected).
        """
        orders = {"newest": f"{TAKEN_OR_MTIME} DESC, id DESC", "oldest": f"{TAKEN_OR_MTIME}, id",
                  "modified": "mtime_ns DESC, id DESC", "modified-oldest": "mtime_ns, id", "name": "name_key, path, id"}
        if order not in orders:
            raise CatalogError(f"unknown browse order {order!r}")
        where, params = _browse_filter(folder, kind, annotation)
        rows = self._read(
            "browsing media",
            f"SELECT {MEDIA_COLUMNS} FROM media WHERE {where} ORDER BY {orders[order]} LIMIT ? OFFSET ?",
            (*params, max(0, int(limit)), max(0, int(offset))),
        )
        return [media_record(r) for r in rows]

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

    def pending_media(self) -> list[MediaRecord]:
        """Rows still to be indexed; an interrupted index resumes from these."""
        return list(self.iter_media(MediaStatus.PENDING))

    def failures(self) -> list[tuple[Path, str]]:
        """``(path, error)`` of every file that could not be indexed."""
        rows = self._read(
            "listing failures", "SELECT path, error FROM media WHERE status = 'failed' ORDER BY id"
        )
        return [(Path(path_text(path)), error or "") for path, error in rows]

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
