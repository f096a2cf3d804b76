"""A retrain never silently makes search worse (issue #17): the gate's rule on reports, and the whole Retrain job
keeping a worse model registered but inactive while activating a better one."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from engine.loop.gate import PSEUDO_TOLERANCE, ModelComparison, gate, mean_r10
from engine.loop.retrain import Retrain, RetrainOptions, RetrainResult
from engine.trainercontract.metrics import measure
from engine.trainercontract.reports import RetrievalReport


def _report(n: int, hits_in_top10: int, slipped: int = 0, per_query: bool = False) -> RetrievalReport:
    """A retrieval report over ``n`` items, one caption each: the first ``hits_in_top10`` rank first (of those,
    the last ``slipped`` rank second instead), the others last; ``per_query``: with each query's rank."""
    scores = np.zeros((n, n))
    rng = np.random.default_rng(n)
    for i in range(n):
        scores[i] = rng.random(n)
        scores[i, i] = 2.0 if i < hits_in_top10 else -1.0
        if hits_in_top10 - slipped <= i < hits_in_top10:
            scores[i, (i + 1) % n] = 3.0  # caption i's item 2nd; item i+1's caption 2nd: one slip each way
    return measure(scores, np.arange(n), per_query=per_query)


def _ranked(n: int, hits_in_top10: int, slipped: int = 0) -> RetrievalReport:
    """:func:`_report` with its per-query ranks (``retrieval_report(per_query=True)``)."""
    return _report(n, hits_in_top10, slipped, per_query=True)


def _result(before: RetrievalReport | None, after: RetrievalReport | None,
            pseudo: tuple[RetrievalReport, RetrievalReport] | None = None) -> ModelComparison:
    result = ModelComparison("v2", "starter", before=before, after=after)
    if pseudo is not None:
        result.pseudo_before, result.pseudo_after = pseudo
    return result


def test_a_worse_model_is_not_activated_and_the_reason_names_the_figures():
    before, after = _ranked(40, 40), _ranked(40, 20)  # every caption's item first -> half of them last
    decision = gate(_result(before, after))
    activated, why = decision.activated, decision.text
    assert not activated
    assert why.startswith(f"not activated: held-aside rsum {before.rsum:.0f} -> {after.rsum:.0f}")
    assert "polyseek models --activate v2" in why and "not shown better than starter" in why
    assert ": worse)" in why  # its interval, below zero


def test_a_model_clearly_better_on_the_held_aside_items_is_activated():
    decision = gate(_result(_ranked(40, 20), _ranked(40, 30)))
    activated, why = decision.activated, decision.text
    assert activated and why.startswith("activated v2: better than starter: held-aside rsum")
    assert decision.checks[0].measure == "heldout" and decision.checks[0].passed


def test_an_equal_or_slightly_different_model_is_not_activated():
    """"Not worse" no longer activates: a model that cannot be told from its start gives the user only risk."""
    assert not gate(_result(_ranked(40, 30), _ranked(40, 30))).activated
    before = _ranked(50, 50)
    for slipped in (1, 3):
        decision = gate(_result(before, _ranked(50, 50, slipped=slipped)))
        assert not decision.activated and "not shown better than starter" in decision.text


def test_without_per_query_ranks_nothing_says_better():
    decision = gate(_result(_report(40, 20), _report(40, 30)))
    assert not decision.activated and "no per-query ranks" in decision.text


def test_r10_alone_could_not_judge_a_set_of_ten_items_but_the_gate_can():
    before, after = _ranked(8, 8), _ranked(8, 4)
    assert mean_r10(before) == mean_r10(after) == 100.0
    assert not gate(_result(before, after)).activated
    assert gate(_result(after, before, (_ranked(200, 120), _ranked(200, 120)))).activated


def test_the_pseudo_pairs_veto_a_model_that_lost_its_general_skill():
    before, after = _ranked(40, 20), _ranked(40, 30)
    good, bad = _ranked(200, 120), _ranked(200, 100)
    assert good.rsum - bad.rsum > PSEUDO_TOLERANCE
    decision = gate(_result(before, after, (good, bad)))
    activated, why = decision.activated, decision.text
    assert not activated and why.startswith("not activated: pseudo-pair rsum") and "worse than starter" in why
    assert gate(_result(before, after, (good, good))).activated


