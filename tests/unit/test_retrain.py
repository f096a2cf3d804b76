"""The library loop's parts: held-aside choice, the training set, annotation export/import, suggestions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from engine.files import content_hash
from engine.library.captionfolder import load_caption_folder
from engine.library.catalog import Catalog
from engine.loop.annotations import export_annotations, import_annotations
from engine.loop.errors import AnnotationError
from engine.loop.trainingset import (
    HELDOUT_SPLIT,
    MIN_ANNOTATED_ITEMS,
    TRAIN_SPLIT,
    build_training_set,
    holdout_key,
    is_held_aside,
    library_annotations,
    training_warning,
)
from engine.types import CaptionSource, MediaKind


def make_library(root: Path, n: int, db: Path) -> tuple[Catalog, list[int]]:
    """A catalog of ``n`` indexed files (distinct bytes; nothing here decodes them), half in a sub-folder."""
    catalog = Catalog(db)
    root_id = catalog.add_root(root)
    ids = []
    for i in range(n):
        path = root / ("trip" if i % 2 else "home") / f"IMG_{i:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_bytes(f"picture number {i}".encode())
        st = path.stat()
        media_id, _ = catalog.upsert_media(path, st.st_size, st.st_mtime_ns, content_hash(path), root_id)
        catalog.set_media_ok(media_id, MediaKind.IMAGE, "jpeg", 8, 8, 1, None, "test-backbone")
        catalog.set_pseudo_caption(media_id, f"a pseudo caption {i}")
        ids.append(media_id)
    return catalog, ids


@pytest.fixture
def library(tmp_path: Path):
    catalog, ids = make_library(tmp_path / "Photos", 60, tmp_path / "catalog.sqlite")
    yield catalog, ids, tmp_path / "Photos"
    catalog.close()


def test_held_aside_choice_is_deterministic_seeded_and_respects_the_fraction():
    hashes = [f"{i:032x}" for i in range(4000)]
    held = [is_held_aside(h, 0.2) for h in hashes]
    assert held == [is_held_aside(h, 0.2) for h in hashes]  # no hidden state
    assert abs(np.mean(held) - 0.2) < 0.025
    assert abs(np.mean([is_held_aside(h, 0.5, seed=3) for h in hashes]) - 0.5) < 0.03
    assert [is_held_aside(h, 0.2, seed=1) for h in hashes] != held
    assert not any(is_held_aside(h, 0.0) for h in hashes)
    # nested across fractions: an item held at 10% is held at 20%
    assert all(is_held_aside(h, 0.2) for h in hashes if is_held_aside(h, 0.1))
    assert 0.0 <= min(holdout_key(h) for h in hashes) and max(holdout_key(h) for h in hashes) < 1.0
    for bad in (-0.1, 1.0, 1.5):
        with pytest.raises(ValueError, match="holdout"):
            is_held_aside(hashes[0], bad)


def test_training_set_has_annotated_and_unannotated_items_in_train_and_held_ones_apart(library, tmp_path):
    catalog, ids, _ = library
    for media_id in ids[:40]:
        catalog.add_caption(media_id, f"user caption of {media_id}", CaptionSource.USER)
    catalog.add_caption(ids[0], "an imported caption", CaptionSource.IMPORTED)
    catalog.add_pair(ids[1], "an accepted query", 1, CaptionSource.USER)
    catalog.add_pair(ids[1], "a rejected query", -1, CaptionSource.USER)
    catalog.add_pair(ids[45], "an accepted query on an otherwise bare item", 1, CaptionSource.USER)
    catalog.add_pair(ids[46], "only rejected", -1, CaptionSource.USER)

    ts = build_training_set(catalog, tmp_path / "set", holdout=0.3, seed=0)
    folder = load_caption_folder(ts.folder)
    assert (ts.train_split, ts.val_split) == (TRAIN_SPLIT, HELDOUT_SPLIT)
    by_id = {int(item.file.split("-")[0]): (item, texts) for item, texts in folder.item_captions()}
    assert set(by_id) == set(ids)
    annotated = set(ids[:40]) | {ids[45]}
    expected_held = {i for i in annotated if is_held_aside(catalog.media(i).content_hash, 0.3, 0)}
    assert {i for i, (item, _) in by_id.items() if item.split == HELDOUT_SPLIT} == expected_held
    assert len(expected_held) >= 3 and ts.n_heldout_items == len(expected_held)
    assert (ts.n_annotated_items, ts.n_unannotated) == (41, 19)
    assert ts.n_captions == 40 + 1 + 1 + 1 and len(folder.captions) == ts.n_captions
    assert ts.warning is None
    assert by_id[ids[0]][1] == [f"user caption of {ids[0]}", "an imported caption"]
    assert by_id[ids[1]][1] == [f"user caption of {ids[1]}", "an accepted query"]  # rejected pairs are not
    for media_id in set(ids) - annotated:  # D^u: no caption at all (the trainer adds pseudo captions)
        item, texts = by_id[media_id]
        assert item.split == TRAIN_SPLIT and texts == []
    item = by_id[ids[5]][0]
    assert item.path.is_symlink() and item.path.resolve() == catalog.media(ids[5]).path.resolve()


def test_held_aside_items_stay_held_when_more_items_are_annotated(library, tmp_path):
    catalog, ids, _ = library
    for media_id in ids[:20]:
        catalog.add_caption(media_id, "first round", CaptionSource.USER)
    first = load_caption_folder(build_training_set(catalog, tmp_path / "set", 0.25).folder)
    for media_id in ids[20:50]:
        catalog.add_caption(media_id, "second round", CaptionSource.USER)
    second = load_caption_folder(build_training_set(catalog, tmp_path / "set", 0.25).folder)

    def split_of(folder, split):
        return {item.file for item, texts in folder.item_captions() if item.split == split and texts}

    assert split_of(first, HELDOUT_SPLIT) <= split_of(second, HELDOUT_SPLIT)
    assert not split_of(first, TRAIN_SPLIT) & split_of(second, HELDOUT_SPLIT)  # never trained, then tested
    assert len(split_of(second, HELDOUT_SPLIT)) > len(split_of(first, HELDOUT_SPLIT))


def test_too_few_annotations_are_reported(library, tmp_path):
    catalog, ids, _ = library
    for media_id in ids[:4]:
        catalog.add_caption(media_id, "a caption", CaptionSource.USER)
    ts = build_training_set(catalog, tmp_path / "set", 0.2)
    assert ts.warning is not None and ts.warning.startswith("too few annotations")
    assert f"4 annotated items (at least {MIN_ANNOTATED_ITEMS}" in ts.warning
    assert training_warning(MIN_ANNOTATED_ITEMS, 2) is not None and "2 held aside" in training_warning(10, 2)
    assert training_warning(MIN_ANNOTATED_ITEMS, 3) is None


def test_the_training_set_replaces_its_own_folder_but_never_a_foreign_one(library, tmp_path):
    catalog, ids, _ = library
    catalog.add_caption(ids[0], "a caption", CaptionSource.USER)
    dest = tmp_path / "set"
    build_training_set(catalog, dest)
    catalog.add_caption(ids[1], "another caption", CaptionSource.USER)
    assert build_training_set(catalog, dest).n_annotated_items == 2
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".set")]  # no temporaries left
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep me")
    with pytest.raises(AnnotationError, match="not a folder Polyseek wrote"):
        build_training_set(catalog, foreign)
    assert (foreign / "notes.txt").read_text() == "keep me"


@pytest.mark.parametrize("fmt", ["folder", "coco"])
def test_annotations_round_trip_into_another_library_over_the_same_files(library, tmp_path, fmt):
    catalog, ids, photos = library
    catalog.add_caption(ids[0], "a cat on a sofa", CaptionSource.USER)
    catalog.add_caption(ids[0], "my cat", CaptionSource.IMPORTED)
    catalog.add_caption(ids[3], "a beach at dusk", CaptionSource.USER)
    catalog.add_pair(ids[3], "sunset", 1, CaptionSource.USER)
    catalog.add_pair(ids[4], "not this", -1, CaptionSource.USER)
    dest = tmp_path / ("export.json" if fmt == "coco" else "export")
    assert export_annotations(catalog, dest, fmt) == 3  # and the two pairs (tests/unit/test_annotations_backup.py)

    other, other_ids = make_library(photos, 60, tmp_path / "other.sqlite")
    try:
        assert import_annotations(other, dest) == 3
        by_path = {str(other.media(i).path): i for i in other_ids}
        for media_id, texts in library_annotations(catalog).items():  # the retrain reads the same training captions
            assert library_annotations(other)[by_path[str(catalog.media(media_id).path)]] == texts
        assert import_annotations(other, dest) == 0  # captions an item has are not added twice
    finally:
        other.close()


def test_a_coco_file_matches_items_by_their_path_within_the_library(library, tmp_path):
    catalog, ids, _ = library
    data = {"images": [{"id": 1, "file_name": "trip/IMG_001.jpg"}, {"id": 2, "file_name": "elsewhere/IMG_002.jpg"},
                       {"id": 3, "file_name": "nowhere/missing.jpg"}],
            "annotations": [{"image_id": 1, "caption": "  a  dog "}, {"image_id": 2, "caption": "a tree"},
                            {"image_id": 3, "caption": "lost"}]}
    (tmp_path / "c.json").write_text(json.dumps(data))
    assert import_annotations(catalog, tmp_path / "c.json") == 2
    assert [c.text for c in catalog.captions(ids[1], [CaptionSource.IMPORTED])] == ["a dog"]
    assert [c.text for c in catalog.captions(ids[2], [CaptionSource.IMPORTED])] == ["a tree"]  # by file name


def test_imports_that_match_nothing_or_are_malformed_fail_clearly(library, tmp_path):
    catalog, _, _ = library
    (tmp_path / "none.json").write_text(json.dumps({"images": [{"id": 1, "file_name": "zzz.jpg"}],
                                                    "annotations": [{"image_id": 1, "caption": "x"}]}))
    with pytest.raises(AnnotationError, match="none of its 1 files is in the library"):
        import_annotations(catalog, tmp_path / "none.json")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(AnnotationError, match="bad.json"):
        import_annotations(catalog, tmp_path / "bad.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(AnnotationError, match="not a caption folder"):
        import_annotations(catalog, tmp_path / "empty")
    with pytest.raises(AnnotationError, match="format"):
        export_annotations(catalog, tmp_path / "x", "csv")


# ------------------------------------------------------------------- with real features and exported models


@pytest.fixture
def service(assets_dir: Path, tmp_path: Path):
    from PIL import Image

    from engine.workspace import Workspace

    folder = tmp_path / "media"
    folder.mkdir()
    colours = [(220, 30, 30), (30, 200, 30), (30, 30, 220), (240, 240, 240), (20, 20, 20), (250, 200, 0)]
    for i, colour in enumerate(colours):
        image = Image.new("RGB", (40, 40), colour)
        image.paste((255 - colour[0], 128, colour[2]), (5 + 4 * i, 5, 20 + 2 * i, 30))
        image.save(folder / f"photo{i}.png")
    svc = Workspace.open("retrain-unit", assets_dir)
    list(svc.library.index([folder]))
    yield svc
    svc.close()


def _export_untrained(method: str, dest: Path, **overrides) -> Path:
    import torch

    from trainer.methods import build_config, build_model, export_model

    torch.manual_seed(0)
    config = build_config(method, {"image_dim": 1280, "image_regions": 49, "text_encoder": "glove",
                                   "text_word_dim": 50, **overrides}, preset="test")
    export_model(build_model(config).eval(), dest / "onnx")
    return dest


def test_suggestions_follow_the_active_model(service, tmp_path):
    from engine.search.pcme import uncertainty

    ids = sorted(m.id for m in service.state.catalog.iter_media())
    service.annotations.add_caption(ids[0], "a red picture")
    service.annotations.accept_pair("a green picture", ids[1])
    bare = set(ids[2:])
    picks = service.annotations.suggest(10)  # zero-shot: random
    assert {i for i, _ in picks} == bare and all(score == 0.0 for _, score in picks)
    with pytest.raises(ValueError, match="needs an active trained model"):
        service.annotations.suggest(3, "uncertainty")

    service.models.activate(str(_export_untrained("pvse", tmp_path / "pvse", num_embeds=3)))
    picks = service.annotations.suggest(3)
    assert len(picks) == 3 and {i for i, _ in picks} <= bare
    scores = [s for _, s in picks]
    assert scores == sorted(scores, reverse=True) and all(0.0 <= s <= 1.0 for s in scores)
    with pytest.raises(ValueError, match="needs a PCME model"):
        service.annotations.suggest(3, "uncertainty")
    assert len(service.annotations.suggest(2, "random")) == 2

    service.models.activate(str(_export_untrained("pcme", tmp_path / "pcme")))
    picks = service.annotations.suggest(10)
    record = service.state.catalog.active_model()
    got_ids, _, extras = service.state.catalog.get_embeddings(record.id, sorted(bare))
    expected = dict(zip(got_ids.tolist(), uncertainty(extras["log_sigma"]).tolist(), strict=True))
    assert [i for i, _ in picks] == sorted(expected, key=lambda i: (-expected[i], sorted(bare).index(i)))
    assert all(s == pytest.approx(expected[i]) for i, s in picks)
    with pytest.raises(ValueError, match="policy"):
        service.annotations.suggest(3, "loudest")


def test_evaluate_on_scores_a_trained_model_like_a_naive_reference(service, tmp_path):
    from engine.search.vectorindex import kxk_scores
    from engine.trainercontract.metrics import retrieval_report

    ids = sorted(m.id for m in service.state.catalog.iter_media())
    texts = ["a red picture", "a green picture", "a blue one", "white", "black", "yellow square"]
    for media_id, text in zip(ids, texts, strict=True):
        service.annotations.add_caption(media_id, text)
    ts = service.models.training_set(tmp_path / "set", holdout=0.5)
    service.models.activate(str(_export_untrained("pvse", tmp_path / "pvse", num_embeds=2)))
    report = service.models.evaluate(ts.folder, TRAIN_SPLIT, "pvse")
    trained = service.models.active_trained()
    view = load_caption_folder(ts.folder).split(TRAIN_SPLIT)
    items = np.concatenate([trained.encode_media_features(service.state.features.get(content_hash(item.path),
                                                                                service.state.encoders.backbone.id)).emb
                            for item in view.items])
    queries, _ = trained.encode_text([t for _, t in view.captions])
    scores = np.stack([kxk_scores(q, items)[0] for q in queries.emb], axis=1)
    # ranked as the app ranks: the model beside the zero-shot semantics (engine/search/evidence.py)
    from engine.loop.evaluate import fused_matrix, zero_shot_matrix

    zero = zero_shot_matrix([content_hash(item.path) for item in view.items], [t for _, t in view.captions],
                            service.state.features, service.state.encoders)
    expected = retrieval_report(fused_matrix(scores, zero), np.array([i for i, _ in view.captions]))
    assert report.rsum == pytest.approx(expected["rsum"]) and report.i2t.as_dict() == pytest.approx(expected["i2t"])
    assert report.model == "pvse" and report.split == TRAIN_SPLIT
    zero = service.models.evaluate(ts.folder, TRAIN_SPLIT, None)
    assert zero.model == "zero-shot" and zero.n_captions == report.n_captions
    assert os.path.islink(view.items[0].path)


def test_cancelling_stops_a_quiet_trainer_process(tmp_path):
    """The trainer may print nothing for a while (features, validation): cancel must still act, and stop it."""
    import sys
    import threading

    from engine.loop.trainerprocess import TrainerProcess
    from engine.progress import Cancelled, CancelToken
    from engine.trainercontract import events
    from engine.trainercontract.command import TrainerRequest

    script = ("import json, signal, sys, time\n"
              "signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))\n"
              "print(json.dumps({'event': 'step', 'epoch': 1, 'step': 1, 'total': 4, 'loss': {'total': 0.5}}), "
              "flush=True)\n"
              "print('not json', flush=True)\n"
              "print('a warning', file=sys.stderr, flush=True)\n"
              "time.sleep(60)\n")
    lines: list[str] = []
    trainer = TrainerProcess([sys.executable, "-c", script], TrainerRequest("vse", tmp_path, tmp_path / "out"),
                             on_output=lines.append)
    cancel = CancelToken()
    seen = []
    with pytest.raises(Cancelled):
        for event in trainer.events(cancel):
            seen.append(event)
            threading.Timer(0.3, cancel.cancel).start()
    assert trainer.process.returncode == 143  # asked to stop (SIGTERM), not killed
    assert seen == [events.Step(1, 1, 4, loss={"total": 0.5})]
    assert lines[0].startswith("$ ") and "--json-progress" in lines[0]
    assert "not json" in lines and "a warning" in lines  # other lines are passed on as text
    progress = events.to_progress(seen[0])
    assert (progress.done, progress.total) == (1, 4) and "loss 0.500" in progress.message


def test_a_trainer_that_ignores_the_stop_request_is_killed(tmp_path):
    import sys

    from engine.loop.trainerprocess import TrainerProcess
    from engine.progress import Cancelled, CancelToken
    from engine.trainercontract.command import TrainerRequest

    script = ("import signal, time\n"
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "print('{\"event\": \"resumed\", \"epoch\": 1}', flush=True)\n"
              "time.sleep(60)\n")
    lines: list[str] = []
    trainer = TrainerProcess([sys.executable, "-c", script], TrainerRequest("vse", tmp_path, tmp_path / "out"),
                             on_output=lines.append, stop_wait_s=0.3)
    cancel = CancelToken()
    with pytest.raises(Cancelled):
        for _event in trainer.events(cancel):
            cancel.cancel()
    assert trainer.process.returncode == -9 and "killed it" in lines[-1]


def test_a_failing_trainer_is_reported_with_its_status_and_last_words(tmp_path):
    import sys

    from engine.loop.trainerprocess import TrainerFailed, TrainerProcess
    from engine.progress import CancelToken
    from engine.trainercontract.command import TrainerRequest

    script = "import sys\nprint('Traceback: it broke', file=sys.stderr)\nsys.exit(3)\n"
    trainer = TrainerProcess([sys.executable, "-c", script], TrainerRequest("vse", tmp_path, tmp_path / "out"))
    with pytest.raises(TrainerFailed) as failed:
        list(trainer.events(CancelToken()))
    assert failed.value.status == 3 and failed.value.reason == "Traceback: it broke"
    with pytest.raises(TrainerFailed) as missing:
        TrainerProcess([str(tmp_path / "no-such-program")], TrainerRequest("vse", tmp_path, tmp_path / "out"))
    assert missing.value.status is None


def test_files_with_the_same_relative_path_in_two_folders_keep_their_own_captions(tmp_path):
    def two_roots(db: Path) -> Catalog:
        catalog = Catalog(db)
        for name in ("Phone", "Camera"):
            root = tmp_path / name
            path = root / "DCIM" / "IMG_0001.jpg"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(f"taken with the {name}".encode())
            st = path.stat()
            media_id, _ = catalog.upsert_media(path, st.st_size, st.st_mtime_ns, content_hash(path),
                                               catalog.add_root(root))
            catalog.set_media_ok(media_id, MediaKind.IMAGE, "jpeg", 8, 8, 1, None, "test-backbone")
        return catalog

    catalog = two_roots(tmp_path / "a.sqlite")
    for record in catalog.iter_media():
        catalog.add_caption(record.id, f"a photo from the {record.path.parents[1].name}", CaptionSource.USER)
    assert export_annotations(catalog, tmp_path / "a.json", "coco") == 2
    names = sorted(image["file_name"] for image in json.loads((tmp_path / "a.json").read_text())["images"])
    assert names == ["Camera/DCIM/IMG_0001.jpg", "Phone/DCIM/IMG_0001.jpg"]
    other = two_roots(tmp_path / "b.sqlite")
    try:
        assert import_annotations(other, tmp_path / "a.json") == 2
        for record in other.iter_media():
            assert [c.text for c in other.captions(record.id)] == [f"a photo from the {record.path.parents[1].name}"]
    finally:
        other.close()
        catalog.close()


def test_the_result_summary_shows_before_and_after_and_says_when_one_is_missing(tmp_path):
    from engine.loop.retrain import RetrainResult
    from engine.loop.trainingset import TrainingSet
    from engine.trainercontract.metrics import measure

    ts = TrainingSet(tmp_path, n_annotated_items=12, n_captions=15, n_heldout_items=3, n_unannotated=40)
    perfect = measure(np.eye(3), np.arange(3))
    wrong = measure(1.0 - np.eye(3), np.arange(3))
    result = RetrainResult(ts, old_model=None, model_name="v2", before=wrong, after=perfect)
    lines = result.summary_lines()
    assert lines[0] == "trained v2 on 9 annotated + 40 un-annotated items; 3 held aside"
    assert "before" in lines[2] and "R@1   0.0 R@5 100.0" in lines[2] and "rsum  400.0  (zero-shot)" in lines[2]
    assert "after" in lines[3] and "R@1 100.0" in lines[3] and "rsum  600.0  (v2)" in lines[3]
    data = json.loads(json.dumps(result.to_json()))
    assert data["before"]["rsum"] == 400.0 and data["after"]["t2i"]["r1"] == 100.0
    assert data["old_model"] == "zero-shot" and data["training_set"]["heldout_items"] == 3
    result.before = None
    assert "before not available (zero-shot)" in "\n".join(result.summary_lines())
    result.after = None
    assert result.summary_lines()[-1].startswith("no held-aside annotations")


def test_a_big_library_trains_on_a_sample_of_its_unannotated_items(library, tmp_path):
    catalog, ids, _ = library
    for media_id in ids[:12]:
        catalog.add_caption(media_id, f"user caption of {media_id}", CaptionSource.USER)
    ts = build_training_set(catalog, tmp_path / "set", holdout=0.2, max_unannotated=10)
    folder = load_caption_folder(ts.folder)
    by_id = {int(item.file.split("-")[0]): texts for item, texts in folder.item_captions()}
    assert set(ids[:12]) <= set(by_id)  # every annotated item, sampling never drops one
    unannotated = set(by_id) - set(ids[:12])
    assert len(unannotated) == ts.n_unannotated == 10 and ts.n_unannotated_library == 24  # 24 are the check set
    again = build_training_set(catalog, tmp_path / "again", holdout=0.2, max_unannotated=10)
    assert {int(i.file.split("-")[0]) for i, _ in load_caption_folder(again.folder).item_captions()} == set(by_id)
    catalog.add_caption(ids[12], "one more caption", CaptionSource.USER)  # a new round draws another sample
    later = build_training_set(catalog, tmp_path / "later", holdout=0.2, max_unannotated=10)
    later_ids = {int(i.file.split("-")[0]) for i, _ in load_caption_folder(later.folder).item_captions()}
    assert len(later_ids - set(ids[:13])) == 10 and later_ids - set(ids[:13]) != unannotated - {ids[12]}
    everything = build_training_set(catalog, tmp_path / "all", holdout=0.2, max_unannotated=None)
    assert everything.n_unannotated == everything.n_unannotated_library > 10


def test_the_training_set_looks_on_disk_only_at_the_files_it_takes(library, tmp_path, monkeypatch):
    from engine.loop import trainingset

    catalog, ids, _ = library
    for media_id in ids[:12]:
        catalog.add_caption(media_id, f"user caption of {media_id}", CaptionSource.USER)
    first = build_training_set(catalog, tmp_path / "first", holdout=0.2, max_unannotated=10)
    taken = {int(i.file.split("-")[0]) for i, _ in load_caption_folder(first.folder).item_captions()}
    gone = sorted(taken - set(ids[:12]))[:3]  # vanished since the last scan (the catalog still says ok)
    for media_id in gone:
        catalog.media(media_id).path.unlink()
    asked: list[int] = []
    present = trainingset._present
    monkeypatch.setattr(trainingset, "_present", lambda m: asked.append(m.id) or present(m))
    again = build_training_set(catalog, tmp_path / "again", holdout=0.2, max_unannotated=10)
    linked = {int(i.file.split("-")[0]) for i, _ in load_caption_folder(again.folder).item_captions()}
    assert again.n_unannotated == 10 and not linked & set(gone)  # the sample is filled past the missing files
    assert set(ids[:12]) <= linked
    # the check set (24 of the 48 un-annotated) and the sample (10, plus the 3 missing) only, not all 48 twice
    assert len(asked) <= 24 + 10 + 3 + 3
