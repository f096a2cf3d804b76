"""The inspector over the real engine shows what the active model really has (issue #32, point 2): per-head maps
only for a model with attention, never the text encoder's [CLS] / [SEP] as query words, an honest explanation
for a K = 1 model without attention, the shipped starter's companion's heads, and PCME's uncertainty read against
the library."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QThreadPool
from PySide6.QtWidgets import QGraphicsEllipseItem, QLabel

from app.widgets.inspector import Inspector
from tests.standins import make_media_folder

service_module = pytest.importorskip("engine.workspace")
QUERY = "a red circle on the table"
SPECIAL_TOKENS = {"[CLS]", "[SEP]", "[PAD]"}  # MiniLM's markers: no word of the query
VISIBLE_SHARE = 0.1  # a 1-sigma half-axis at least this share of the distance between the means is visible


@pytest.fixture
def library(tmp_path: Path, assets_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator:
    """The real service over six generated pictures (real features, regional semantics)."""
    monkeypatch.setenv("POLYSEEK_ASSETS", str(assets_dir))
    folder = make_media_folder(tmp_path / "media", n_images=6, n_gifs=0, video=False, broken=False)
    service = service_module.Workspace.open("inspect", assets_dir)
    for _ in service.library.index([folder]):
        pass
    yield service
    service.close()


def _export(method: str, dest: Path, **overrides) -> Path:
    """A freshly initialised model of ``method`` reading MiniLM tokens (so its query has [CLS] and [SEP])."""
    from tests.unit.test_trained_search import export_untrained

    return export_untrained(method, dest, text_encoder="minilm", text_word_dim=384, **overrides)


def _explained(qtbot, service, model: str) -> Inspector:
    service.models.activate(model)
    hit = next(h for h in service.search.text(QUERY, top=6) if h.path.endswith(".png"))
    inspector = Inspector(QThreadPool.globalInstance())
    qtbot.addWidget(inspector)
    inspector.resize(560, 900)
    inspector.set_service(service)
    inspector.show_hit(QUERY, hit)
    qtbot.waitUntil(lambda: not inspector.is_loading, timeout=60000)
    return inspector


def _texts(inspector: Inspector) -> list[str]:
    return [label.text() for label in inspector.findChildren(QLabel) if label.isVisibleTo(inspector)]


def _no_markers(inspector: Inspector) -> None:
    words = [token for strip in inspector.token_strips for token in strip.tokens]
    assert not SPECIAL_TOKENS & set(words), words
    assert not any(marker in text for text in _texts(inspector) for marker in ("[CLS]", "[SEP]"))


def _shipped_starter() -> Path:
    from engine.search.starter import shipped_starter

    starter = shipped_starter()
    if starter is None:
        pytest.skip("this installation ships no starter model")
    return starter


def test_the_shipped_starter_shows_its_companions_heads(qtbot, library, assets_dir) -> None:
    from engine.search.starter import installed_starter

    # as a library gets it: installed, with its companions' graphs from the prepared assets (assets_dir)
    inspector = _explained(qtbot, library, str(installed_starter(_shipped_starter())))
    assert inspector.explanation.item_attention.shape == (3, 49)  # the PVSE companion's three heads, 7 x 7 regions
    assert len(inspector.head_views) == 3 and len(inspector.token_strips) == 3
    _no_markers(inspector)
    notes = inspector.notes_label.text()
    assert "heads (pvse, K=3)" in notes and "the heads of the model searched beside" in notes
    assert inspector.explanation.word_matches == ()


def test_a_vse_model_shows_no_heads_and_explains_by_the_regions_classes(qtbot, library, tmp_path: Path,
                                                                      assets_dir: Path) -> None:
    import shutil

    from engine.search.starter import TEXT_FOLDER, prepared_graphs, text_graph

    alone = tmp_path / "starter-alone"  # the shipped starter without its companion
    shutil.copytree(_shipped_starter(), alone, ignore=shutil.ignore_patterns("companion*"))
    graph = text_graph(alone)
    if graph is not None and not graph.is_file():  # its own MiniLM's graph, as `polyseek prepare` exported it
        shutil.copy(prepared_graphs(_shipped_starter(), TEXT_FOLDER, assets_dir) / graph.name, graph)
    inspector = _explained(qtbot, library, str(alone))
    assert inspector.explanation is not None and inspector.explanation.item_attention.size == 0
    assert inspector.head_views == [] and inspector.token_strips == []  # no map or word chips it does not have
    _no_markers(inspector)
    notes = inspector.notes_label.text()
    assert "K=1" in notes and "no per-word or per-region attention" in notes
    matches = inspector.explanation.word_matches
    assert [m.word for m in matches] == ["red", "circle", "table"]  # the query's content words, nothing else
    found = [m for m in matches if m.class_name is not None]
    missing = [m.word for m in matches if m.class_name is None]
    assert len(inspector.word_views) == len(found) + bool(missing)  # one picture a found word, one line the rest
    shown = " ".join(_texts(inspector))
    assert all(f"{m.word} → {m.class_name}" in shown for m in found)
    assert not missing or f"close to: {', '.join(missing)}" in shown
    for match in matches:  # a word's map is where its class is, not a wash over the picture
        if match.class_name is not None:
            assert match.regions.max() > 0 and (match.regions == 0).any()


def test_a_pvse_model_shows_a_map_per_head_over_the_query_words_alone(qtbot, library, tmp_path: Path) -> None:
    inspector = _explained(qtbot, library, str(_export("pvse", tmp_path / "pvse", num_embeds=2)))
    assert len(inspector.head_views) == 2 and len(inspector.token_strips) == 2
    _no_markers(inspector)
    assert inspector.token_strips[0].tokens[:2] == ("a", "red")
    for strip in inspector.token_strips:
        assert np.isclose(strip.weights.max(), 1.0)
    assert inspector.explanation.word_matches == ()


def test_a_pcme_model_reads_sigma_against_the_library_and_draws_visible_ellipses(qtbot, library,
                                                                                  tmp_path: Path) -> None:
    inspector = _explained(qtbot, library, str(_export("pcme", tmp_path / "pcme")))
    ex = inspector.explanation
    _no_markers(inspector)
    assert len(inspector.head_views) == 1  # PCME's one attention map (it has one), not K fake heads
    low, high = ex.library_uncertainty_range
    assert low <= ex.item_uncertainty <= high
    sigma = inspector.sigma_label.text()
    assert "this library" in sigma and f"{ex.item_uncertainty:.3g}"[:4] in sigma
    reading = inspector.uncertainty_label.text()
    pct = ex.item_uncertainty_percentile
    word = "Ambiguous" if pct >= 90 else "Clear" if pct <= 10 else "Typical"
    assert reading.startswith(word)  # the words and the number are the same place in the library
    # the 1-sigma ellipse spans a visible share of the plot: at true size it would be a dot
    span = float(np.ptp(np.stack([ex.query_mu_2d, ex.item_mu_2d]), axis=0).max())
    ellipses = [item for item in inspector.ellipse_plot.getPlotItem().items if isinstance(item, QGraphicsEllipseItem)]
    assert ellipses, "no sigma drawn"
    widest = max(item.rect().width() for item in ellipses)
    assert widest / 2 >= VISIBLE_SHARE * span * 2 * 0.99  # the 2-sigma one; 1-sigma is half of it
    if inspector.ellipse_scale and inspector.ellipse_scale > 1:
        assert f"{inspector.ellipse_scale:g}× larger than they are" in inspector.ellipse_label.text()
    assert inspector.calibration_label is None  # the model has no validation record: nothing is promised


def test_a_pcme_model_says_what_its_uncertainty_meant_on_its_validation_split(qtbot, library, tmp_path: Path) -> None:
    folder = _export("pcme", tmp_path / "pcme")
    curve = {"bin_edges": [0.0, 0.5, 10.0], "r1": [30.0, 12.0], "counts": [5, 5]}
    (folder / "metrics.json").write_text(json.dumps({"split": "held-aside", "r1_by_uncertainty_decile": {
        "i2t": {**curve, "rho_bins": -1.0}, "t2i": {**curve, "rho_bins": 0.2}}}))
    inspector = _explained(qtbot, library, str(folder))
    text = inspector.calibration_label.text()
    assert text.startswith("What this uncertainty meant for this model:")
    assert "a photo this uncertain was found first by one of its captions" in text and "held-aside" in text
    assert "more uncertainty meant more misses (Spearman -1.00)" in text  # the photo side
    assert "did not predict misses (Spearman +0.20)" in text  # the search side, said as it was
    assert inspector.calibration_label in inspector.findChildren(QLabel)
