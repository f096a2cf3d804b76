"""A model's companion (engine/search/companion.py): a second model searched beside the active one, its heads shown
where the model has none, kept by a retrain."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from engine.search import evidence
from engine.search.companion import COMPANION_FILE, CompanionSpec, carry_companion, read_companion, write_companion
from engine.types import EvidenceKind
from engine.workspace import Workspace
from tests.mediagen import make_jpeg
from tests.unit.test_trained_search import colour_library, export_untrained


@pytest.fixture
def service(assets_dir: Path, tmp_path: Path) -> Workspace:
    svc = colour_library("companion", assets_dir, tmp_path)
    yield svc
    svc.close()


def vse_with_companion(tmp_path: Path) -> Path:
    """A VSE model folder naming a PVSE (K = 3) companion inside it, as the shipped starter does."""
    model = export_untrained("vse", tmp_path / "vse-model")
    export_untrained("pvse", model / "companion", num_embeds=3)
    (model / COMPANION_FILE).write_text(json.dumps({"folder": "companion"}))
    return model


def test_the_companion_is_embedded_and_ranks_beside_the_model_by_its_share(service, tmp_path):
    service.models.activate(str(vse_with_companion(tmp_path)))
    trained = service.models.active_trained()
    assert trained.companion is not None and trained.companion.runner.num_embeddings == 3
    catalog = service.state.catalog
    companion = catalog.model("vse-model heads")
    assert len(catalog.embedded_ids(companion.id)) == len(catalog.embedded_ids(catalog.model("vse-model").id)) == 7
    assert not companion.is_active

    service.state.evidence = frozenset({"model"})
    ids, ranking, _, _ = service.search.rank_text("a red square")
    assert {EvidenceKind.MODEL, evidence.COMPANION} <= set(ranking.parts)
    half = evidence.standardise(ranking.parts[EvidenceKind.MODEL]) * (1 - evidence.COMPANION_SHARE) \
        + evidence.standardise(ranking.parts[evidence.COMPANION]) * evidence.COMPANION_SHARE
    np.testing.assert_allclose(ranking.parts["dense"], half, atol=1e-5)  # what the calibration reads
    # the companion's own scores are its K x K best cosines
    query, _ = trained.companion.encode_text(["a red square"])
    own, _, pairs = trained.companion.score_ids(query, ids[ranking.rows])
    np.testing.assert_allclose(ranking.parts[evidence.COMPANION], own, atol=1e-5)
    # a hit's heads are the companion's: the K = 1 model has one vector
    np.testing.assert_array_equal(ranking.head_pairs[ranking.rows], pairs)

    service.state.evidence = frozenset({"model", "zero_shot"})
    weights = evidence.weights([EvidenceKind.MODEL, EvidenceKind.ZERO_SHOT, evidence.COMPANION])
    assert weights[EvidenceKind.MODEL] == pytest.approx(evidence.MODEL * (1 - evidence.COMPANION_SHARE))
    assert weights[evidence.COMPANION] == pytest.approx(evidence.MODEL * evidence.COMPANION_SHARE)
    assert sum(weights.values()) == pytest.approx(1.0)


def test_the_inspector_shows_the_companions_heads_for_a_model_without_any(service, tmp_path):
    service.models.activate(str(vse_with_companion(tmp_path)))
    photo = next(m for m in service.state.catalog.iter_media() if str(m.path).endswith("photo0.jpg"))
    explained = service.search.explain("a red square", photo.id)
    assert explained.item_attention.shape == (3, 49)  # three heads over the 7 x 7 regions
    assert "the heads of the model searched beside vse-model" in explained.notes[0]
    assert "vse-model heads" in explained.notes[0]

    gif = next(m for m in service.state.catalog.iter_media() if str(m.path).endswith(".gif"))
    explained = service.search.explain("a red square", gif.id)
    # a clip's frames reach the heads without regions: the three heads are one, shown once (never one map 3 times)
    assert explained.item_attention.shape[0] == 1 and explained.similarity.shape == (3, 1)
    assert explained.head_pair[1] == 0
    assert any("its 3 heads read this clip alike" in note for note in explained.notes)
    assert "the heads of the model searched beside" in explained.notes[0]
    assert any(note.startswith("best match: frame") for note in explained.notes)

    alone = export_untrained("vse", tmp_path / "alone")
    service.models.activate(str(alone))
    explained = service.search.explain("a red square", photo.id)
    assert not explained.item_attention.size  # no companion: no heads to show, the words that match instead


def test_a_companion_that_cannot_load_leaves_the_model_searching_alone(service, tmp_path, caplog):
    model = vse_with_companion(tmp_path)
    (model / "companion" / "onnx" / "manifest.json").unlink()
    service.models.activate(str(model))
    trained = service.models.active_trained()
    assert trained is not None and trained.companion is None
    assert "cannot be loaded" in caplog.text
    assert service.search.text("a red square", top=3)


def test_new_items_are_embedded_by_the_companion_too(service, tmp_path):
    service.models.activate(str(vse_with_companion(tmp_path)))
    service.search.text("anything")
    more = tmp_path / "more"
    more.mkdir()
    make_jpeg(more / "new.jpg", (40, 40), (10, 120, 240))
    list(service.library.index([more]))
    catalog = service.state.catalog
    assert len(catalog.embedded_ids(catalog.model("vse-model heads").id)) == 8


def test_a_retrained_model_keeps_its_starts_companion(tmp_path):
    start = vse_with_companion(tmp_path)
    new = tmp_path / "retrained"
    new.mkdir()
    assert carry_companion(start, new)
    assert read_companion(new) == CompanionSpec((start / "companion").resolve())
    assert json.loads((new / COMPANION_FILE).read_text())["folder"] == str((start / "companion").resolve())
    # a start without one, or none at all, carries nothing
    assert not carry_companion(new / "nowhere", tmp_path / "x")
    assert not carry_companion(None, tmp_path / "x")


def test_an_unreadable_companion_file_is_no_companion(tmp_path, caplog):
    (tmp_path / COMPANION_FILE).write_text("{not json")
    assert read_companion(tmp_path) is None
    assert "cannot be read" in caplog.text
    write_companion(tmp_path, CompanionSpec(tmp_path / "c"))
    assert read_companion(tmp_path) == CompanionSpec((tmp_path / "c").resolve())


def test_past_its_dense_limit_a_model_with_a_companion_ranks_the_models_candidates(service, tmp_path, monkeypatch):
    service.models.activate(str(vse_with_companion(tmp_path)))
    ids, ranking, _, _ = service.search.rank_text("a red square")
    assert len(ranking.rows) == len(ids) == 7  # every item, under the limit
    monkeypatch.setattr(evidence, "COMPANION_DENSE_LIMIT", 5)
    monkeypatch.setattr(evidence, "CANDIDATES", 2)
    trained = service.models.active_trained()
    query, _ = trained.encode_text(["a red square"])
    rows, sample = evidence.candidate_rows(ids, trained, query, np.zeros(0, np.int64))
    assert sample is not None and len(rows) < len(ids)  # the candidates, z-scored against a fixed sample
    trained.companion = None  # the same model alone keeps scoring every item up to DENSE_LIMIT
    rows, sample = evidence.candidate_rows(ids, trained, query, np.zeros(0, np.int64))
    assert sample is None and len(rows) == len(ids)


def test_a_retrained_version_searches_with_the_companion_the_library_already_embedded(service, tmp_path):
    start = vse_with_companion(tmp_path)
    service.models.activate(str(start))
    service.search.text("anything")
    catalog = service.state.catalog
    registered = catalog.model("vse-model heads")
    retrained = export_untrained("vse", tmp_path / "vse-model-2")
    assert carry_companion(start, retrained)
    service.models.activate(str(retrained))
    trained = service.models.active_trained()
    assert trained.companion.record.id == registered.id  # the same vectors, not a second registration
    assert [m.name for m in catalog.models()].count("vse-model-2 heads") == 0
    assert len(catalog.embedded_ids(registered.id)) == 7


def vse_with_heads_and_uncertainty(tmp_path: Path) -> Path:
    """As the shipped starter: a VSE model, its PVSE companion, and the companion's own, a PCME model."""
    model = vse_with_companion(tmp_path)
    export_untrained("pcme", model / "pcme")
    (model / "companion" / COMPANION_FILE).write_text(json.dumps({"folder": "../pcme", "role": "uncertainty"}))
    return model


