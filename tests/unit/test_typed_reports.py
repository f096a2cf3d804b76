"""Typed reports (issue #45): a run folder's files read by the trainer contract's readers (``metrics.json``, old
and new, ``config.json``), retrieval reports that give back the JSON they were read from, the gate's decision
round-tripping through JSON, and the kinds of evidence refused by name when they are none."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from engine.loop.gate import GateDecision, Measure, ModelComparison, gate
from engine.trainercontract.metrics import measure, retrieval_report, rounded
from engine.trainercontract.reports import QueryRanks, ReportError, RetrievalReport
from engine.trainercontract.runfolder import (
    CheckpointError,
    TrainerMetrics,
    read_config_method,
    read_metrics,
)
from engine.types import ALL_EVIDENCE, EvidenceKind, evidence_kinds

STARTER = Path(__file__).resolve().parents[2] / "resources" / "models" / "starter"


def _scores(n: int = 6, captions_per_item: int = 2, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    c2m = np.repeat(np.arange(n), captions_per_item)
    scores = rng.random((n, c2m.size))
    scores[c2m, np.arange(c2m.size)] += 0.5
    return scores, c2m


# ------------------------------------------------------------------------------------- metrics.json, old and new


def test_the_shipped_starters_metrics_read_as_typed_figures():
    """The starter's metrics.json was written before the typed reader existed: it still reads, and unchanged."""
    metrics = read_metrics(STARTER)
    raw = json.loads((STARTER / "metrics.json").read_text(encoding="utf-8"))
    assert isinstance(metrics, TrainerMetrics) and metrics.report is not None
    assert metrics.report.rsum == pytest.approx(raw["rsum"]) and metrics.rsum == metrics.report.rsum
    assert metrics.report.t2i.r10 == pytest.approx(raw["t2i"]["r10"]) and metrics.report.i2t.medr == raw["i2t"]["medr"]
    assert (metrics.report.n_media, metrics.report.n_captions) == (raw["n_media"], raw["n_captions"])
    built = json.loads((STARTER / "starter.json").read_text(encoding="utf-8"))["validation"]  # what the build recorded
    assert (metrics.method, metrics.split, metrics.best_epoch, metrics.epochs) == (
        "vse", "starter-val", built["best_epoch"], built["epochs"])
    assert metrics.similarity == "cosine" and metrics.uncertainty == {}
    assert metrics.as_dict() == raw  # what the catalog stores and `models --json` shows: the file as written
    assert metrics.report.extra["r_precision"] == raw["r_precision"]  # what the engine does not read is kept


def test_a_new_metrics_file_with_pcmes_curves_reads_them(tmp_path):
    """A PCME run's record as trainer/train.py writes it: the report, the run's fields, and R@1 per uncertainty
    decile both ways (a constant curve's rho is NaN, written as null)."""
    scores, c2m = _scores()
    report = retrieval_report(scores, c2m)
    curve = {"r1": [50.0, 25.0], "bin_edges": [0.1, 0.2, 0.3], "counts": [3, 3], "rho_bins": -1.0,
             "rho_queries": None}
    record = {**report, "method": "pcme", "split": "heldout", "best_epoch": 3, "epochs": 5, "similarity": "csd",
              "r1_by_uncertainty_decile": {"i2t": curve, "t2i": {**curve, "rho_bins": 0.5}}, "gpu_peak_mb": None}
    (tmp_path / "metrics.json").write_text(json.dumps(record, sort_keys=True, indent=2), encoding="utf-8")
    metrics = read_metrics(tmp_path)
    typed = RetrievalReport.from_dict(report)
    assert metrics is not None and metrics.report is not None
    assert (metrics.report.i2t, metrics.report.t2i, metrics.report.rsum) == (typed.i2t, typed.t2i, typed.rsum)
    assert metrics.report.method == "pcme" and metrics.report.extra["similarity"] == "csd"
    assert (metrics.method, metrics.split, metrics.similarity) == ("pcme", "heldout", "csd")
    assert set(metrics.uncertainty) == {"i2t", "t2i"}
    assert metrics.uncertainty["i2t"].r1 == [50.0, 25.0] and metrics.uncertainty["t2i"].rho_bins == 0.5
    assert math.isnan(metrics.uncertainty["i2t"].rho_queries)
    assert metrics.as_dict() == record


