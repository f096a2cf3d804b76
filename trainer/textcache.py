"""The text-feature cache of the trainer: per-caption token and sentence vectors of one text encoder.

One SQLite file per encoder fingerprint (:func:`text_cache_path`: the encoder's name plus a
hash of its weights' size and mtime, so GloVe and MiniLM, or a re-prepared MiniLM, never share rows), with the
house settings of :class:`engine.sqlitestore.SQLiteStore` (WAL, one transaction per write). Each caption is one row
keyed by the SHA-256 of its text (``UNIQUE``, so repeats never pile up): float16 token vectors (n, W) in
``tokens`` and the float32 MiniLM sentence vector in ``sentences``, a separate table so that a sentence-only
model never pages in token blobs. New captions are written one encoding chunk per transaction, so a crash
mid-write loses at most that chunk and never leaves a half row. A file SQLite reports as damaged (garbage,
truncated) or recorded for another encoder is set aside as ``<name>.corrupt`` and rebuilt; a row whose blob has
the wrong size is re-encoded. Old whole-list ``*.npz`` files from earlier versions are ignored, not deleted.
SQLite keeps no checksum of page contents, so a bit flipped inside a blob would go unnoticed (as in
:mod:`engine.features.featurestore`).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from engine.sqlitestore import CatalogError, SQLiteStore

log = logging.getLogger(__name__)

SENTENCE_DIM = 384  # MiniLM's sentence vector
TEXT_READ_CHUNK = 500  # keys per SELECT (well under SQLite's bound-parameter limit)
_F16 = np.dtype("<f2")
_F32 = np.dtype("<f4")
# A caption's token blob (~20 x 384 float16, 15 KB) overflows a 4 KB page into a chain SQLite copies page by page;
# in 64 KB pages it stays whole, and memory-mapped reads then fetch 3,000 captions ~10x faster (measured: 0.46 s
# with 4 KB pages, 0.03 s with 64 KB pages and mmap). page_size only applies to a new file, before WAL is set.
_TEXT_PRAGMAS = ("PRAGMA page_size=65536", "PRAGMA mmap_size=4294967296")


class TextCacheError(CatalogError):
    """A text-feature cache file cannot be opened, read or written; the message names the file."""


class TextCacheMismatch(TextCacheError):
    """A text-feature cache file records another encoder fingerprint or width than the one it is opened for."""


@dataclass(frozen=True)
class CachedCaption:
    """One caption's cached features: ``tokens`` (n, W) float16 and ``sentence`` (S,) float32, either None
    when absent (GloVe has no sentence) or not read. ``key`` is :func:`caption_key` of its text."""

    key: bytes
    tokens: np.ndarray | None
    sentence: np.ndarray | None


def caption_key(text: str) -> bytes:
    """The cache key of a caption: SHA-256 of its UTF-8 text (32 bytes). Equal texts share one row."""
    return hashlib.sha256(text.encode("utf-8")).digest()


def text_cache_path(folder: Path, encoder: str, fingerprint: str) -> Path:
    """The cache file of one encoder fingerprint in ``folder``: a re-prepared encoder gets a new file."""
    return folder / f"{encoder}-{hashlib.sha256(fingerprint.encode()).hexdigest()[:16]}.sqlite"


def _text_schema_v1(conn: sqlite3.Connection) -> None:
    """Token and sentence vectors in separate tables, so a sentence-only model never pages in token blobs."""
    conn.execute("CREATE TABLE tokens (key BLOB NOT NULL UNIQUE, count INTEGER NOT NULL, vectors BLOB NOT NULL)")
    conn.execute("CREATE TABLE sentences (key BLOB NOT NULL UNIQUE, vector BLOB NOT NULL)")


class TextCache(SQLiteStore):
    """Per-caption text features of one encoder fingerprint, in one SQLite file (see the module docstring).

    ``fingerprint`` and ``width`` are recorded in the file; opening it with others raises
    :class:`TextCacheError` (the file belongs to another encoder and is rebuilt by :func:`_open_text_cache`).
    """

    error = TextCacheError

    def __init__(self, path: Path, fingerprint: str, width: int) -> None:
        super().__init__(path, (_text_schema_v1,), first_pragmas=_TEXT_PRAGMAS)
        self.fingerprint, self.width = fingerprint, width
        try:
            with self.transaction("recording the encoder") as conn:
                for name, value in (("fingerprint", fingerprint), ("width", str(width))):
                    row = conn.execute("SELECT value FROM meta WHERE key = ?", (name,)).fetchone()
                    if row is None:
                        conn.execute("INSERT INTO meta (key, value) VALUES (?, ?)", (name, value))
                    elif row[0] != value:
                        raise TextCacheMismatch(f"{path} holds {name} {row[0]!r}, not {value!r}")
        except TextCacheError:
            self.close()
            raise

    def __len__(self) -> int:
        """How many captions have token vectors cached."""
        return int(self._read("counting captions", "SELECT COUNT(*) FROM tokens")[0][0])

    def get_many(self, keys: Sequence[bytes], tokens: bool, sentence: bool) -> dict[bytes, CachedCaption]:
        """The cached parts asked for, of the ``keys`` that have all of them; a row whose blob has the wrong size
        is left out (and re-encoded by the caller), with a warning."""
        found: dict[bytes, dict[str, np.ndarray]] = {key: {} for key in keys}
        bad = 0
        for start in range(0, len(keys), TEXT_READ_CHUNK):
            chunk = list(keys[start:start + TEXT_READ_CHUNK])
            marks = ",".join("?" * len(chunk))
            if tokens:
                for key, count, blob in self._read("reading token vectors",
                                                   f"SELECT key, count, vectors FROM tokens WHERE key IN ({marks})",
                                                   chunk):
                    if len(blob) != count * self.width * _F16.itemsize:
                        bad += 1
                        continue
                    found[key]["tokens"] = np.frombuffer(blob, _F16).reshape(count, self.width)
            if sentence:
                for key, blob in self._read("reading sentence vectors",
                                            f"SELECT key, vector FROM sentences WHERE key IN ({marks})", chunk):
                    if len(blob) != SENTENCE_DIM * _F32.itemsize:
                        bad += 1
                        continue
                    found[key]["sentence"] = np.frombuffer(blob, _F32)
        if bad:
            log.warning("%s: %d damaged caption rows are re-encoded", self.path, bad)
        wanted = {part for part, asked in (("tokens", tokens), ("sentence", sentence)) if asked}
        return {key: CachedCaption(key, parts.get("tokens"), parts.get("sentence"))
                for key, parts in found.items() if wanted <= parts.keys()}

    def put_many(self, rows: Sequence[CachedCaption]) -> None:
        """Store ``rows`` (replacing rows with the same key) in one transaction: all of them or none."""
        with self.transaction("caching text features") as conn:
            for row in rows:
                if row.tokens is None or row.tokens.ndim != 2 or row.tokens.shape[1] != self.width:
                    raise TextCacheError(f"{self.path}: token vectors of width {self.width} expected for a caption")
                conn.execute("INSERT INTO tokens (key, count, vectors) VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE "
                             "SET count = excluded.count, vectors = excluded.vectors",
                             (row.key, len(row.tokens), np.ascontiguousarray(row.tokens, _F16).tobytes()))
                if row.sentence is not None:
                    conn.execute("INSERT INTO sentences (key, vector) VALUES (?, ?) ON CONFLICT(key) DO UPDATE "
                                 "SET vector = excluded.vector",
                                 (row.key, np.ascontiguousarray(row.sentence, _F32).tobytes()))


def open_text_cache(folder: Path, encoder: str, fingerprint: str, width: int) -> TextCache | None:
    """The cache of ``fingerprint``, rebuilt empty when the file is damaged; None when no cache can be
    opened at all (e.g. a read-only folder): the captions are then encoded without caching."""
    path = text_cache_path(folder, encoder, fingerprint)
    try:
        return TextCache(path, fingerprint, width)
    except TextCacheError as exc:
        return _rebuild_text_cache(path, fingerprint, width, exc)


_SQLITE_DAMAGE = (11, 26)  # SQLITE_CORRUPT ("disk image is malformed"), SQLITE_NOTADB ("file is not a database")


def _damaged(exc: TextCacheError) -> bool:
    """Whether ``exc`` says the file itself is bad (rebuild it), not that it is busy, read-only or from a newer
    app version (leave it alone and run uncached)."""
    cause = exc.__cause__
    return isinstance(exc, TextCacheMismatch) or (
        isinstance(cause, sqlite3.DatabaseError) and getattr(cause, "sqlite_errorcode", 0) & 0xFF in _SQLITE_DAMAGE)


def _rebuild_text_cache(path: Path, fingerprint: str, width: int, reason: TextCacheError) -> TextCache | None:
    """Set the damaged ``path`` aside as ``<name>.corrupt`` (replacing an older one, so damage never piles up)
    and start an empty cache there; a cache that failed for another reason is left as it is and not used."""
    if not _damaged(reason):
        log.warning("text features are not cached: %s", reason)
        return None
    log.warning("text feature cache %s is damaged (%s); rebuilding it", path, reason)
    try:
        if path.exists():
            os.replace(path, path.with_name(path.name + ".corrupt"))
        for suffix in ("-wal", "-shm"):  # a journal of the damaged file must not be replayed into the new one
            path.with_name(path.name + suffix).unlink(missing_ok=True)
        return TextCache(path, fingerprint, width)
    except (OSError, TextCacheError) as exc:
        log.warning("text features are not cached: %s", exc)
        return None


def read_cached(cache: TextCache | None, keys: list[bytes], tokens: bool,
                sentence: bool) -> tuple[dict[bytes, CachedCaption], TextCache | None]:
    """The cached captions among ``keys`` (their ``tokens`` and/or ``sentence`` parts) and the cache to write to
    (a fresh one when reading found damage)."""
    if cache is None:
        return {}, None
    try:
        return cache.get_many(keys, tokens, sentence), cache
    except TextCacheError as exc:
        cache.close()
        return {}, _rebuild_text_cache(cache.path, cache.fingerprint, cache.width, exc)


def write_cached(cache: TextCache | None, rows: Sequence[CachedCaption]) -> TextCache | None:
    """Cache ``rows``; a cache that cannot be written is closed and skipped (returns None), never fatal."""
    if cache is None:
        return None
    try:
        cache.put_many(rows)
        return cache
    except TextCacheError as exc:
        log.warning("could not cache text features in %s: %s", cache.path, exc)
        cache.close()
        return None
