"""The catalog's records and how paths are stored: what every room of :mod:`engine.library.catalog` reads and
returns."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple

from engine.sqlitestore import CatalogError
from engine.types import CaptionSource, MediaKind

PAGE = 1000  # rows per page when iterating, so no cursor stays open across a yield


class NotFound(CatalogError):
    """A record asked for by id or name does not exist."""


class MediaStatus(StrEnum):
    """Where a media row is in the scan/index cycle."""

    PENDING = "pending"  # found, not yet indexed (an interrupted index resumes from these)
    OK = "ok"
    FAILED = "failed"  # retried only when the file's size or mtime changes
    MISSING = "missing"  # file gone (or its drive offline) at the last scan; kept, with its annotations


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


MEDIA_COLUMNS = (
    "id, root_id, path, size, mtime_ns, content_hash, kind, format, width, height, n_frames, duration_s, "
    "status, error, indexed_at, features_backbone"
)


def media_record(row: tuple[Any, ...]) -> MediaRecord:
    values = list(row)
    values[2] = Path(path_text(values[2]))
    values[6] = MediaKind(values[6]) if values[6] is not None else None
    values[12] = MediaStatus(values[12])
    return MediaRecord(*values)


def caption_record(row: tuple[Any, ...]) -> CaptionRecord:
    id_, media_id, text, source, created, updated = row
    return CaptionRecord(id_, media_id, text, CaptionSource(source), created, updated)


def model_record(row: tuple[Any, ...]) -> ModelRecord:
    id_, name, method, path, created, metrics, active = row
    return ModelRecord(id_, name, method, Path(path), created, json.loads(metrics), bool(active))


def absolute_path(path: Path | str, what: str) -> str | bytes:
    if not Path(path).is_absolute():
        raise CatalogError(f"{what} path {str(path)!r} is not absolute")
    return path_value(path)


def path_value(path: Path | str) -> str | bytes:
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


def is_under_text(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def path_text(value: str | bytes) -> str:
    """The inverse of :func:`path_value`, as text (with surrogates for an undecodable name)."""
    return os.fsdecode(value) if isinstance(value, bytes) else value