def test_a_folder_without_metrics_has_none_and_a_broken_file_is_named(tmp_path):
    assert read_metrics(tmp_path) is None
    (tmp_path / "metrics.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(CheckpointError, match="metrics.json"):
        read_metrics(tmp_path)
    (tmp_path / "metrics.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(CheckpointError, match="expected a JSON object"):
        read_metrics(tmp_path)
    # a record without the figures (or with figures of another shape) reads, with no report to show
    assert TrainerMetrics.from_dict({"method": "vse", "rsum": "high"}).report is None
    assert TrainerMetrics.from_dict({"split": "dev"}).split == "dev"


def test_the_config_names_the_method_and_a_folder_without_one_reads_as_vse(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"method": "pcme", "embed_dim": 8}), encoding="utf-8")
    assert read_config_method(tmp_path) == "pcme"
    assert read_config_method(STARTER) == "vse"
    assert read_config_method(tmp_path / "missing") == "vse"
    (tmp_path / "config.json").write_text(json.dumps({"embed_dim": 8}), encoding="utf-8")
    assert read_config_method(tmp_path) == "vse"


# ------------------------------------------------------------------------------------------- retrieval reports


@pytest.mark.parametrize(("distractors", "per_query"), [(False, False), (True, True), (False, True)])
def test_a_report_gives_back_the_json_it_was_read_from(distractors, per_query):
    """``evaluate --json`` and ``retrain --json`` print ``as_dict``: the same keys in the same order as before."""
    scores, c2m = _scores()
    extra = np.random.default_rng(1).random((3, c2m.size)) if distractors else None
    raw = retrieval_report(scores, c2m, distractors=extra, per_query=per_query)
    raw.update(model="v2", method="pvse", split="heldout", n_failed=0)  # what evaluate_trained added
    report = RetrievalReport.from_dict(raw)
    assert json.dumps(rounded(report.as_dict())) == json.dumps(rounded(raw))
    assert (report.ranks is not None) == per_query and (report.n_distractors == 3) == distractors
    assert report.without_ranks().ranks is None and "ranks" not in report.without_ranks().as_dict()
    typed = measure(scores, c2m, distractors=extra, per_query=per_query).evaluated(
        model="v2", method="pvse", split="heldout", n_failed=0)
    assert typed == report
    assert report.mean_r10 == pytest.approx(0.5 * (raw["i2t"]["r10"] + raw["t2i"]["r10"]))
    assert report.i2t.recall_sum + report.t2i.recall_sum == pytest.approx(report.rsum)


def test_a_zero_shot_evaluations_record_keeps_its_order():
    scores, c2m = _scores()
    raw = retrieval_report(scores, c2m)
    raw["model"], raw["split"], raw["n_failed"] = "zero-shot", "all", 1  # evaluate_zero_shot's order
    assert list(RetrievalReport.from_dict(raw).as_dict()) == list(raw)


@pytest.mark.parametrize(("broken", "named"), [
    ({"rsum": 1.0}, "report.i2t"), ({"i2t": {"r1": 1}, "t2i": {}, "rsum": 1.0}, "report.i2t.r5"),
    ("rsum 200", "expected a retrieval report"), ({"ranks": {"t2i": "x"}}, "report.ranks.t2i")])
def test_a_report_of_another_shape_is_refused_naming_the_entry(broken, named):
    scores, c2m = _scores()
    good = retrieval_report(scores, c2m)
    data = broken if isinstance(broken, str) else {**good, **broken} if "ranks" in broken else broken
    with pytest.raises(ReportError, match=named.replace(".", r"\.")):
        RetrievalReport.from_dict(data)


