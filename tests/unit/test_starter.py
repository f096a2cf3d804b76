"""The shipped starter model (issue #17): it names its recipe, a new library searches with it, and a user's
choice of zero-shot ranking is kept."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.search.companion import read_companion
from engine.search.starter import STARTER_NAME, shipped_starter, starter_record

REPO = Path(__file__).resolve().parents[2]


def _build_tool():
    spec = importlib.util.spec_from_file_location("build_starter", REPO / "tools" / "build_starter.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_an_installed_starter_takes_its_companions_graphs_once_they_are_prepared(tmp_path, monkeypatch):
    from engine.search import starter

    shipped = tmp_path / "shipped"
    (shipped / "onnx").mkdir(parents=True)
    (shipped / "onnx" / "manifest.json").write_text("{}")
    (shipped / "model.safetensors").write_bytes(b"weights")
    (shipped / "companion.json").write_text('{"folder": "companion"}')
    (shipped / "companion").mkdir()
    (shipped / "companion" / "model.safetensors").write_bytes(b"heads")  # weights only: no onnx/
    (shipped / "companion" / "companion.json").write_text('{"folder": "../pcme", "role": "uncertainty"}')
    (shipped / "pcme").mkdir()
    monkeypatch.setattr(starter.paths, "models_dir", lambda: tmp_path / "models")
    monkeypatch.setattr(starter.paths, "assets_dir", lambda: tmp_path / "assets")
    monkeypatch.setattr(starter, "shipped_starter", lambda: shipped)
    monkeypatch.setenv("POLYSEEK_STARTER", "on")
    assert starter.graphs_to_prepare(shipped) == ["companion", "pcme"] and not starter.starter_graphs_ready()
    installed = starter.installed_starter(shipped)
    assert not (installed / "companion" / "onnx").exists()  # nothing prepared yet: the starter searches alone
    heads = starter.prepared_graphs(shipped, "companion")
    heads.mkdir(parents=True)
    (heads / "manifest.json").write_text('{"method": "pvse"}')
    uncertainty = starter.prepared_graphs(shipped, "pcme")
    uncertainty.mkdir(parents=True)
    (uncertainty / starter.FAILED_NOTE).write_text("ExportError: ...")  # could not be exported: settled, says why
    assert starter.starter_graphs_ready()
    assert starter.installed_starter(shipped) == installed
    assert (installed / "companion" / "onnx" / "manifest.json").read_text() == '{"method": "pvse"}'
    assert not (installed / "pcme" / "onnx").exists()  # a note is not a graph
    (uncertainty / starter.FAILED_NOTE).unlink()
    (uncertainty / "manifest.json").write_text('{"method": "pcme"}')  # `polyseek prepare --force` made it
    starter.installed_starter(shipped)
    assert (installed / "pcme" / "onnx" / "manifest.json").read_text() == '{"method": "pcme"}'
    monkeypatch.setenv("POLYSEEK_STARTER", "off")
    (uncertainty / "manifest.json").unlink()
    assert starter.starter_graphs_ready()  # no starter to offer: nothing to prepare


def test_the_shipped_starter_names_the_recipe_that_rebuilds_it():
    folder = shipped_starter()
    assert folder is not None, "resources/models/starter/ must ship with the app"
    record = starter_record(folder)
    tool = _build_tool()
    # method, seed and train split of the recipe; a validation slice held aside from each folder's train split
    recipe = ("method", "seed", "train_split", "epoch_captions", "clip_input", "clip_captions")
    assert {k: record[k] for k in recipe} == {k: tool.RECIPE[k] for k in recipe}
    assert record["val_items"] == [500, 1000, 200] and record["val_photos"] == 1700
    assert record["data"] == "flickr8k + webcaps + msrvtt-clips" and "research use" in record["terms"]
    assert "MSR-VTT" in record["terms"]  # real video clips (issue #41), their terms named
    assert record["command"].startswith("python tools/build_starter.py --data")
    config = json.loads((folder / "config.json").read_text())
    manifest = json.loads((folder / "onnx" / "manifest.json").read_text())
    assert config["method"] == manifest["method"] == record["method"]
    assert "backbone" not in manifest  # the stock backbone: a library's cached features serve it
    # its clips trained as stills (the image encoder): the video branch is recorded as untrained and not shipped
    assert manifest["trained_on"]["video"] == 0 and "video" not in manifest["encoders"]
    assert not (folder / "onnx" / "video.onnx").exists()
    size = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert size < 45 * 2**20  # the starter, its PVSE companion and the companion's PCME (#42)
    record = json.loads((folder / "caption_words.json").read_text())  # the words the starter read, counted
    assert record["captions"] == 49500 and record["words"]["dog"] > 1000 and record["words"].get("biscuit", 0) < 5


def test_an_installed_starter_gets_the_files_a_later_release_ships_beside_the_same_weights(tmp_path, monkeypatch):
    from engine.search import starter

    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "model.safetensors").write_bytes(b"weights")
    (shipped / "onnx").mkdir()
    (shipped / "onnx" / "manifest.json").write_text("{}")
    monkeypatch.setattr(starter.paths, "models_dir", lambda: tmp_path / "models")
    installed = starter.installed_starter(shipped)
    assert not (installed / "caption_words.json").exists()
    (shipped / "caption_words.json").write_text('{"captions": 1, "words": {"dog": 1}}')
    (installed / "config.json").write_text("mine")  # an installed file is never replaced
    (shipped / "config.json").write_text("theirs")
    (shipped / "companion" / "onnx").mkdir(parents=True)  # a companion (engine/search/companion.py), later
    (shipped / "companion" / "onnx" / "manifest.json").write_text('{"method": "pvse"}')
    (shipped / "companion.json").write_text('{"folder": "companion"}')
    assert starter.installed_starter(shipped) == installed
    assert (installed / "caption_words.json").read_text() == (shipped / "caption_words.json").read_text()
    assert (installed / "config.json").read_text() == "mine"
    assert (installed / "companion" / "onnx" / "manifest.json").read_text() == '{"method": "pvse"}'
    assert read_companion(installed).folder == (installed / "companion").resolve()
    # the digest of a starter without companion weights is its own weights' (what earlier releases named copies by)
    assert installed.name == f"starter-{hashlib.blake2b(b'weights', digest_size=6).hexdigest()}"
    # a companion whose weights ship (or learnt anew) makes another starter: the copy libraries embedded their items
    # with keeps its companion, and the release's lands beside it
    (shipped / "companion" / "model.safetensors").write_bytes(b"heads")
    newer = starter.installed_starter(shipped)
    assert newer != installed and (newer / "companion" / "model.safetensors").read_bytes() == b"heads"
    assert not (installed / "companion" / "model.safetensors").exists()
    (shipped / "companion" / "model.safetensors").write_bytes(b"heads, trained again")
    assert starter.installed_name(shipped) not in (installed.name, newer.name)
    (shipped / "companion" / "model.safetensors").write_bytes(b"heads")
    (newer / "companion" / "onnx" / "manifest.json").write_text("mine")
    (shipped / "pcme" / "onnx").mkdir(parents=True)  # the companion's own companion, later still
    (shipped / "companion" / "companion.json").write_text('{"folder": "../pcme", "role": "uncertainty"}')
    assert starter.installed_starter(shipped) == newer
    assert read_companion(newer / "companion").folder == (newer / "pcme").resolve()
    assert (newer / "companion" / "onnx" / "manifest.json").read_text() == "mine"
    for folder in (installed, newer):
        assert not [p for p in folder.iterdir() if p.name.startswith(".")]  # no staging folder left behind


def test_a_starter_with_its_own_text_layers_is_offered_once_their_graph_is_prepared(tmp_path, monkeypatch):
    from engine.library.catalog import Catalog
    from engine.search import starter

    shipped = tmp_path / "shipped"
    (shipped / "onnx").mkdir(parents=True)
    (shipped / "onnx" / "manifest.json").write_text(json.dumps({"text_model": {"file": "text_encoder.onnx"}}))
    (shipped / "model.safetensors").write_bytes(b"weights")  # its text layers ship as weights: no graph
    monkeypatch.setattr(starter.paths, "models_dir", lambda: tmp_path / "models")
    monkeypatch.setattr(starter.paths, "assets_dir", lambda: tmp_path / "assets")
    monkeypatch.setattr(starter, "shipped_starter", lambda: shipped)
    monkeypatch.setenv("POLYSEEK_STARTER", "on")
    assert starter.lacks_text_graph(shipped) and not starter.starter_graphs_ready()
    catalog = Catalog(tmp_path / "catalog.sqlite")
    registered = []
    register = lambda folder, name: registered.append((folder, name)) or name  # noqa: E731
    assert starter.offer_starter(catalog, register, lambda name: None) is None  # its queries cannot be encoded yet
    assert not registered
    prepared = starter.prepared_graphs(shipped, starter.TEXT_FOLDER)
    prepared.mkdir(parents=True)
    (prepared / "text_encoder.onnx").write_bytes(b"graph")
    (prepared / "manifest.json").write_text("{}")
    assert starter.starter_graphs_ready()
    assert starter.offer_starter(catalog, register, lambda name: None) == STARTER_NAME
    installed = registered[0][0]
    assert (installed / "onnx" / "text_encoder.onnx").read_bytes() == b"graph"
    assert not starter.lacks_text_graph(installed) and starter.folders_to_prepare(shipped) == [starter.TEXT_FOLDER]
    catalog.close()


def test_the_shipped_starter_searches_beside_a_pvse_companion_trained_on_its_data(assets_dir):
    from engine.search.starter import prepared_graphs

    folder = shipped_starter()
    spec = read_companion(folder)
    assert spec is not None and spec.folder == (folder / "companion").resolve()
    manifest = json.loads((prepared_graphs(folder, "companion", assets_dir) / "manifest.json").read_text())
    assert manifest["method"] == "pvse" and manifest["num_embeddings"] == 3 and manifest["int8"] == ["image"]
    assert "backbone" not in manifest and "video" not in manifest["encoders"]
    record, starter = starter_record(spec.folder), starter_record(folder)
    # the starter's data, held-aside slices and seed; only the method differs
    same = ("seed", "train_split", "epoch_captions", "clip_input", "clip_captions", "val_items", "data")
    assert record["method"] == "pvse" and {k: record[k] for k in same} == {k: starter[k] for k in same}
    assert "--method pvse" in record["command"] and "--no-graphs" in record["command"]


def test_the_models_beside_the_starter_ship_as_weights_and_their_graphs_are_prepared_at_install(assets_dir):
    """#42: the install grows by no more than the companions' float16 weights; `polyseek prepare` exports their
    graphs (int8 image graph, no video graph: that branch learnt from nothing) into the assets folder."""
    from engine.search.starter import graphs_to_prepare, prepared_graphs

    folder = shipped_starter()
    assert graphs_to_prepare(folder) == ["companion", "pcme"]
    for name, method in (("companion", "pvse"), ("pcme", "pcme")):
        shipped = folder / name
        assert not (shipped / "onnx").exists()
        weights = (shipped / "model.safetensors").stat().st_size
        rest = sum(p.stat().st_size for p in shipped.rglob("*") if p.is_file()) - weights
        assert rest < 2**20, name  # config, metrics, records: the weights are all that weighs
        manifest = json.loads((prepared_graphs(folder, name, assets_dir) / "manifest.json").read_text())
        assert manifest["method"] == method and manifest["trained_on"] == starter_record(shipped)["trained_on"]
        assert manifest["trained_on"]["video"] == 0 and list(manifest["encoders"]) == ["image", "text"]


def test_the_starters_own_text_layers_ship_as_float16_weights_and_their_graph_is_prepared(assets_dir):
    """The starter's last two MiniLM layers learnt with it (#41, #42): 7 MB of float16 weights in the install, the
    90 MB graph exported by `polyseek prepare`, and the installed starter's queries encoded with it."""
    from safetensors.numpy import load_file

    from engine.search.starter import TEXT_FOLDER, lacks_text_graph, prepared_graphs, text_graph
    from trainer.textencoder import finetuned_text

    folder = shipped_starter()
    found = finetuned_text(folder)
    assert found is not None and found[2] == 2 and lacks_text_graph(folder)
    assert {str(v.dtype) for v in load_file(found[1]).values()} == {"float16"}
    assert found[1].stat().st_size < 8 * 2**20
    prepared = prepared_graphs(folder, TEXT_FOLDER, assets_dir)
    assert json.loads((prepared / "manifest.json").read_text())["id"] == found[0]
    assert (prepared / text_graph(folder).name).stat().st_size > 50 * 2**20


