"""SQL and text safety (issue #8): hostile captions, queries and paths are stored and found again intact.

Captions and pair queries with quotes, semicolons, an injection attempt, NUL, emoji, LIKE wildcards and
10 MB of text go through the `Workspace` and come back byte for byte, from the same workspace and from a
fresh one on the same files; the tables the injection names are still there. A folder and a file whose names
are made of quotes and semicolons are indexed and found by text and by example.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from engine.workspace import Workspace
from tests.mediagen import make_jpeg, make_png

INJECTION = "'); DROP TABLE media; --"
HOSTILE_TEXTS = [
    "it's a \"quoted\" caption",
    "one; two; three;",
    INJECTION,
    'Robert"); DROP TABLE captions; --',
    "a NUL\x00in the middle",
    "emoji 🐱‍👤 🎉 and a flag 🇫🇷",
    "100% of_the LIKE wildcards \\ and a backslash",
    "right-to-left \u202e text and combining e\u0301",
]
TEN_MB = 10 * 1024 * 1024


def ten_megabyte_caption() -> str:
    """10 MB of words separated by single spaces (what ``add_caption``'s whitespace cleaning keeps as is)."""
    words = np.random.default_rng(0).integers(0, 10**6, TEN_MB // 5).astype(str)
    text = " ".join(words)
    return text[:TEN_MB].rstrip()


@pytest.fixture
def library(tmp_path: Path) -> Path:
    folder = tmp_path / "it's a \"folder\"; DROP TABLE media; --"
    folder.mkdir()
    make_jpeg(folder / f"{INJECTION}.jpg", (64, 64), (220, 30, 30))
    make_png(folder / "quote'; semicolon; \"double\".png", (64, 64), (30, 30, 220))
    make_jpeg(folder / "plain.jpg", (64, 64), (30, 200, 30))
    return folder


@pytest.fixture
def service(assets_dir: Path) -> Workspace:
    with closing(Workspace.open("sql-safety", assets_dir)) as svc:
        yield svc


def test_hostile_captions_and_queries_come_back_intact(service, library):
    list(service.library.index([library]))
    media = service.state.catalog.media_by_path(library / "plain.jpg")
    texts = [*HOSTILE_TEXTS, ten_megabyte_caption()]
    ids = [service.annotations.add_caption(media.id, text) for text in texts]
    pair_ids = [service.annotations.accept_pair(text, media.id) for text in HOSTILE_TEXTS]
    edited = service.annotations.add_caption(media.id, "to be edited")
    service.annotations.update_caption(edited, INJECTION)

    with closing(Workspace.open("sql-safety")) as fresh:  # from disk, not from a cache
        stored = {c.id: c.text for c in fresh.annotations.captions(media.id) if c.source == "user"}
        queries = {p.id: p.query for p in fresh.state.catalog.pairs(media.id)}
        assert [stored[i] for i in ids] == texts and stored[edited] == INJECTION
        assert len(stored[ids[-1]]) >= TEN_MB - 8
        assert [queries[i] for i in pair_ids] == HOSTILE_TEXTS
        counts = fresh.library.counts()
    assert counts["total"] == 3 and counts["image"] == 3  # DROP TABLE media did nothing
    with closing(sqlite3.connect(service.state.catalog.path)) as conn:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"media", "captions", "pairs"} <= tables


def test_hostile_queries_search_without_error(service, library):
    list(service.library.index([library]))
    for text in [*HOSTILE_TEXTS, "%", "_", "' OR 1=1 --"]:
        hits = service.search.text(text, top=3)
        assert len(hits) == 3, text


def test_paths_made_of_quotes_and_semicolons_are_indexed_and_searchable(service, library):
    list(service.library.index([library]))
    assert not service.library.failures()
    injected = library / f"{INJECTION}.jpg"
    row = service.state.catalog.media_by_path(injected)
    assert row is not None and row.path == injected and row.status == "ok"
    assert service.search.example(injected, top=1)[0].path == str(injected)
    red = service.search.text("a red picture", top=3)
    assert str(injected) in [hit.path for hit in red]
    assert service.library.thumbnail(row.id).is_file()
