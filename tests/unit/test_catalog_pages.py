"""Reading a page of search results at once (``Catalog.media_of``, ``Catalog.captions_of``)."""

from __future__ import annotations

from pathlib import Path

from engine.library.catalog import Catalog
from engine.types import CaptionSource


def test_media_of_reads_the_same_records_as_one_by_one_and_leaves_unknown_ids_out(tmp_path: Path) -> None:
    with Catalog(tmp_path / "catalog.sqlite") as catalog:
        made = []
        for i in range(5):
            path = tmp_path / f"photo{i}.jpg"
            path.write_bytes(b"x" * (i + 1))
            made.append(catalog.upsert_media(path, i + 1, 1, f"hash{i}", None)[0])
        catalog.add_caption(made[2], "a red kite", CaptionSource.USER)
        wanted = [made[4], made[0], made[2], 10**6]
        records = catalog.media_of(wanted)
        assert set(records) == {made[4], made[0], made[2]}
        assert all(records[m] == catalog.media(m) for m in records)
        assert [c.text for c in catalog.captions_of(wanted)[made[2]]] == ["a red kite"]
        assert catalog.media_of([]) == {}