def test_the_shipped_companion_searches_beside_a_probabilistic_model_of_its_own():
    """The PCME model (#42's uncertainty from the first query): the same data, slices and seed as the starter."""
    from trainer import checkpoint as ckpt

    folder = shipped_starter()
    spec = read_companion(folder / "companion")
    assert spec is not None and spec.role == "uncertainty" and spec.folder == (folder / "pcme").resolve()
    record, starter = starter_record(spec.folder), starter_record(folder)
    same = ("seed", "train_split", "clip_input", "val_items", "data")
    assert {k: record[k] for k in same} == {k: starter[k] for k in same} and "--method pcme" in record["command"]
    metrics = json.loads((spec.folder / "metrics.json").read_text())
    assert set(metrics["r1_by_uncertainty_decile"]) >= {"i2t", "t2i"}  # what the inspector reads a sigma against
    assert ckpt.safetensors_metadata(spec.folder / ckpt.WEIGHTS_FILE)[ckpt.UNTRAINED_KEY]
    assert ckpt.load_model(spec.folder).config.method == "pcme"


def test_the_shipped_companion_has_the_weights_a_retrain_warm_starts_from():
    """Stored in float16 without its video side, which learnt from nothing (the clips trained as stills)."""
    from engine.loop.companionretrain import retrainable_companion
    from trainer import checkpoint as ckpt

    folder = shipped_starter()
    spec = retrainable_companion(folder)
    assert spec is not None
    weights = spec.folder / ckpt.WEIGHTS_FILE
    assert ckpt.safetensors_metadata(weights)[ckpt.UNTRAINED_KEY] == "globals.video.,video_pie."
    assert weights.stat().st_size < 10 * 2**20
    model = ckpt.load_model(spec.folder)
    assert model.config.num_embeds == 3