def test_the_pseudo_pairs_alone_cannot_activate():
    """A retrain that trains on pseudo pairs gains on them whatever it learns: without held-aside items, no."""
    decision = gate(_result(None, None, (_ranked(200, 100), _ranked(200, 120))))
    assert not decision.activated and "too little to compare" in decision.text


def test_without_any_measure_the_model_is_kept_but_not_activated():
    decision = gate(_result(None, None))
    activated, why = decision.activated, decision.text
    assert not activated and "too little to compare" in why


# ------------------------------------------------------------------------------------------ the whole job


@pytest.fixture
def library(tmp_path: Path, assets_dir: Path):
    """A toy library (distinct shapes and colours, captions saying which), 14 of 24 items captioned, and two
    model folders: one trained on the toy captions, one untrained."""
    from engine.workspace import Workspace
    from tests.synthetic import make_toy_photo_folder
    from trainer.train import TrainOptions, train

    toy = make_toy_photo_folder(tmp_path / "toy", 24, seed=5)
    good = tmp_path / "good"
    train(TrainOptions(method="vse", data=toy.root, out=good, train_split="all", val_split="all", epochs=6,
                       preset="test", batch_size=8, device="cpu", assets=assets_dir))
    bad = tmp_path / "bad"
    shutil.copytree(good, bad)
    _scramble(bad)
    service = Workspace.open("gate", assets_dir)
    list(service.library.index([toy.media_dir]))
    by_path = {m.path.resolve(): m.id for m in service.state.catalog.iter_media()}
    for item, texts in toy.item_captions()[:14]:
        service.annotations.add_caption(by_path[item.path.resolve()], texts[0])
    yield service, good, bad
    service.close()


def _scramble(folder: Path) -> None:
    """Replace a model folder's weights with random ones and re-export it (an untrained model)."""
    import torch

    from trainer import checkpoint as ckpt
    from trainer.methods import build_model, export_model

    torch.manual_seed(1)
    model = build_model(ckpt.load_config(folder)).eval()
    ckpt.save_weights(folder / ckpt.WEIGHTS_FILE, model)
    shutil.rmtree(folder / "onnx")
    export_model(model, folder / "onnx")


def _retrain_into(monkeypatch, result_folder: Path):
    """Retrain whose trainer process is replaced by copying ``result_folder`` into the run's output."""
    def fake_train(self, result, cancel, start):
        shutil.copytree(result_folder, result.model_dir)
        yield from ()

    monkeypatch.setattr(Retrain, "_train", fake_train)


def _run(service, holdout=0.4) -> RetrainResult:
    job = service.models.retrain(RetrainOptions(holdout=holdout))
    for _ in job.run():
        pass
    assert job.result is not None
    for _ in service.models.adopt(job.result):  # what polyseek retrain and the training dialog do next
        pass
    return job.result


def test_a_worse_retrain_is_kept_listed_and_explained_but_not_activated(library, monkeypatch):
    service, good, bad = library
    service.models.activate(str(good))
    _retrain_into(monkeypatch, bad)
    result = _run(service)
    assert result.init_from == str(good.resolve()) or Path(result.init_from).resolve() == good.resolve()
    assert result.before is not None and result.after is not None
    assert result.after.rsum < result.before.rsum
    assert not result.activated and result.decision.startswith("not activated")
    assert service.state.catalog.active_model().name == good.name  # the old one still searches
    listed = {m.name: m for m in service.models.all()}
    assert result.model_name in listed and not listed[result.model_name].active


