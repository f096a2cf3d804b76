"""``Library.item``: an item of the library as a hit of no search, which the GUI shows when the user picks
an item outside the results ("What to annotate next"); the captions a person wrote apart from the model's guess."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.workspace import Workspace


def test_an_item_is_a_hit_of_no_search_with_its_captions_and_the_models_guess(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POLYSEEK_ASSETS", str(tmp_path / "no-assets"))  # never the developer's assets
    service = Workspace.open("item-test")
    try:
        catalog = service.state.catalog
        root = catalog.add_root(tmp_path / "photos")
        media_id, _ = catalog.upsert_media(tmp_path / "photos" / "dog.jpg", 10, 1, "hash-dog", root)
        catalog.add_caption(media_id, "a dog with a ball", "user")
        catalog.add_caption(media_id, "golden retriever, tennis ball", "pseudo")
        hit = service.library.item(media_id)
        assert (hit.media_id, Path(hit.path).name, hit.score) == (media_id, "dog.jpg", 0.0)
        assert hit.kind == catalog.media(media_id).kind  # as indexing recorded it
        assert hit.captions == ("a dog with a ball",) and hit.guess == "golden retriever, tennis ball"
    finally:
        service.close()


def test_warming_the_search_builds_nothing_without_assets_or_once_cancelled(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """#44 point 19: ``Search.warm`` runs the first search's work ahead of the user; a fresh home (no assets), an
    empty library and a closed one (the GUI cancelled the job before its turn came) make it a no-op."""
    from engine.progress import CancelToken

    monkeypatch.setenv("POLYSEEK_ASSETS", str(tmp_path / "no-assets"))
    service = Workspace.open("warm-test")
    try:
        ranked: list[str] = []
        monkeypatch.setattr(service.search, "rank_text", lambda text: ranked.append(text) or ("ranked",))
        assert service.search.warm() is False and ranked == []  # no assets yet
        monkeypatch.setattr(service.state.encoders, "ready", lambda: True)
        assert service.search.warm(CancelToken()) is False and ranked == []  # an empty library: nothing to build
        root = service.state.catalog.add_root(tmp_path / "photos")
        media_id, _ = service.state.catalog.upsert_media(tmp_path / "photos" / "dog.jpg", 10, 1, "hash-dog", root)
        service.state.catalog.set_media_ok(media_id, "image", "jpeg", 64, 48, 1, None, "backbone")  # indexed
        cancel = CancelToken()
        cancel.cancel()
        assert service.search.warm(cancel) is False and ranked == []
        assert service.search.warm(CancelToken()) is True and ranked == ["a photo"]
    finally:
        service.close()
