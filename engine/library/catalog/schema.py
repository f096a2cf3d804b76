"""The catalog's schema: its tables as first laid out and each migration since (see the package docstring)."""

from __future__ import annotations

import os
import re
import sqlite3
from pathlib import Path

from engine.library.catalog.records import path_text
from engine.sqlitestore import Migration


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


_DIGITS = re.compile(r"[0-9]+")
_NUMBER_WIDTH = 2  # the digits of a number's length in a name key: numbers of up to 99 digits sort by value


def _number_key(digits: re.Match[str]) -> str:
    """A run of digits as text that sorts by its value: its length (two digits), then the digits, leading zeros
    dropped ("0114" -> "03114"), so that 114 sorts before 1130 wherever both stand at the same place."""
    value = digits.group().lstrip("0") or "0"
    return f"{min(len(value), 10 ** _NUMBER_WIDTH - 1):0{_NUMBER_WIDTH}d}{value}"


def name_key(path: str | bytes | Path) -> str:
    """What the library sorts a file by when it is browsed by name: its file name case-folded, each number in it
    compared as a number (a natural sort: "video114" before "video1130", "IMG_9" before "img_10"), as text that
    SQLite's plain byte order sorts, so that a page of the listing is read from an index. A name that is not valid
    UTF-8 has its undecodable bytes replaced, so that it can be stored as text."""
    name = os.path.basename(path_text(path) if isinstance(path, str | bytes) else str(path))
    return _DIGITS.sub(_number_key, os.fsencode(name).decode("utf-8", "replace").casefold())


def _schema_v4(conn: sqlite3.Connection) -> None:
    """``media.name_key`` and the browse indexes: a page of a 100,000-item library sorted by date or name is
    read from an index (status, then the order), not by loading and sorting every row in Python."""
    conn.execute("ALTER TABLE media ADD COLUMN name_key TEXT")
    conn.create_function("polyseek_name_key", 1, name_key, deterministic=True)
    conn.execute("UPDATE media SET name_key = polyseek_name_key(path)")
    conn.execute("CREATE INDEX media_browse_by_time ON media (status, mtime_ns, id)")
    conn.execute("CREATE INDEX media_browse_by_name ON media (status, name_key, path)")
    conn.execute("CREATE INDEX captions_by_source ON captions (source, media_id)")


TAKEN_OR_MTIME = "COALESCE(taken_ns, mtime_ns)"  # the date-taken order; the same expression as its index's


def _schema_v5(conn: sqlite3.Connection) -> None:
    """When and with what each photo was taken (:class:`CaptureInfo`) and a browse index by it. Existing rows
    keep ``capture_read = 0`` until the next scan reads their headers (a migration never opens media files)."""
    for column in ("taken_at TEXT", "taken_ns INTEGER", "camera_make TEXT", "camera_model TEXT",
                   "capture_read INTEGER NOT NULL DEFAULT 0"):
        conn.execute(f"ALTER TABLE media ADD COLUMN {column}")
    conn.execute(f"CREATE INDEX media_browse_by_taken ON media (status, {TAKEN_OR_MTIME}, id)")


def _schema_v6(conn: sqlite3.Connection) -> None:
    """``media.name_key`` again, with numbers compared as numbers (:func:`name_key`; v4 compared them digit by
    digit, so "video1130" came before "video114"). The index on it is updated with the rows."""
    conn.create_function("polyseek_name_key", 1, name_key, deterministic=True)
    conn.execute("UPDATE media SET name_key = polyseek_name_key(path)")


MIGRATIONS: tuple[Migration, ...] = (_schema_v1, _schema_v2, _schema_v3, _schema_v4, _schema_v5, _schema_v6)


LATEST_SCHEMA_VERSION = len(MIGRATIONS)