def test_the_companions_probabilistic_companion_ranks_beside_both_and_explains_the_uncertainty(service, tmp_path):
    service.models.activate(str(vse_with_heads_and_uncertainty(tmp_path)))
    trained = service.models.active_trained()
    further = trained.companion.companion
    assert further is not None and further.runner.probabilistic and further.companion is None
    catalog = service.state.catalog
    registered = catalog.model("vse-model uncertainty")  # named after the active model, by its role
    assert Path(registered.path) == (tmp_path / "vse-model" / "pcme").resolve()
    assert len(catalog.embedded_ids(registered.id)) == 7  # embedded with the two others

    service.state.evidence = frozenset({"model", "zero_shot"})
    ids, ranking, _, _ = service.search.rank_text("a red square")
    assert {EvidenceKind.MODEL, evidence.COMPANION, evidence.PROBABILISTIC} <= set(ranking.parts)
    query, _ = further.encode_text(["a red square"])
    own, _, _ = further.score_ids(query, ids[ranking.rows])
    np.testing.assert_allclose(ranking.parts[evidence.PROBABILISTIC], own, atol=1e-5)
    weights = evidence.weights([EvidenceKind.MODEL, EvidenceKind.ZERO_SHOT, evidence.COMPANION,
                                evidence.PROBABILISTIC])
    assert weights[evidence.PROBABILISTIC] == pytest.approx(evidence.MODEL * evidence.PROBABILISTIC_SHARE)
    assert weights[EvidenceKind.MODEL] + weights[evidence.COMPANION] == pytest.approx(
        evidence.MODEL * (1 - evidence.PROBABILISTIC_SHARE))
    assert sum(weights.values()) == pytest.approx(1.0)

    hit = service.search.text("a red square", top=1)[0]
    explained = service.search.explain("a red square", hit.media_id)
    assert explained.item_attention.shape[0] == 3  # the heads are the PVSE companion's
    assert explained.item_uncertainty is not None and explained.query_uncertainty is not None  # sigma: the PCME's
    assert explained.library_items == 7 and explained.match_probability is not None
    assert any(note.startswith("uncertainty: model vse-model uncertainty (pcme)") for note in explained.notes)


