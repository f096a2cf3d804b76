"""The catalog's annotations room: captions and accepted/rejected pairs, and the snapshots written before anything
deletes them (:mod:`engine.library.catalog.snapshots`) and read back by :meth:`AnnotationRoom.restore_snapshot`."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from engine.library.catalog import snapshots
from engine.library.catalog.media import MediaRoom
from engine.library.catalog.records import (
    CaptionRecord,
    NotFound,
    PairRecord,
    absolute_path,
    caption_record,
    is_under_text,
    path_text,
    path_value,
)
from engine.library.catalog.schema import name_key
from engine.sqlitestore import CatalogError
from engine.types import CaptionSource

# missing rows whose content is not present anywhere else in the library (a purge loses their annotations)
_MISSING_WITHOUT_COPY = (
    "status = 'missing' AND NOT EXISTS (SELECT 1 FROM media p WHERE p.content_hash = media.content_hash "
    "AND p.status <> 'missing')"
)


class AnnotationRoom(MediaRoom):
    """Captions, pairs and their snapshots (a part of :class:`engine.library.catalog.Catalog`; it reads media
    rows, so it stands on :class:`MediaRoom`)."""

    def root_summary(self, path: Path) -> tuple[int, int, int]:
        """``(items, captions, pairs)`` that :meth:`remove_root` would delete with the folder at ``path``: its media
        rows (whatever their status) and the user and imported captions and pairs on them, the ones its snapshot
        keeps (pseudo ones are not counted: indexing remakes them). Raises :class:`NotFound` for a path that is
        not a library folder."""
        with self._lock:
            conn = self._live()
            root_id = self._root_row(conn, path)
            items = conn.execute("SELECT COUNT(*) FROM media WHERE root_id = ?", (root_id,)).fetchone()[0]
            return (items, *self._annotation_count(conn, "root_id = ?", (root_id,)))

    def remove_root(self, path: Path) -> Path | None:
        """Remove a folder and, with it, every media row under it (and their captions, pairs, vectors).

        The user's annotations are first written to a snapshot (:mod:`engine.library.catalog.snapshots`); when it
        cannot be written (a full disk) nothing is removed. Returns the snapshot file, None when the folder's items
        carried no user or imported annotation (then none is written)."""
        with self.transaction(f"removing root {path}") as conn:
            root_id = self._root_row(conn, path)
            annotated = self._annotation_count(conn, "root_id = ?", (root_id,)) != (0, 0)
            snapshot = self._snapshot(conn, "remove-root") if annotated else None
            conn.execute("DELETE FROM roots WHERE id = ?", (root_id,))
            return snapshot

    def _root_row(self, conn: sqlite3.Connection, path: Path) -> int:
        """The id of the root folder at ``path``; raises :class:`NotFound`."""
        text = str(Path(path))
        row = conn.execute("SELECT id FROM roots WHERE path = ?", (path_value(text),)).fetchone()
        if row is None:
            raise NotFound(f"root {text} is not in {self.path}")
        return int(row[0])

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
        text = absolute_path(path, "media")
        with self.transaction(f"restoring media {path}") as conn:
            root = next((rid for rid, rpath in conn.execute("SELECT id, path FROM roots")
                         if is_under_text(str(path), path_text(rpath))), None)
            cursor = conn.execute(
                "INSERT INTO media (root_id, path, name_key, size, mtime_ns, content_hash, status) "
                "VALUES (?, ?, ?, ?, ?, ?, 'missing')",
                (root, text, name_key(path), size, mtime_ns, content_hash),
            )
            return int(cursor.lastrowid or 0)

    def restore_snapshot(self, path: Path) -> snapshots.Restored:
        """Put a snapshot's captions and pairs back (those an item already has are skipped).

        Each item is found by content hash (the one at the snapshot's path first when several share it), else by
        path; an item the library no longer has gets a new row marked missing, so its annotations wait there for
        the file to come back."""
        data = snapshots.read(path)
        captions = pairs = created = 0
        with self.transaction(f"restoring annotations from {path}"):
            for entry in data["items"]:
                media_id = self._snapshot_item(entry)
                if media_id is None:
                    media_id = self.restore_media(Path(entry["path"]), int(entry["size"]), int(entry["mtime_ns"]),
                                                  str(entry["content_hash"]))
                    created += 1
                have = {(c.text, c.source.value) for c in self.captions(media_id)}
                for caption in entry["captions"]:
                    key = (caption["text"], CaptionSource(caption["source"]).value)
                    if key not in have:
                        self.add_caption(media_id, caption["text"], key[1])
                        have.add(key)
                        captions += 1
                judged = {(p.query, p.label, p.source.value) for p in self.pairs(media_id)}
                for pair in entry["pairs"]:
                    key = (pair["query"], int(pair["label"]), CaptionSource(pair["source"]).value)
                    if key not in judged:
                        self.add_pair(media_id, *key)
                        judged.add(key)
                        pairs += 1
        return snapshots.Restored(captions, pairs, created)

    def _snapshot_item(self, entry: dict[str, Any]) -> int | None:
        """The row a snapshot's item goes back on: same content at its path, else same content, else its path."""
        at_path = self.media_by_path(Path(entry["path"]))
        if at_path is not None and at_path.content_hash == entry["content_hash"]:
            return at_path.id
        same = self.media_by_hash(str(entry["content_hash"]))
        if same:
            return same[0].id
        return at_path.id if at_path is not None else None

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
        records = map(caption_record, rows)
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
        select = "SELECT id, media_id, text, source, created_at, updated_at FROM captions"
        yield from map(caption_record, self._pages("listing captions", select, where, extra))

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
        for record in map(caption_record, rows):
            out.setdefault(record.media_id, []).append(record)
        return out

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

    def annotation_version(self) -> tuple:
        """A value that changes whenever a caption or a pair is added, edited or deleted (what the search's
        index of the user's words is rebuilt on)."""
        captions = self._read("reading the annotations' version",
                              "SELECT count(*), max(id), max(updated_at), total(length(text)) FROM captions", ())
        pairs = self._read("reading the annotations' version",
                           "SELECT count(*), max(id), total(label), total(length(query)) FROM pairs", ())
        return tuple(captions[0]) + tuple(pairs[0])