def test_a_better_retrain_is_activated_and_the_library_is_embedded_with_it(library, monkeypatch):
    service, good, bad = library
    service.models.activate(str(bad))
    _retrain_into(monkeypatch, good)
    result = _run(service, holdout=0.8)  # 10+ of the 14 held aside: alone (no pseudo pairs here) they decide
    assert result.activated and result.decision.startswith(f"activated {result.model_name}")
    assert service.state.catalog.active_model().name == result.model_name
    record = service.state.catalog.model(result.model_name)
    assert len(service.state.catalog.embedded_ids(record.id)) == 24


def test_the_pseudo_check_items_are_never_in_the_training_set(library, monkeypatch, tmp_path):
    import engine.loop.trainingset as trainingset
    from engine.library.captionfolder import load_caption_folder

    service, _, _ = library
    monkeypatch.setattr(trainingset, "MIN_PSEUDO_CHECK_ITEMS", 4)
    assert len(trainingset.pseudo_check_media(service.state.catalog, limit=100)) == 10 // 2  # half of the un-annotated
    checked = trainingset.pseudo_check_media(service.state.catalog, limit=5)
    assert len(checked) == 5
    monkeypatch.setattr(trainingset, "PSEUDO_CHECK_ITEMS", 5)
    ts = service.models.training_set(tmp_path / "ts")
    linked = {p.resolve() for p in (ts.folder / "media").iterdir()}
    assert not linked & {m.path.resolve() for m in checked}
    assert len(linked) == 24 - 5 and ts.n_unannotated == 10 - 5
    folder = trainingset.pseudo_check_set(service.state.catalog, tmp_path / "check", limit=5)
    assert {Path(i.path).resolve() for i in load_caption_folder(folder).items} == {m.path.resolve() for m in checked}


def test_from_zero_shot_a_few_held_aside_items_alone_do_not_decide():
    """No pseudo-pair check (the old ranking is zero-shot): 4 held-aside items cannot vouch for a model (a
    from-scratch retrain that fell to a tenth of zero-shot's library-wide rsum passed them); 10 can."""
    decision = gate(_result(_ranked(4, 0), _ranked(4, 4)))
    activated, why = decision.activated, decision.text
    assert not activated and "too little to compare" in why and "no pseudo pairs" in why
    assert gate(_result(_ranked(12, 0), _ranked(12, 12))).activated
    held_before, held_after = _ranked(4, 0), _ranked(4, 4)  # with the pseudo-pair check beside it, 3+ items count
    assert gate(_result(held_before, held_after, (_ranked(200, 120), _ranked(200, 120)))).activated


# ------------------------------------------------------------------- the interval the gate states (issue #43)


@pytest.mark.parametrize(("before", "after", "pseudo"), [
    ((40, 40), (40, 20), None), ((40, 20), (40, 30), None), ((50, 50), (50, 50, 1), None),
    ((50, 50), (50, 50, 3), None), ((40, 30), (40, 30), ((200, 120), (200, 100))),
    ((40, 30), (40, 30), ((200, 120), (200, 120))), ((4, 4), (4, 4, 1), None),
    ((40, 20), (40, 30), ((200, 120), (200, 120))), ((40, 20), (40, 30), ((200, 120), (200, 100)))])
def test_the_decision_line_states_the_intervals_and_the_interval_decides(before, after, pseudo):
    plain = _result(_report(*before), _report(*after), pseudo and (_report(*pseudo[0]), _report(*pseudo[1])))
    ranked = _result(_ranked(*before), _ranked(*after), pseudo and (_ranked(*pseudo[0]), _ranked(*pseudo[1])))
    ranked.measure_intervals()
    plain.measure_intervals()
    assert plain.heldout_interval is None and plain.pseudo_interval is None  # no ranks: nothing to state
    assert not gate(plain).activated  # ... and nothing says it is better
    decision = gate(ranked)
    activated, why = decision.activated, decision.text
    interval = ranked.heldout_interval
    assert interval is not None and interval.difference == pytest.approx(ranked.after.rsum - ranked.before.rsum)
    pseudo_ok = pseudo is None or ranked.pseudo_after.rsum >= ranked.pseudo_before.rsum - PSEUDO_TOLERANCE
    enough = before[0] >= (3 if pseudo else 10)
    assert activated == (enough and interval.verdict == "better" and pseudo_ok)
    assert ranked.before.ranks is None and ranked.after.ranks is None  # summarised by the interval
    # the line names each measure it states (all of them when activated, the failing ones when not) with its interval
    assert ("held-aside rsum" in why) == (f"on {before[0]} items (R@10 " in why and f"), {interval.text()}" in why)
    if "pseudo-pair rsum" in why:
        assert f"pseudo-pair rsum {ranked.pseudo_before.rsum:.0f} -> {ranked.pseudo_after.rsum:.0f}, " \
               f"{ranked.pseudo_interval.text()}" in why


