"""The training dialog: choose the data and a method, run the engine's retraining job, watch its loss and
validation rsum live, cancel and resume it, and see the new model measured beside the active one.

The job is :class:`engine.loop.retrain.Retrain` (``Models.retrain``), the one ``polyseek retrain`` runs: it
exports the library's annotations (or takes a caption folder), starts the trainer as its own process (torch never
enters the GUI process, and a crash in training never takes the window down), registers the new model, measures
both models with the same evaluation (``evaluate_on``) and applies the activation rule. This dialog runs it in a
:class:`app.workers.Worker` on a one-thread pool of its own and draws the trainer's typed events
(:mod:`engine.trainercontract.events`), which the job hands over as they arrive; other lines the trainer writes go
to the log pane. Cancel sets the job's :class:`CancelToken`: the job asks the trainer to stop (it writes a resumable
checkpoint) and kills it only after ``stop_wait_ms``; Resume runs the job again with ``--resume``.

The activation itself is left to the window (``use_model_requested``), which re-indexes in its library panel.
The widgets and how they draw a run are :class:`app.widgets.trainingform.TrainingForm`; this class adds what
the buttons do.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QWidget

from app import qtcompat  # noqa: F401  (binding work-around, before any signal is emitted)
from app.widgets.trainingform import SOURCE_FOLDER, SOURCE_LIBRARY, SOURCES, TrainingForm
from app.widgets.trainingview import (
    METHOD_DESCRIPTIONS,
    METHODS,
    Comparison,
    RunProgress,
    chart_title,
    describe_training_set,
)
from app.workers import Worker, serial_pool, while_alive
from engine.terms import (
    DEFAULT_HOLDOUT,
    DEFAULT_METHOD,
    STOP_WAIT_S,
    TrainerFailed,
    events,
    find_interrupted_run,
    saved_checkpoint,
)
from engine.types import active_model

if TYPE_CHECKING:  # the job's module (catalog, training set, judge) loads on the first run, not with the window
    from engine.workspace import Retrain, RetrainOptions, Workspace

log = logging.getLogger(__name__)

__all__ = ["METHODS", "METHOD_DESCRIPTIONS", "SOURCES", "SOURCE_FOLDER", "SOURCE_LIBRARY", "TrainingDialog",
           "trainer_options"]

STOP_WAIT_MS = int(STOP_WAIT_S * 1000)  # how long Cancel lets the trainer save its checkpoint before killing it
CLOSE_WAIT_MS = 15_000  # closing the dialog (or the app) during a run blocks this long at most
LIBRARY_METHOD = DEFAULT_METHOD  # a library's run with no trained model to continue (engine.loop.defaults)
HOLDOUT = DEFAULT_HOLDOUT  # share of the annotated items kept aside to compare the old and the new model
HOLDOUT_SEED = 0


def trainer_options(finetune_epochs: int = 0, finetune_blocks: int = 16, low_priority: bool = True,
                    extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The dialog's own trainer options: phase two (backbone fine-tuning of the last ``finetune_blocks`` of 16
    blocks), ``--low-priority`` (the trainer yields the CPU to this window), then ``extra``."""
    tuning = ("--finetune-epochs", str(finetune_epochs), "--finetune-blocks", str(finetune_blocks))
    return (*(tuning if finetune_epochs else ()), *(("--low-priority",) if low_priority else ()), *extra)