def test_a_companion_file_without_a_role_names_heads_and_a_bad_role_is_no_companion(tmp_path, caplog):
    (tmp_path / COMPANION_FILE).write_text(json.dumps({"folder": "c"}))
    assert read_companion(tmp_path).role == "heads"
    write_companion(tmp_path, CompanionSpec(tmp_path / "p", "uncertainty"))
    assert json.loads((tmp_path / COMPANION_FILE).read_text()) == {"folder": "p", "role": "uncertainty"}
    assert read_companion(tmp_path) == CompanionSpec((tmp_path / "p").resolve(), "uncertainty")
    (tmp_path / COMPANION_FILE).write_text(json.dumps({"folder": "c", "role": ["x"]}))
    assert read_companion(tmp_path) is None and "cannot be read" in caplog.text


def test_a_companion_reads_every_fourth_row_of_the_fixed_sample_for_its_z_scores(monkeypatch):
    """Its K x K heads cost ~7x the model's cosine: 250 of the 1,000 sample rows (evenly spread) stand for the
    library, the model and the zero-shot semantics read all 1,000 (every candidate scored here: fewer are
    tests/unit/test_evidence.py's)."""
    monkeypatch.setattr(evidence, "BESIDE_CANDIDATES", None)
    class Recording(evidence.ArrayEvidence):
        def score(self, rows):
            self.asked = [*getattr(self, "asked", []), len(rows)]
            return super().score(rows)

    rng = np.random.default_rng(0)
    sources = {name: Recording(name, rng.random(5000).astype(np.float32))
               for name in (EvidenceKind.MODEL, EvidenceKind.ZERO_SHOT, evidence.COMPANION, evidence.PROBABILISTIC)}
    sample, rows = evidence.fixed_sample(5000), np.arange(300)
    ranking = evidence.fuse(dict(sources), rows, sample)
    assert sources[EvidenceKind.MODEL].asked == sources[EvidenceKind.ZERO_SHOT].asked == [300, 1000]
    assert sources[evidence.COMPANION].asked == sources[evidence.PROBABILISTIC].asked == [300, 250]
    weights = evidence.weights(list(sources))
    expected = sum(weights[name] * evidence.standardise(
        source.values[rows], source.values[sample[::4] if name in (evidence.COMPANION, evidence.PROBABILISTIC)
                                           else sample]) for name, source in sources.items())
    np.testing.assert_allclose(ranking.total, expected, atol=1e-5)
    small = evidence.fixed_sample(300)  # a sample this small is read whole
    sources[evidence.COMPANION].asked = []
    evidence.fuse(dict(sources), rows, small)
    assert sources[evidence.COMPANION].asked == [300, 300]