def test_a_clear_loss_is_stated_as_worse_in_the_decision_line():
    result = _result(_ranked(40, 40), _ranked(40, 20))
    result.measure_intervals()
    decision = gate(result)
    activated, why = decision.activated, decision.text
    assert not activated and result.heldout_interval.verdict == "worse"
    assert why.startswith(f"not activated: held-aside rsum {result.before.rsum:.0f} -> "
                          f"{result.after.rsum:.0f} on 40 items (R@10 ") and ": worse)" in why


def test_compare_models_on_a_real_library_fills_both_intervals(library, monkeypatch, tmp_path):
    import engine.loop.trainingset as trainingset
    from engine.loop.compare import compare_models
    from engine.loop.interval import RsumInterval

    service, good, bad = library
    monkeypatch.setattr(trainingset, "MIN_PSEUDO_CHECK_ITEMS", 4)  # the toy library's 10 un-annotated items
    service.models.activate(str(good))
    new = service.models.register(bad, "bad-v2")
    ts = service.models.training_set(tmp_path / "training-set", holdout=0.4)
    out = compare_models(service.state, new, good.name, ts.folder, ts.val_split)
    assert isinstance(out.heldout_interval, RsumInterval) and isinstance(out.pseudo_interval, RsumInterval)
    assert out.heldout_interval.items == out.after.n_media == ts.n_heldout_items
    assert out.heldout_interval.difference == pytest.approx(out.after.rsum - out.before.rsum)
    assert out.pseudo_interval.difference == pytest.approx(out.pseudo_after.rsum - out.pseudo_before.rsum)
    assert out.heldout_interval.low <= out.heldout_interval.difference <= out.heldout_interval.high
    # the line names each measure it states (all when activated, the failing ones when not) with its interval
    assert "items (R@10 " in out.decision and f"), {out.heldout_interval.text()}" in out.decision
    assert (f", {out.pseudo_interval.text()}" in out.decision) == ("pseudo-pair rsum" in out.decision)
    unmeasured = ModelComparison(new, good.name, out.before, out.after, out.pseudo_before, out.pseudo_after)
    assert not out.activated  # the untrained model, worse
    assert not gate(unmeasured).activated  # without ranks or intervals nothing says better
    assert all(r.ranks is None for r in (out.before, out.after, out.pseudo_before, out.pseudo_after))


def test_retrain_json_carries_the_intervals(library, monkeypatch):
    import json

    import engine.loop.trainingset as trainingset

    service, good, bad = library
    monkeypatch.setattr(trainingset, "MIN_PSEUDO_CHECK_ITEMS", 4)
    service.models.activate(str(good))
    _retrain_into(monkeypatch, bad)
    result = _run(service)
    record = json.loads(json.dumps(result.to_json()))
    keys = {"difference", "low", "high", "level", "resamples", "items", "verdict"}
    for name, interval in (("heldout_interval", result.heldout_interval), ("pseudo_interval", result.pseudo_interval)):
        assert set(record[name]) == keys and interval is not None
        assert record[name]["verdict"] == interval.verdict in ("better", "worse", "cannot tell")
        assert record[name]["difference"] == pytest.approx(interval.difference, abs=1e-4)
        assert record[name]["resamples"] == 2000
    assert record["heldout_interval"]["items"] == result.training_set.n_heldout_items
    assert "ranks" not in record["before"] and "ranks" not in record["pseudo_after"]
    assert result.interval_line().startswith("new - old rsum, paired bootstrap over the items: held-aside "
                                            f"annotations ({result.training_set.n_heldout_items} items) difference ")
    empty = RetrainResult(None).to_json()
    assert empty["heldout_interval"] is None and empty["pseudo_interval"] is None


