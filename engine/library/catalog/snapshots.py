"""Snapshots of a library's annotations: JSON files beside the catalog, written before anything deletes rows.

Captions and accepted/rejected pairs are the one thing in a library that cannot be recomputed. Before the catalog
deletes media rows (the user purging missing items, removing a folder) it writes every user and imported caption
and pair here, keyed by the item's content hash and path, atomically (a temporary file, fsync, rename), and keeps
the newest :data:`KEEP`. ``polyseek annotations import SNAPSHOT.json``
(:meth:`engine.library.catalog.Catalog.restore_snapshot`) puts them back: on the item with that content, else at
that path, else on a new row marked missing that the next scan which finds the content takes over as a move.

Format (``version`` 1)::

    {"format": "polyseek-annotations-snapshot", "version": 1, "created_at": 1700000000.0, "reason": "purge-missing",
     "items": [{"content_hash": "...", "path": "/abs/file.jpg", "size": 123, "mtime_ns": 1, "status": "missing",
                "captions": [{"text": "...", "source": "user", "created_at": 0.0, "updated_at": 0.0}],
                "pairs": [{"query": "...", "label": 1, "source": "user", "created_at": 0.0}]}]}
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.files import atomic_write_text

FORMAT = "polyseek-annotations-snapshot"
VERSION = 1
KEEP = 10  # snapshots kept per library; the oldest go first
FOLDER_NAME = "snapshots"


class SnapshotError(ValueError):
    """A file is not a readable annotation snapshot; the message names it."""


@dataclass(frozen=True, slots=True)
class Restored:
    """What :meth:`~engine.library.catalog.Catalog.restore_snapshot` did: captions and pairs added, and rows
    created for items no longer in the library."""

    captions: int
    pairs: int
    items_created: int


def folder_of(catalog_path: Path) -> Path:
    """The snapshot folder of the catalog at ``catalog_path`` (beside it)."""
    return Path(catalog_path).parent / FOLDER_NAME


def _text(value: str | bytes) -> str:
    return os.fsdecode(value) if isinstance(value, bytes) else value


def collect(conn: sqlite3.Connection) -> dict[str, Any]:
    """Every user and imported caption and pair in the catalog behind ``conn``, grouped per item."""
    items: dict[int, dict[str, Any]] = {}

    def item(media_id: int) -> dict[str, Any]:
        if media_id not in items:
            path, size, mtime_ns, digest, status = conn.execute(
                "SELECT path, size, mtime_ns, content_hash, status FROM media WHERE id = ?", (media_id,)
            ).fetchone()
            items[media_id] = {"content_hash": digest, "path": _text(path), "size": size, "mtime_ns": mtime_ns,
                               "status": status, "captions": [], "pairs": []}
        return items[media_id]

    for media_id, text, source, created, updated in conn.execute(
        "SELECT media_id, text, source, created_at, updated_at FROM captions WHERE source <> 'pseudo' ORDER BY id"
    ).fetchall():
        item(media_id)["captions"].append({"text": text, "source": source, "created_at": created,
                                           "updated_at": updated})
    for media_id, query, label, source, created in conn.execute(
        "SELECT media_id, query, label, source, created_at FROM pairs WHERE source <> 'pseudo' ORDER BY id"
    ).fetchall():
        item(media_id)["pairs"].append({"query": query, "label": label, "source": source, "created_at": created})
    return {"format": FORMAT, "version": VERSION, "created_at": time.time(),
            "items": [items[k] for k in sorted(items)]}


def write(folder: Path, snapshot: dict[str, Any], reason: str) -> Path:
    """Write ``snapshot`` atomically into ``folder`` and keep the newest :data:`KEEP`; returns the file.

    Raises OSError (e.g. ENOSPC) with no partial file left behind."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time_ns()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now / 1e9))
    path = folder / f"annotations-{stamp}-{now % 10**9:09d}-{reason}.json"
    atomic_write_text(path, json.dumps({**snapshot, "reason": reason}, indent=1))
    for old in snapshots(folder)[:-KEEP]:
        old.unlink(missing_ok=True)
    return path


def snapshots(folder: Path) -> list[Path]:
    """The snapshot files in ``folder``, oldest first."""
    folder = Path(folder)
    return sorted(folder.glob("annotations-*.json")) if folder.is_dir() else []


def read(path: Path) -> dict[str, Any]:
    """A snapshot file's content; raises :class:`SnapshotError` when it is not one."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SnapshotError(f"{path}: cannot read the snapshot ({exc})") from exc
    if not is_snapshot(data):
        raise SnapshotError(f"{path}: not a Polyseek annotation snapshot")
    if data.get("version") != VERSION:
        raise SnapshotError(f"{path}: snapshot version {data.get('version')!r}, this app reads {VERSION}")
    return data


def is_snapshot(data: Any) -> bool:
    """Whether parsed JSON is a snapshot (rather than, say, a COCO captions file)."""
    return isinstance(data, dict) and data.get("format") == FORMAT


def is_snapshot_file(path: Path) -> bool:
    """Whether ``path`` is a JSON file that says it is a snapshot (cheap: reads the start of the file)."""
    path = Path(path)
    if not path.is_file() or path.suffix.lower() != ".json":
        return False
    try:
        with path.open("r", encoding="utf-8", errors="replace") as f:
            head = f.read(200)
    except OSError:
        return False
    return f'"{FORMAT}"' in head