class TrainingDialog(TrainingForm):
    """Choose the data and a method, train, watch loss and validation rsum, cancel / resume, then compare.

    With a service set (:meth:`set_service`), a finished run is registered with the library, measured beside
    the active model on the same split, and "Use it and re-index" asks the window (``use_model_requested``) to
    activate it and re-embed the library in the background.
    """

    model_trained = Signal(str)  # the model directory the trainer wrote
    model_registered = Signal(str)  # the name the library registered it under
    comparison_ready = Signal(object)  # Comparison
    use_model_requested = Signal(str)  # model name: activate it and re-index
    state_changed = Signal(str)  # "preparing", "running", "done", "cancelled", "failed"

    def __init__(self, command: list[str], models_dir: Path, data_folder: str = "",
                 parent: QWidget | None = None, *, extra_args: tuple[str, ...] = (),
                 service: Workspace | None = None) -> None:
        super().__init__(data_folder, parent)
        self.command = list(command)
        self.models_dir = models_dir
        self.extra_args = tuple(extra_args)
        self.state = "idle"
        self.model_dir: str | None = None
        self.resumable_dir: str | None = None  # a stopped run's folder: Resume continues from there
        self.training_set: Any = None  # the library's exported TrainingSet of the current run
        self.comparison: Comparison | None = None
        self.final_metrics: dict[str, Any] | None = None
        self._service: Workspace | None = None
        self._job: Retrain | None = None  # the current job; records of an older one are dropped
        self._worker: Worker | None = None
        self._last_options: RetrainOptions | None = None  # what Resume repeats
        self._last_job: Retrain | None = None
        self.job_pool = serial_pool("training")  # one job at a time, never on the window's read pool
        self.stop_wait_ms = STOP_WAIT_MS
        self._data_folder = data_folder
        self._planned_epochs = self.epochs.value()  # the epochs the form last proposed (the user may change them)
        self.source.currentIndexChanged.connect(self._source_changed)
        self.method.currentTextChanged.connect(lambda _name: self._propose_epochs())
        self.finetune.valueChanged.connect(lambda _v: self._enable_form(not self.busy))
        self.result_box.use_clicked.connect(self._use_model)
        self.start_button.clicked.connect(lambda: self.start())
        self.resume_button.clicked.connect(self.resume)
        self.cancel_button.clicked.connect(self.cancel)
        self.close_button.clicked.connect(self.close)
        self.set_service(service)
        self._offer_interrupted_run()

    def reset(self) -> None:
        """Start clean, as a new dialog would: the last run's plots, numbers, log and result are gone, the data
        is this library's annotations again; an unfinished run on disk is offered for Resume. Not while busy."""
        if self.busy:
            return
        self._job = self._last_job = self._worker = self._last_options = None
        for attribute in ("model_dir", "resumable_dir", "training_set", "comparison", "final_metrics"):
            setattr(self, attribute, None)
        self._clear_plots(RunProgress(epochs=1))
        for widget in (self.result_box, self.data_summary, self.data_warning):
            widget.hide()
        self.log_view.clear()
        self.data.setText(self._data_folder)
        self.train_split.setText("train")
        self.val_split.setText("dev")
        self._set_state("idle", "Not started")
        if self._service is not None:
            self.set_source(SOURCE_LIBRARY)
            self._source_changed()  # the method follows the active model again
        self._offer_interrupted_run()

    def _offer_interrupted_run(self) -> None:
        """A run that was stopped before it finished (Cancel, the app closed, a crash) left its checkpoint on
        disk: offer to resume it, as after a Cancel in this session."""
        saved = find_interrupted_run(self.models_dir)
        if saved is None or saved.options is None:
            return
        options = saved.options
        epochs = int(options.get("epochs") or self.epochs.value())
        self._last_options = self._options(False, saved.method, Path(str(options["data"])),
                                           str(options.get("train_split") or "train"),
                                           str(options.get("val_split") or "dev"))
        self.resumable_dir = str(saved.folder)
        self.epochs.setValue(epochs)
        self.data.setText(str(options["data"]))
        if self.method.findText(saved.method) >= 0:
            self.method.setCurrentText(saved.method)
        self._set_state("cancelled", f"An unfinished {saved.method} run: {saved.describe()}; Resume continues it, "
                                     "Start begins a new one.")

    # --- the library
    def set_service(self, service: Workspace | None) -> None:
        """The library a finished model is registered with (and whose annotations can be the data)."""
        had_one, self._service = self._service is not None, service
        item = self.source.model().item(1)  # "This library's annotations" needs a library
        item.setEnabled(service is not None)
        if service is None and self.source_key() == SOURCE_LIBRARY:
            self.source.setCurrentIndex(0)
        elif service is not None and not had_one and not self.busy:
            self.set_source(SOURCE_LIBRARY)  # what a user trains on first: the captions written here

    def _source_changed(self) -> None:
        library = self.source_key() == SOURCE_LIBRARY
        if library:  # the active model's method, so the new version can start from it; a3vse from zero-shot
            start = active_model(list(self._service.models.all())) if self._service is not None else None
            self.method.setCurrentText(start.method if start is not None and start.path else LIBRARY_METHOD)
            self.status.setText("The library's captions are exported; a fifth of the annotated items is held "
                                "aside to compare the new model with the active one.")
        self._propose_epochs()
        self._enable_form(self.state not in {"preparing", "running"})

    def _propose_epochs(self) -> None:
        """Show the epochs the run will take before Start (a warm start from the active model has its own budget,
        :func:`engine.loop.retrain.planned_epochs`); a number the user typed is left as it is, and what the form
        shows is what runs (:meth:`_options` passes it)."""
        if self.busy or self.source_key() != SOURCE_LIBRARY or self._service is None:
            return
        from engine.workspace import planned_epochs

        planned = planned_epochs(active_model(list(self._service.models.all())), self.method.currentText())
        if self.epochs.value() == self._planned_epochs and planned != self._planned_epochs:
            self.epochs.setValue(planned)
        self._planned_epochs = planned

    # --- running
    def trainer_options(self) -> tuple[str, ...]:
        """The trainer options the form adds to the job's (fine-tuning, low priority, the dialog's extras)."""
        return trainer_options(self.finetune.value(), self.finetune_blocks.value(), True, self.extra_args)

    def _options(self, library: bool, method: str, data: Path | None = None, train_split: str = "train",
                 val_split: str = "dev") -> RetrainOptions:
        """The job the form describes: on the library's annotations (warm-started from the active model when it
        has this method; the engine's recipe then sets the epochs) or on a caption folder (from scratch)."""
        from engine.workspace import RetrainOptions

        common = RetrainOptions(method=method, device=self.device.currentText(),
                                trainer_args=self.trainer_options(), models_dir=self.models_dir,
                                trainer_command=tuple(self.command), stop_wait_s=self.stop_wait_ms / 1000)
        if library:  # the epochs the form shows, warm start or not: what it says is what runs
            return replace(common, holdout=HOLDOUT, seed=HOLDOUT_SEED, epochs=self.epochs.value())
        return replace(common, warm_start=False, data=data, train_split=train_split, val_split=val_split,
                       epochs=self.epochs.value())

    @property
    def busy(self) -> bool:
        """Whether a run is being prepared or is running."""
        return self.state in {"preparing", "running"}

    @property
    def running(self) -> bool:
        """Whether the trainer is running, as far as its events shown so far say (until "done", a failure or a
        cancellation arrives)."""
        return self.state == "running" and self._job is not None

    @property
    def trainer_pid(self) -> int | None:
        """The running trainer's process id."""
        trainer = self._job.trainer if self._job is not None else None
        return trainer.pid if trainer is not None else None

    def job_options(self) -> RetrainOptions:
        """The job the form describes now (what Start runs)."""
        method = self.method.currentText()
        if self.source_key() == SOURCE_LIBRARY:
            return self._options(True, method)
        return self._options(False, method, Path(self.data.text().strip()), self.train_split.text().strip() or
                             "train", self.val_split.text().strip() or "dev")

    def start(self) -> None:
        """Start a run (one at a time) on what the form says."""
        if self.busy:
            return
        if self.source_key() == SOURCE_LIBRARY and self._service is None:
            self.status.setText("Open a library first: its annotations are the training data.")
            return
        data = self.data.text().strip()
        if self.source_key() == SOURCE_FOLDER and (not data or data == "."):
            self.status.setText("Choose a caption folder to train on first.")
            return
        self._run(self.job_options(), fresh=True)

    def resume(self) -> None:
        """Continue the last stopped run from its checkpoint (with the epochs and device now in the form)."""
        if self.busy or self._last_options is None or self.resumable_dir is None:
            return
        last, result = self._last_options, self._last_job.result if self._last_job is not None else None
        options = replace(last, resume_from=Path(self.resumable_dir), epochs=self.epochs.value(),
                          device=self.device.currentText(), trainer_args=self.trainer_options(),
                          stop_wait_s=self.stop_wait_ms / 1000)
        if result is not None:  # the same data, method and start as the run it continues
            options = replace(options, method=result.method or last.method, training_set=result.training_set,
                              init_from=Path(result.init_from) if result.init_from else None)
        self._run(options, fresh=False)

    def _run(self, options: RetrainOptions, fresh: bool) -> None:
        finetune = self.finetune.value()
        if fresh:
            self._clear_plots(RunProgress(epochs=self.epochs.value() + finetune))
            self.training_set = None
            self.data_summary.hide()
            self.data_warning.hide()
        else:  # a resume starts where the stopped run stood (the epoch budget may have changed)
            self.run_progress.epochs = self.epochs.value() + finetune
            self._show_run_progress()
        self.result_box.hide()
        self.model_dir = self.resumable_dir = self.comparison = self.final_metrics = None
        from engine.workspace import Retrain

        # the library's job (Models.retrain); on a caption folder with no library open, the job alone
        job = self._service.models.retrain(options) if self._service is not None else Retrain(None, options)
        worker = Worker(job.run)
        job.on_event = job.on_output = worker.emit_event  # handed to the GUI thread in order
        signals = worker.signals
        signals.event.connect(while_alive(self, lambda record: self._on_record(job, record)))
        signals.progress.connect(while_alive(self, lambda p: self._on_job_progress(job, p)))
        signals.returned.connect(while_alive(self, lambda _r: self._job_finished(job)))
        signals.errored.connect(while_alive(self, lambda exc: self._job_failed(job, exc)))
        signals.cancelled.connect(while_alive(self, lambda: self._job_cancelled(job)))
        self._job, self._worker, self._last_job, self._last_options = job, worker, job, options
        library = options.data is None and options.training_set is None
        if library:
            self._set_state("preparing", "Exporting this library's annotations…")
        else:
            self._set_state("running", f"{'Resuming' if options.resume_from else 'Starting'} {options.method}…")
        worker.start(self.job_pool)

    def cancel(self) -> None:
        """Stop the run: the job asks the trainer to stop (it writes a resumable checkpoint) and kills it if it
        has not stopped after ``stop_wait_ms``; an export still being prepared is abandoned."""
        if self._worker is None or not self.busy:
            return
        self._worker.cancel()
        self.status.setText("Cancelling… the trainer finishes its step and saves a checkpoint to resume from"
                            if self.state == "running" else "Cancelling…")
        self.cancel_button.setEnabled(False)

    # --- what the job reports
    def _on_job_progress(self, job: Retrain, progress: Any) -> None:
        if job is self._job and self.state == "preparing":
            self.status.setText(progress.message[:1].upper() + progress.message[1:] + "…")

    def _on_record(self, job: Retrain, record: Any) -> None:
        """A trainer event or a line of its output (the job's first record is the command line)."""
        if job is not self._job:
            return
        if self.state == "preparing":
            self._training_started(job)
        if isinstance(record, str):
            self._append_log(record)
        elif isinstance(record, events.Step):
            self._on_step(record)
        elif isinstance(record, events.EpochEnd):
            self._on_epoch(record)
        elif isinstance(record, events.StageProgress):
            self._on_progress(record)
        elif isinstance(record, events.Done):
            self._on_done(record)
        elif isinstance(record, events.Resumed):
            self._on_resumed(record)
        elif isinstance(record, events.Phase):
            self._on_phase(record)
        elif isinstance(record, events.Stopped) and record.resumable:
            self.resumable_dir = record.model_dir or None
        elif isinstance(record, events.Error):
            self._append_log(f"error: {record.message}")

    def _training_started(self, job: Retrain) -> None:
        """The library's annotations are exported and the trainer starts: show what it trains on."""
        result = job.result
        if result is None:
            return
        training_set = self.training_set = result.training_set
        if training_set is not None:
            self.data_summary.setText(describe_training_set(training_set))
            self.data_summary.show()
            warning = getattr(training_set, "warning", None)
            self.data_warning.setText(str(warning or ""))
            self.data_warning.setVisible(bool(warning))
            self.data.setText(str(training_set.folder))
            self.train_split.setText(str(training_set.train_split))
            self.val_split.setText(str(training_set.val_split))
        if result.epochs:
            self.epochs.setValue(result.epochs)  # the form shows what runs (a resume may continue another budget)
        self.run_progress.epochs = self.epochs.value() + self.finetune.value()
        self.frame_epochs()
        if training_set is not None:
            held = int(training_set.n_heldout_items)
            title = chart_title(held)
            self.charted = title is not None
            self.val_plot.setTitle(title[0] if title else f"trainer's check: not charted, too few held-aside items "
                                   f"({held})")
            self.val_plot.setToolTip(title[1] if title else "Too few held-aside items for the trainer's per-epoch "
                                     "rsum to mean anything (one item alone scores 600); the log still lists it")
        self._set_state("running", f"Starting {result.method}…")

    def _on_done(self, event: events.Done) -> None:
        self.model_dir = event.model_dir
        if self.run_progress.known:  # an early stop (patience) ends the run before its last epoch
            self.progress.setValue(self.progress.maximum())
        self.final_metrics = dict(event.val) if event.val else None
        self._set_state("done", f"Done: model written to {self.model_dir}")
        self.model_trained.emit(str(self.model_dir))
        if self._service is not None:
            self.status.setText(f"Done: registering {Path(str(self.model_dir)).name} and measuring both models…")

    def _job_finished(self, job: Retrain) -> None:
        if job is not self._job:
            return
        if self.busy:  # a trainer that ended well without saying "done"
            self._set_state("done", "Done")
        if job.result is None or job.result.model_name is None:  # no library: nothing registered
            return
        comparison = self.comparison = Comparison.of(job.result)
        self.result_box.show_comparison(comparison)
        self.show_result()
        if comparison.decision:
            self.status.setText(f"Done: {comparison.new_name} is active; the library re-indexes with it."
                                if comparison.activated else
                                f"Done: {comparison.new_name} is kept but not active (why: below the table); "
                                "“Use it and re-index” switches anyway.")
        else:
            self.status.setText(f"Done: {comparison.new_name} is registered with the library.")
        self.model_registered.emit(comparison.new_name)
        if comparison.activated:
            self.use_model_requested.emit(comparison.new_name)
        self.comparison_ready.emit(comparison)

    def _job_failed(self, job: Retrain, exc: BaseException) -> None:
        if job is not self._job:
            return
        if self.state == "done":  # trained; registering or measuring failed
            self.status.setText(f"Trained, but the library could not register or measure the model: {exc}")
            return
        if self.state == "preparing":
            self._set_state("failed", f"Could not train on this library's annotations: {exc}")
            return
        saved = saved_checkpoint(self._run_folder(job))
        self.resumable_dir = str(saved.folder) if saved is not None else None
        if isinstance(exc, TrainerFailed) and exc.status is None:
            self._append_log(str(exc))
            message = f"Could not start the trainer ({self.command[0]})"
        elif isinstance(exc, TrainerFailed):
            resume = " Resume continues from its last checkpoint." if saved is not None else ""
            message = f"The trainer stopped with exit code {exc.status}: {exc.reason}; see the log below.{resume}"
        else:
            message = f"Training failed: {exc}"
        self._set_state("failed", message)

    def _job_cancelled(self, job: Retrain) -> None:
        if job is not self._job:
            return
        if self.state == "preparing":
            self._set_state("cancelled", "Cancelled before training started")
            return
        saved = saved_checkpoint(self._run_folder(job))
        self.resumable_dir = str(saved.folder) if saved is not None else None
        self._set_state("cancelled", f"Cancelled: {saved.describe()}; Resume continues it." if saved is not None
                        else "Cancelled before the first checkpoint was written; Start begins again.")

    def _run_folder(self, job: Retrain) -> Path | None:
        """Where the run's checkpoint is: what the trainer said, else the folder the job gave it."""
        if self.resumable_dir:
            return Path(self.resumable_dir)
        return job.result.model_dir if job.result is not None else None

    def _use_model(self) -> None:
        if self.comparison is not None:
            self.use_button.setEnabled(False)
            self.status.setText(f"Switching to {self.comparison.new_name}; the library re-indexes in the "
                                "background (see the library panel).")
            self.use_model_requested.emit(self.comparison.new_name)

    def model_switched(self, name: str) -> None:
        """The window made ``name`` the active model (this dialog's "Use it and re-index", the rule, or another
        view): the table says which model is active now."""
        comparison = self.comparison
        if comparison is not None and not self.busy:
            self.result_box.show_comparison(comparison, active=name)

    def reindex_ended(self, name: str, outcome: str) -> None:
        """The re-index after switching to ``name`` ended ("done", "cancelled" or "failed"): say so here too."""
        if self.comparison is None or self.comparison.new_name != name or self.busy:
            return
        self.status.setText(f"{name} is active and the library is re-indexed with it: searches use it now."
                            if outcome == "done" else
                            f"{name} is active; re-indexing the library with it {outcome} (Resume in the library "
                            "panel, or File ▸ Re-index library, finishes it).")

    # --- state
    def _set_state(self, state: str, message: str) -> None:
        self.state = state
        self.status.setText(message)
        busy = self.busy
        self.start_button.setEnabled(not busy)
        self.cancel_button.setEnabled(busy)
        self.resume_button.setEnabled(state in {"cancelled", "failed"} and self.resumable_dir is not None)
        self._enable_form(not busy)
        self.state_changed.emit(state)

    def _enable_form(self, enabled: bool) -> None:
        folder = self.source_key() == SOURCE_FOLDER
        for widget in (self.source, self.method, self.epochs, self.finetune, self.device):
            widget.setEnabled(enabled)
        self.finetune_blocks.setEnabled(enabled and self.finetune.value() > 0)
        for widget in (self.data, self.browse_button, self.train_split, self.val_split):
            widget.setEnabled(enabled and folder)

    def closeEvent(self, event: Any) -> None:
        """A run is stopped with its checkpoint (waiting :data:`CLOSE_WAIT_MS` at most), so Resume can continue it."""
        job = self._job
        if self.busy and job is not None:
            if job.trainer is not None:
                job.trainer.stop_wait_s = min(job.trainer.stop_wait_s, CLOSE_WAIT_MS / 1000)
            self.cancel()
            self.job_pool.waitForDone(CLOSE_WAIT_MS + 5000)
        super().closeEvent(event)