def test_a_retrain_from_random_weights_takes_the_epochs_the_dialog_proposes(library, monkeypatch):
    """One training policy: ``polyseek retrain --from-scratch`` and the training dialog (which shows
    :func:`planned_epochs` before Start) give a library's run from random weights the same epochs."""
    from engine.loop.retrain import COLD_START_EPOCHS, WARM_START_EPOCHS, planned_epochs

    service, good, _ = library
    service.models.activate(str(good))
    _retrain_into(monkeypatch, good)
    job = service.models.retrain(RetrainOptions(holdout=0.4, warm_start=False))
    for _ in job.run():
        pass
    assert job.result.epochs == COLD_START_EPOCHS == planned_epochs(None, "vse")
    assert planned_epochs(next(m for m in service.models.all() if m.active), None) == WARM_START_EPOCHS


# ------------------------------------------------------------------------------------------ the companion (#42)


def _with_companion(tmp_path: Path, model: Path, assets_dir: Path, scrambled: bool = False) -> tuple[Path, Path]:
    """A copy of ``model`` naming a small PVSE companion (K = 2) trained on the same toy captions, inside it as the
    shipped starter's is; and that companion's folder (``scrambled``: random weights, as an untrained one)."""
    import json

    from tests.synthetic import make_toy_photo_folder
    from trainer.train import TrainOptions, train

    start = tmp_path / f"{model.name}-with-heads"
    shutil.copytree(model, start)
    toy = make_toy_photo_folder(tmp_path / "toy-heads", 24, seed=5)
    train(TrainOptions(method="pvse", data=toy.root, out=start / "companion", train_split="all", val_split="all",
                       epochs=4, preset="test", batch_size=8, device="cpu", assets=assets_dir,
                       overrides={"num_embeds": 2}))
    if scrambled:
        _scramble(start / "companion")
    (start / "companion.json").write_text(json.dumps({"folder": "companion"}))
    return start, start / "companion"


def test_a_retrain_warm_starts_the_companion_beside_the_model_and_the_rule_judges_it(library, monkeypatch,
                                                                                    tmp_path, assets_dir):
    """The model's run is stood in for; the companion's is the real trainer, warm-started from the start's."""
    import json

    from engine.search.companion import read_companion
    from tests.synthetic import make_toy_photo_folder
    from trainer.train import TrainOptions, train

    service, good, _ = library
    start, heads = _with_companion(tmp_path, good, assets_dir)
    toy = make_toy_photo_folder(tmp_path / "toy-sigma", 24, seed=5)  # the companion's own, as the shipped one has
    train(TrainOptions(method="pcme", data=toy.root, out=start / "pcme", train_split="all", val_split="all",
                       epochs=2, preset="test", batch_size=8, device="cpu", assets=assets_dir))
    (heads / "companion.json").write_text(json.dumps({"folder": "../pcme", "role": "uncertainty"}))
    service.models.activate(str(start))
    service.search.text("a red circle")  # the start's companion is registered and embedded, as in use
    assert service.models.active_trained().companion.companion is not None
    old_heads = service.state.catalog.model(f"{start.name} heads")
    _retrain_into(monkeypatch, good)
    seen: list = []
    job = service.models.retrain(RetrainOptions(holdout=0.8))
    job.on_event = seen.append
    for _ in job.run():
        pass
    result = job.result
    companion = result.companion
    assert companion is not None and companion.method == "pvse" and companion.start == heads
    assert companion.folder == result.model_dir / "companion" and companion.old_name == old_heads.name
    assert companion.comparison is not None and companion.comparison.after is not None
    assert companion.kept == companion.comparison.activated  # the model's rule, on the companions
    assert companion.decision.startswith("better than the start's: " if companion.kept
                                         else ("not shown better than", "worse than"))
    for role in ("heads", "uncertainty"):  # each run one stage of the job's progress
        stages = [e for e in seen if getattr(e, "stage", None) == f"training the {role} model"]
        assert stages and stages[-1].done == stages[-1].total == 20
    further = companion.further  # the probabilistic one, retrained after it into its folder
    assert further is not None and further.role == "uncertainty" and further.method == "pcme"
    assert further.start == (start / "pcme").resolve() or further.start == start / "pcme"
    assert further.folder == companion.folder / "companion"
    names = {m.name for m in service.state.catalog.models()}
    if companion.kept:
        assert read_companion(result.model_dir).folder == companion.folder.resolve()
        assert (companion.folder / "model.safetensors").is_file() and f"{result.model_name} heads" in names
        assert (result.model_dir / "companion.json").read_text().count('"companion"') == 1  # relative: moves with it
        # judged as the kept companion's own, by the same rule, against the start's
        assert further.comparison is not None and further.kept == further.comparison.activated
        own = read_companion(companion.folder)
        expected = further.folder if further.kept else start / "pcme"
        assert own.role == "uncertainty" and own.folder == expected.resolve()
        assert (f"{result.model_name} uncertainty" in names) == further.kept
    else:
        assert read_companion(result.model_dir).folder == heads.resolve() and not companion.folder.exists()
        assert not further.kept and further.decision == "its heads model is not kept"
    record = result.to_json()["companion"]
    assert record["kept"] == companion.kept and record["before"]["rsum"] == companion.comparison.before.rsum
    assert result.summary_lines()[-1] == companion.line() and "heads model (pvse)" in companion.line()
    assert ("uncertainty model (pcme)" in companion.line()) == companion.kept
    assert record["further"]["role"] == "uncertainty"


