"""The feature store's SQLite schema, version by version (:class:`engine.features.featurestore.FeatureStore` runs
``MIGRATIONS`` in order through :class:`engine.sqlitestore.SQLiteStore`), and the codes that say how a ``locals``
row is encoded."""

from __future__ import annotations

import sqlite3

CODEC_FLOAT16 = 0  # locals.codec: (n, D) float16, the only format before schema v3
# locals.codec 1 was a linear 8-bit scale, never released; such a row reads as damaged (recomputed by readers)
CODEC_SQRT8 = 2  # locals.codec: n float32 offsets, n float32 ranges, then (n, D) uint8 square-root codes


def _schema_v1(conn: sqlite3.Connection) -> None:
    """Small per-item fields in ``items``; the big ones in their own tables so reading globals stays fast."""
    conn.execute(
        """CREATE TABLE items (
            id INTEGER PRIMARY KEY, content_hash TEXT NOT NULL, backbone TEXT NOT NULL, dim INTEGER NOT NULL,
            global_feature BLOB NOT NULL, region_k INTEGER, region_top_ids BLOB, region_top_probs BLOB,
            image_top_ids BLOB, image_top_probs BLOB, created_at REAL NOT NULL,
            UNIQUE (content_hash, backbone))"""
    )
    for table, count in (("locals", "n_regions"), ("frames", "n_frames")):
        conn.execute(
            f"""CREATE TABLE {table} (
                item_id INTEGER PRIMARY KEY REFERENCES items(id) ON DELETE CASCADE,
                {count} INTEGER NOT NULL, data BLOB NOT NULL)"""
        )


def _schema_v2(conn: sqlite3.Connection) -> None:
    """The number of ``locals`` rows, kept by triggers (cascaded deletes of items fire them too), so storing a
    batch reads one row instead of counting a table whose rows are ~125 KB each (a scan that grew with the
    library: 19 ms a batch at 8,000 photos, every batch)."""
    conn.execute("CREATE TABLE counts (name TEXT PRIMARY KEY, n INTEGER NOT NULL)")
    conn.execute("INSERT INTO counts (name, n) VALUES ('locals', (SELECT COUNT(*) FROM locals))")
    conn.execute("CREATE TRIGGER locals_added AFTER INSERT ON locals "
                 "BEGIN UPDATE counts SET n = n + 1 WHERE name = 'locals'; END")
    conn.execute("CREATE TRIGGER locals_removed AFTER DELETE ON locals "
                 "BEGIN UPDATE counts SET n = n - 1 WHERE name = 'locals'; END")


def _schema_v3(conn: sqlite3.Connection) -> None:
    """How each ``locals`` row is encoded; the rows already there are float16 and stay readable as they are."""
    conn.execute(f"ALTER TABLE locals ADD COLUMN codec INTEGER NOT NULL DEFAULT {CODEC_FLOAT16}")


MIGRATIONS = (_schema_v1, _schema_v2, _schema_v3)