def test_query_ranks_read_from_their_json_form():
    ranks = QueryRanks.from_dict({"t2i": [1, 2], "i2t": [1], "caption_media": [0, 0]})
    assert ranks == QueryRanks((1, 2), (1,), (0, 0)) and QueryRanks.from_dict(ranks.as_dict()) == ranks


# ---------------------------------------------------------------------------------------------- the gate's record


def test_a_gate_decision_round_trips_through_json():
    scores, c2m = _scores(40, 1)
    before = measure(scores, c2m, per_query=True)
    after = measure(scores + 0.1 * np.eye(40), c2m, per_query=True)
    comparison = ModelComparison("v2", "v1", before, after, before, after)
    comparison.measure_intervals()
    decision = comparison.decide()
    assert comparison.verdict is decision and comparison.activated == decision.activated
    assert comparison.decision == decision.text and decision.activated
    assert [check.measure for check in decision.checks] == [Measure.HELDOUT, Measure.PSEUDO]
    assert all(check.passed for check in decision.checks) and decision.checks[0].items == 40
    again = GateDecision.from_dict(json.loads(json.dumps(decision.as_dict())))
    assert again == decision
    assert json.loads(json.dumps(decision.as_dict()))["checks"][0]["measure"] == "heldout"
    with pytest.raises(ValueError, match="gate decision"):
        GateDecision.from_dict({"activated": "yes", "text": ""})


def test_the_gate_reads_reports_in_their_json_form_too():
    """A stand-in evaluation (the GUI tests' fake service) returns the JSON record: the comparison parses it."""
    scores, c2m = _scores(40, 1)
    raw = retrieval_report(scores, c2m, per_query=True)
    better = retrieval_report(scores + 0.5 * np.eye(40), c2m, per_query=True)
    comparison = ModelComparison("v2", None, raw, raw)
    assert isinstance(comparison.before, RetrievalReport)
    comparison.after = dict(better)
    decision = gate(comparison)  # the interval from the parsed reports' ranks
    assert decision.activated and isinstance(comparison.after, RetrievalReport)
    assert GateDecision.from_dict(decision.as_dict()) == decision


# ------------------------------------------------------------------------------------------------ evidence kinds


def test_the_kinds_of_evidence_are_the_names_the_calibration_and_benchmarks_use():
    assert {str(kind) for kind in ALL_EVIDENCE} == {"model", "zero_shot", "words"}
    calibration = json.loads((Path(__file__).resolve().parents[2] / "resources" / "calibration.json").read_text())
    assert set(calibration) <= {kind.value for kind in EvidenceKind}
    assert evidence_kinds({"model", "zero_shot"}) == {EvidenceKind.MODEL, EvidenceKind.ZERO_SHOT}
    assert "model" in evidence_kinds(["model"]) and EvidenceKind.WORDS == "words"  # still the strings they were


def test_an_unknown_kind_of_evidence_is_refused_by_name():
    from engine.search import calibration
    from engine.state import LibraryState

    with pytest.raises(ValueError, match=r"unknown kind of evidence 'modle' \(the kinds: model, zero_shot, words\)"):
        evidence_kinds({"modle"})
    with pytest.raises(ValueError, match="the string 'model'"):
        evidence_kinds("model")  # a bare string would be read letter by letter
    with pytest.raises(ValueError, match="unknown kind of evidence 'trained'"):
        calibration.load("trained")
    state = LibraryState.__new__(LibraryState)  # the property alone: no library needed
    state.evidence = ["model", EvidenceKind.WORDS]
    assert state.evidence == {EvidenceKind.MODEL, EvidenceKind.WORDS}
    with pytest.raises(ValueError, match="'zero-shot'"):
        state.evidence = {"zero-shot"}  # the model list's name of the zero-shot ranking is not a kind
    assert state.evidence == {EvidenceKind.MODEL, EvidenceKind.WORDS}