def test_the_build_tool_never_reads_a_split_other_than_train(tmp_path):
    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    names = [f"p{i}.jpg" for i in range(12)]
    (data / "splits.tsv").write_text("file\tsplit\n" + "".join(
        f"{n}\t{'dev' if i >= 8 else 'train'}\n" for i, n in enumerate(names)))
    (data / "captions.tsv").write_text("file\tcaption\n" + "".join(f"{n}\ta photo {i}\n" for i, n in enumerate(names)))
    sizes = _build_tool().derived_folder(data, tmp_path / "work", val_items=2, seed=0)
    assert sizes == {"train_photos": 6, "val_photos": 2}
    rows = (tmp_path / "work" / "splits.tsv").read_text().splitlines()[1:]
    assert {r.split("\t")[0] for r in rows} == set(names[:8])
    assert sorted(r.split("\t")[1] for r in rows).count("starter-val") == 2
    assert "p9.jpg" not in (tmp_path / "work" / "captions.tsv").read_text()


@pytest.fixture
def photos(tmp_path: Path) -> Path:
    from tests.synthetic import make_toy_photo_folder

    return make_toy_photo_folder(tmp_path / "toy", 6, seed=3).media_dir


def test_a_new_library_searches_with_the_starter_and_keeps_a_switch_to_zero_shot(photos, assets_dir, monkeypatch):
    from engine.workspace import Workspace

    monkeypatch.setenv("POLYSEEK_STARTER", "on")
    service = Workspace.open("fresh", assets_dir)
    try:
        active = service.state.catalog.active_model()
        assert active is not None and active.name == STARTER_NAME and active.method == "vse"
        list(service.library.index([photos]))
        hits = service.search.text("a large red circle", top=3)
        trained = service.models.active_trained()
        assert len(hits) == 3 and trained is not None  # ranked by the trained model
        # beside its companions, their graphs prepared with the assets (trainer/startergraphs.py)
        assert trained.companion is not None and trained.companion.companion.runner.probabilistic
        service.models.activate(None)  # the user picks zero-shot ranking
    finally:
        service.close()
    service = Workspace.open("fresh", assets_dir)
    try:
        assert service.state.catalog.active_model() is None
        assert STARTER_NAME in {m.name for m in service.models.all()}
    finally:
        service.close()


