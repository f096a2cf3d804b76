"""``SearchService.item``: an item of the library as a hit of no search, which the GUI shows when the user picks
an item outside the results ("What to annotate next"); the captions a person wrote apart from the model's guess."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.service import SearchService


def test_an_item_is_a_hit_of_no_search_with_its_captions_and_the_models_guess(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLYSEEK_ASSETS", str(tmp_path / "no-assets"))  # never the developer's assets
    service = SearchService.open("item-test")
    try:
        catalog = service.catalog
        root = catalog.add_root(tmp_path / "photos")
        media_id, _ = catalog.upsert_media(tmp_path / "photos" / "dog.jpg", 10, 1, "hash-dog", root)
        catalog.add_caption(media_id, "a dog with a ball", "user")
        catalog.add_caption(media_id, "golden retriever, tennis ball", "pseudo")
        hit = service.item(media_id)
        assert (hit.media_id, Path(hit.path).name, hit.score) == (media_id, "dog.jpg", 0.0)
        assert hit.kind == catalog.media(media_id).kind  # as indexing recorded it
        assert hit.captions == ("a dog with a ball",) and hit.guess == "golden retriever, tennis ball"
    finally:
        service.close()
