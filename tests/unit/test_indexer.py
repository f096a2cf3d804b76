"""Indexing through the real ONNX backbone: incremental re-index, moves, failures, resume, cancel."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine.progress import Cancelled, CancelToken
from engine.workspace import Workspace
from tests.mediagen import make_animated_gif, make_jpeg, make_mp4, make_png

RED, GREEN, BLUE = (220, 30, 30), (30, 200, 30), (30, 30, 220)


@pytest.fixture
def library(tmp_path: Path) -> Path:
    folder = tmp_path / "photos"
    (folder / "sub").mkdir(parents=True)
    make_jpeg(folder / "red.jpg", (80, 60), RED)
    make_png(folder / "sub" / "green.png", (64, 64), GREEN)
    make_animated_gif(folder / "flash.gif", [RED, GREEN, BLUE], size=(32, 32))
    make_mp4(folder / "clip.mp4", 12, colors=[BLUE] * 12)
    (folder / "notes.txt").write_text("not media")
    (folder / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    return folder


@pytest.fixture
def service(assets_dir: Path) -> Workspace:
    svc = Workspace.open("test", assets_dir)
    yield svc
    svc.close()


def run(progress) -> list:
    return list(progress)


def paths_ok(service: Workspace) -> dict[str, str]:
    return {m.path.name: str(m.kind) for m in service.state.catalog.iter_media("ok")}


def test_first_index_records_kinds_features_pseudo_captions_and_failures(service, library):
    records = run(service.library.index([library]))
    assert records[-1].done == records[-1].total == 5
    assert paths_ok(service) == {"red.jpg": "image", "green.png": "image", "flash.gif": "animation",
                                 "clip.mp4": "video"}
    failures = dict(service.library.failures())
    assert list(failures) == [str(library / "broken.jpg")]
    assert failures[str(library / "broken.jpg")]
    counts = service.library.counts()
    assert (counts["image"], counts["animation"], counts["video"], counts["failed"]) == (2, 1, 1, 1)
    red = service.state.catalog.media_by_path(library / "red.jpg")
    record = service.state.features.get(red.content_hash, service.state.encoders.backbone.id)
    assert record.local.shape == (49, 1280) and record.frames is None
    gif = service.state.catalog.media_by_path(library / "flash.gif")
    gif_record = service.state.features.get(gif.content_hash, service.state.encoders.backbone.id)
    assert gif_record.frames.shape == (8, 1280) and gif_record.local is None
    pseudo = service.state.catalog.captions(red.id, sources=["pseudo"])
    assert len(pseudo) == 1 and "red" in pseudo[0].text  # the colour attribute of the regions


def test_an_index_run_lets_the_backbone_session_go_when_it_ends(service, library):
    """#44 point 19: the backbone's ONNX session keeps its largest run's activations (~200 MB) for its life; an
    index run lets it go at its end, done or cancelled, and the next run opens it again."""
    def holds_backbone() -> bool:
        return "backbone" in service.state.encoders._cache or service.state.indexer._extractor is not None

    run(service.library.index([library]))
    assert not holds_backbone()
    make_jpeg(library / "blue.jpg", (70, 50), BLUE)
    run(service.library.index([library]))  # opened again for the new photo
    assert service.state.catalog.media_by_path(library / "blue.jpg").status == "ok" and not holds_backbone()
    make_jpeg(library / "green.jpg", (70, 50), GREEN)
    cancel = CancelToken()
    progress = service.library.index([library], cancel)
    next(progress)
    cancel.cancel()
    with pytest.raises(Cancelled):
        run(progress)
    assert not holds_backbone()


def test_reindex_handles_add_modify_move_delete(service, library):
    run(service.library.index([library]))
    red = service.state.catalog.media_by_path(library / "red.jpg")
    caption_id = service.annotations.add_caption(red.id, "my red picture")
    ids_before = {m.path.name: m.id for m in service.state.catalog.iter_media()}

    make_jpeg(library / "blue.jpg", (70, 50), BLUE)  # add
    make_png(library / "sub" / "green.png", (64, 64), (250, 250, 0))  # modify (new content)
    os.utime(library / "sub" / "green.png", ns=(1, 10**18))
    shutil.move(library / "red.jpg", library / "sub" / "moved-red.jpg")  # move
    (library / "clip.mp4").unlink()  # delete
    run(service.models.reindex())

    after = {m.path.name: m for m in service.state.catalog.iter_media()}
    assert after["clip.mp4"].status == "missing" and "red.jpg" not in after  # deleted: kept, marked missing
    assert after["moved-red.jpg"].id == ids_before["red.jpg"]  # same row: the caption survives the move
    assert [c.id for c in service.annotations.captions(after["moved-red.jpg"].id) if c.source == "user"] == [caption_id]
    assert after["blue.jpg"].status == "ok"
    green = after["green.png"]
    assert green.id == ids_before["green.png"] and green.status == "ok"
    assert service.state.catalog.pending_media() == []


def test_unchanged_library_does_no_work_and_failed_files_are_retried_only_when_changed(service, library,
                                                                                       monkeypatch):
    run(service.library.index([library]))
    calls = []
    import engine.features.extract as extract

    original = extract.decode_for_backbone
    monkeypatch.setattr(extract, "decode_for_backbone", lambda *a, **k: calls.append(a[0]) or original(*a, **k))
    run(service.models.reindex())
    assert calls == []  # nothing new, and broken.jpg is not retried
    make_jpeg(library / "broken.jpg", (40, 40), GREEN)  # the user fixes the file
    run(service.models.reindex())
    assert calls == [library / "broken.jpg"]
    assert service.library.failures() == []


def test_cancelled_index_resumes_where_it_stopped(service, tmp_path):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(70):
        make_jpeg(folder / f"p{i:02d}.jpg", (40, 40), (i * 3, 100, 200 - i * 2))
    token = CancelToken()
    seen = 0
    with pytest.raises(Cancelled):
        for p in service.library.index([folder], token):
            if p.total and p.done:
                seen = p.done
                token.cancel()
    assert 0 < seen < 70
    assert 0 < len(service.state.catalog.pending_media()) < 70
    run(service.models.reindex())
    assert len(paths_ok(service)) == 70 and service.state.catalog.pending_media() == []
    assert service.state.catalog.integrity_ok()


def test_same_content_in_a_second_library_reuses_cached_features(service, library, assets_dir, monkeypatch):
    run(service.library.index([library]))
    other = Workspace.open("second", assets_dir)
    import engine.features.extract as extract

    original = extract.decode_for_backbone

    def decode(path, *args, **kwargs):
        if path.name != "broken.jpg":  # the one file without features is tried again, the rest is cached
            pytest.fail(f"the backbone ran again on cached content: {path}")
        return original(path, *args, **kwargs)

    monkeypatch.setattr(extract, "decode_for_backbone", decode)
    try:
        run(other.library.index([library]))
        assert len(paths_ok(other)) == 4
        red = other.state.catalog.media_by_path(library / "red.jpg")
        assert other.state.catalog.captions(red.id, sources=["pseudo"])  # rebuilt from stored classes
    finally:
        other.close()


def test_index_rejects_a_missing_path(service, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        run(service.library.index([tmp_path / "nope"]))


def test_search_by_example_finds_the_same_picture_first(service, library, tmp_path):
    run(service.library.index([library]))
    query = make_png(tmp_path / "query.png", (50, 50), GREEN)
    hits = service.search.example(query, top=3)
    assert Path(hits[0].path).name == "green.png"
    # zero-shot ranking has one source: its cosines are said in z-units over the library, as a fused sum is (the
    # hit's standing reads them), so the same picture stands above the rest rather than at a cosine of 1
    assert hits[0].score > hits[1].score + 0.5
    # Find similar on a library item leaves the item itself out (it is trivially its own best match)
    green = Path(hits[0].path)
    similar = service.search.example(green, top=3, exclude_example=True)
    assert similar and green.name not in {Path(h.path).name for h in similar}
    assert Path(service.search.example(green, top=1)[0].path).name == "green.png"  # not asked: it stays
    # so it ranks one item fewer than the library holds; a file from outside it leaves nothing out
    assert service.search.leaves_out(green) and not service.search.leaves_out(query)


@pytest.mark.parametrize(("cores", "threads"), [(None, 2), (1, 2), (2, 2), (4, 2), (16, 8)])
def test_decode_threads_grow_with_the_cores(monkeypatch, cores, threads):
    import engine.features.extract as extract

    monkeypatch.setattr(extract.os, "cpu_count", lambda: cores)
    assert extract.default_decode_threads() == threads