def test_polyseek_models_lists_the_starter_as_active(photos, assets_dir, polyseek_home):
    env = {**os.environ, "POLYSEEK_STARTER": "on", "POLYSEEK_HOME": str(polyseek_home),
           "POLYSEEK_ASSETS": str(assets_dir)}
    run = subprocess.run([sys.executable, "-m", "engine.cli", "index", str(photos), "--library", "new"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    run = subprocess.run([sys.executable, "-m", "engine.cli", "models", "--library", "new", "--json"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    models = {m["name"]: m for m in json.loads(run.stdout)}
    assert models[STARTER_NAME]["active"] and not models["zero-shot"]["active"]


def test_a_model_that_cannot_load_falls_back_to_zero_shot_ranking(photos, assets_dir, monkeypatch, tmp_path):
    import shutil

    from engine import paths
    from engine.workspace import Workspace

    monkeypatch.setenv("POLYSEEK_STARTER", "on")
    service = Workspace.open("broken", assets_dir)
    try:
        list(service.library.index([photos]))
        shutil.rmtree(paths.models_dir())  # the model's folder is gone (a deleted or unplugged models folder)
        service.state.invalidate()
        hits = service.search.text("a large red circle", top=3)
        assert len(hits) == 3 and service.models.active_trained() is None
        assert service.state.catalog.active_model().name == STARTER_NAME  # the choice itself is kept
    finally:
        service.close()


def test_the_build_tool_merges_folders_each_with_its_own_held_aside_slice(tmp_path):
    folders = []
    for name, count in (("a", 10), ("b", 6)):
        data = tmp_path / name
        (data / "images").mkdir(parents=True)
        files = [f"{name}{i}.jpg" for i in range(count)]
        for f in files:
            (data / "images" / f).write_bytes(b"x")
        (data / "captions.tsv").write_text("file\tcaption\n" + "".join(f"{f}\ta photo\n" for f in files))
        folders.append(data)
    sizes = _build_tool().derived_folder(folders, tmp_path / "work", val_items=[3, 2], seed=0)
    assert sizes == {"train_photos": 11, "val_photos": 5}
    rows = [r.split("\t") for r in (tmp_path / "work" / "splits.tsv").read_text().splitlines()[1:]]
    val = [f for f, s in rows if s == "starter-val"]
    assert sum(f.startswith("a") for f in val) == 3 and sum(f.startswith("b") for f in val) == 2
    assert (tmp_path / "work" / "images" / "b5.jpg").resolve() == (folders[1] / "images" / "b5.jpg").resolve()


def test_a_first_start_offers_the_starter_again_once_the_assets_are_ready(tmp_path, monkeypatch, caplog):
    """Before a first start has prepared the pretrained assets the starter cannot be registered; that is not a
    warning (the app offers it again once they are ready), and the second offer activates it."""
    import logging

    from engine.features.backbone import AssetsMissing
    from engine.search import starter

    class Catalog:
        def __init__(self) -> None:
            self.active = None

        def models(self) -> list:
            return []

        def active_model(self):  # noqa: ANN202
            return self.active

    monkeypatch.setattr(starter, "starter_enabled", lambda: True)
    monkeypatch.setattr(starter, "shipped_starter", lambda: tmp_path / "shipped")
    monkeypatch.setattr(starter, "installed_starter", lambda shipped: tmp_path / "installed")
    catalog, ready = Catalog(), {"assets": False}

    def register(folder, name):  # noqa: ANN001, ANN202
        if not ready["assets"]:
            raise AssetsMissing("pretrained assets are missing")
        return name

    def activate(name):  # noqa: ANN001, ANN202
        catalog.active = name

    with caplog.at_level(logging.INFO, logger=starter.log.name):
        assert starter.offer_starter(catalog, register, activate) is None
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert catalog.active is None
    ready["assets"] = True
    assert starter.offer_starter(catalog, register, activate) == starter.STARTER_NAME
    assert catalog.active == starter.STARTER_NAME


def test_a_later_release_lists_its_starter_beside_the_one_a_library_began_with(assets_dir, monkeypatch, tmp_path,
                                                                              request):
    """A library keeps the starter it began with (its retrains started there); a release shipping other weights
    gets its starter registered beside it, not activated, once."""
    import shutil

    from safetensors.numpy import load_file, save_file

    from engine.search import starter
    from engine.workspace import Workspace

    monkeypatch.setenv("POLYSEEK_STARTER", "on")
    service = Workspace.open("upgraded", assets_dir)
    service.close()
    newer = tmp_path / "release-2" / "starter"
    shutil.copytree(shipped_starter(), newer)
    weights = load_file(newer / "model.safetensors")
    first = sorted(weights)[0]
    weights[first] = weights[first] + 1
    save_file(weights, newer / "model.safetensors")
    monkeypatch.setattr(starter, "shipped_starter", lambda: newer)
    newer_text = starter.prepared_graphs(newer, starter.TEXT_FOLDER, assets_dir)
    shutil.rmtree(newer_text, ignore_errors=True)  # the assets folder is shared by the test runs
    request.addfinalizer(lambda: shutil.rmtree(newer_text, ignore_errors=True))
    if starter.lacks_text_graph(newer):  # its text encoder's graph: listed once `polyseek prepare` exported it
        service = Workspace.open("upgraded", assets_dir)
        try:
            assert starter.installed_name(newer) not in [m.name for m in service.models.all()]
        finally:
            service.close()
        shutil.copytree(starter.prepared_graphs(shipped_starter(), starter.TEXT_FOLDER, assets_dir),
                        newer_text)  # the same text layers
    for _ in range(2):  # the second open finds it listed already
        service = Workspace.open("upgraded", assets_dir)
        try:
            names = [m.name for m in service.models.all()]
            assert service.state.catalog.active_model().name == STARTER_NAME  # unchanged
            assert names.count(starter.installed_name(newer)) == 1 and STARTER_NAME in names
        finally:
            service.close()
    service = Workspace.open("upgraded", assets_dir)
    try:
        service.models.rename(starter.installed_name(newer), "the new starter")  # a renamed one is not listed again
    finally:
        service.close()
    service = Workspace.open("upgraded", assets_dir)
    try:
        assert len(service.models.all()) == len(names)
    finally:
        service.close()
    service = Workspace.open("another", assets_dir)  # a new library begins with the release's starter
    try:
        assert service.state.catalog.active_model().name == STARTER_NAME
        assert Path(service.state.catalog.active_model().path).name == starter.installed_name(newer)
    finally:
        service.close()


# the demo library's item that each suggestion under the search box asks for
DEMO_ANSWERS = {"a cat lying on a rug": "cat-on-a-rug.jpg", "a cup of coffee": "cup-of-coffee.jpg",
                "a man with a camera on a tripod": "cameraman.jpg", "a bouncing red ball": "bouncing-red-ball.gif",
                "sunset over the sea": "sunset-over-the-sea.gif"}


def test_every_suggestion_under_the_search_box_finds_its_demo_item_first(assets_dir, monkeypatch, tmp_path):
    """A first start shows the demo library with a few searches to try: each must work with the shipped starter
    (the calibrated ranking over the whole demo library, as the grid shows it)."""
    from app.widgets.browsebar import EXAMPLE_QUERIES
    from engine.workspace import Workspace
    from resources.demo import ensure_demo_library

    assert set(EXAMPLE_QUERIES) == set(DEMO_ANSWERS)  # a new suggestion says here what it should find
    monkeypatch.setenv("POLYSEEK_STARTER", "on")
    service = Workspace.open("demo", assets_dir)
    try:
        list(service.library.index([ensure_demo_library()]))
        assert service.models.active_trained() is not None
        first = {query: Path(service.search.text(query, top=1)[0].path).name for query in EXAMPLE_QUERIES}
    finally:
        service.close()
    assert first == DEMO_ANSWERS