def test_a_retrained_companion_the_rule_turns_down_leaves_and_the_starts_searches_on(library, monkeypatch,
                                                                                   tmp_path, assets_dir):
    from engine.loop.companionretrain import CompanionRetrain
    from engine.search.companion import read_companion

    service, good, bad = library
    start, heads = _with_companion(tmp_path, bad, assets_dir)  # the retrain (good) is better than its start (bad)
    _, scrambled = _with_companion(tmp_path / "b", good, assets_dir, scrambled=True)
    service.models.activate(str(start))
    _retrain_into(monkeypatch, good)

    def worse_heads(self, result, cancel, spec, folder):
        shutil.copytree(scrambled, folder)
        yield from ()
        return CompanionRetrain(spec.folder, "pvse", folder)

    monkeypatch.setattr(Retrain, "_train_companion", worse_heads)
    result = _run(service, holdout=0.8)
    companion = result.companion
    assert companion is not None and not companion.kept
    assert companion.decision.startswith(("not shown better than the start's: ", "worse than the start's: "))
    assert "held-aside rsum" in companion.decision
    assert not companion.folder.exists() and companion.name is None
    assert read_companion(result.model_dir).folder == heads.resolve()  # the start's, as before companions retrained
    assert f"{result.model_name} heads" not in {m.name for m in service.state.catalog.models()}
    assert "is not kept (" in companion.line() and "searches with its start's" in companion.line()
    # the new version, active, searches beside the start's companion with the vectors the library has for it
    assert result.activated
    assert service.models.active_trained().companion.record.path == heads.resolve()


def test_a_companion_run_that_fails_leaves_the_new_version_with_the_starts(library, monkeypatch, tmp_path,
                                                                         assets_dir):
    from engine.search.companion import read_companion

    service, good, _ = library
    start, heads = _with_companion(tmp_path, good, assets_dir)
    service.models.activate(str(start))
    _retrain_into(monkeypatch, good)
    (heads / "config.json").write_text((heads / "config.json").read_text().replace('"pvse"', '"vse"'))
    result = _run(service, holdout=0.8)
    assert result.companion is None and any("heads model" in w and "could not be retrained" in w
                                            for w in result.warnings)
    assert read_companion(result.model_dir).folder == heads.resolve()
    assert not (result.model_dir / "companion").exists()