def test_the_models_beside_the_active_one_embed_new_items_from_one_read_of_their_features(service, tmp_path,
                                                                                          monkeypatch):
    service.models.activate(str(vse_with_heads_and_uncertainty(tmp_path)))
    service.search.text("anything")
    more = tmp_path / "more"
    more.mkdir()
    for i in range(3):
        make_jpeg(more / f"new{i}.jpg", (40, 40), (10 + 60 * i, 120, 240))
    reads: list[tuple[str, ...]] = []
    store = service.state.features
    get_many, locals_into = store.get_many, store.locals_into
    monkeypatch.setattr(store, "get_many", lambda hashes, backbone, fields=("global",): (
        reads.append(tuple(fields)), get_many(hashes, backbone, fields))[1])
    monkeypatch.setattr(store, "locals_into", lambda hashes, backbone, out: (
        reads.append(("local",)), locals_into(hashes, backbone, out))[1])
    list(service.library.index([more]))
    catalog = service.state.catalog
    for name in ("vse-model", "vse-model heads", "vse-model uncertainty"):
        assert len(catalog.embedded_ids(catalog.model(name).id)) == 10, name
    # one read of the pooled features for the three models, one of the local ones for the two companions
    assert sorted(reads) == [("global",), ("local",)]
    trained = service.models.active_trained()
    new = [m for m in catalog.iter_media() if str(m.path).startswith(str(more))]
    for model in (trained, trained.companion, trained.companion.companion):  # the same vectors as one by one
        _, alone = model.encode_items(new)
        np.testing.assert_allclose(model.index.get([m.id for m in new]), alone.emb, atol=1e-2)


class InlineExecutor:
    """An executor that runs each task at once on the calling thread."""

    def submit(self, function, *args):
        from concurrent.futures import Future

        future = Future()
        future.set_result(function(*args))
        return future


def test_the_companions_made_on_a_helper_thread_rank_as_made_on_the_querys_own(service, tmp_path, monkeypatch):
    from engine.search import ranking

    service.models.activate(str(vse_with_heads_and_uncertainty(tmp_path)))
    service.state.evidence = frozenset({"model", "zero_shot"})
    monkeypatch.setattr(evidence, "COMPANION_DENSE_LIMIT", 5)  # the large-library path: candidates and a sample
    monkeypatch.setattr(evidence, "CANDIDATES", 3)
    monkeypatch.setattr(evidence, "BESIDE_CANDIDATES", 2)
    threaded = [service.search.rank_text(q)[1] for q in ("a red square", "a blue circle")]
    monkeypatch.setattr(ranking, "_helper", InlineExecutor())
    inline = [service.search.rank_text(q)[1] for q in ("a red square", "a blue circle")]
    for one, other in zip(threaded, inline, strict=True):
        assert {evidence.COMPANION, evidence.PROBABILISTIC} <= set(one.parts)
        assert len(one.rows) < 7  # the candidates, not every item
        np.testing.assert_array_equal(one.rows, other.rows)
        np.testing.assert_array_equal(one.total, other.total)
        np.testing.assert_array_equal(one.parts[evidence.COMPANION], other.parts[evidence.COMPANION])
        np.testing.assert_array_equal(one.head_pairs, other.head_pairs)


def test_a_sample_scored_ahead_is_not_scored_again():
    class Counting:
        calls = 0

        def score_ids(self, query, ids, keep=False):
            Counting.calls += 1
            return ids.astype(np.float32) / 10, np.full(len(ids), -1), np.zeros((len(ids), 2), np.int64)

    source = evidence.ModelEvidence(Counting(), None, np.arange(100, 120), evidence.COMPANION)
    sample = np.arange(0, 20, 4)
    source.calibrate(sample)
    source.prefetch(sample)
    assert Counting.calls == 1
    np.testing.assert_allclose(source.score(sample.copy()), np.arange(100, 120, 4) / 10)  # another array, same rows
    assert Counting.calls == 1
    source.score(np.arange(3))  # other rows are scored
    assert Counting.calls == 2
