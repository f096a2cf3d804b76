"""The training dialog's widgets and how they draw a run: the form (data, method, epochs, fine-tuning, device),
the progress bar over the whole run, the loss and validation-rsum plots, the log pane and the comparison box.

:class:`TrainingForm` only shows; :class:`app.widgets.training.TrainingDialog` adds what the buttons do (it runs
the engine's retraining job) and hands the trainer's events to the ``_on_*`` methods here.
"""

from __future__ import annotations

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app import qtcompat  # noqa: F401  (binding work-around, before any signal is emitted)
from app.settings import DEVICES
from app.widgets.plaintext import plain_label
from app.widgets.plots import StillPlot
from app.widgets.screen import fit_to_screen, scrolled
from app.widgets.trainingview import METHOD_DESCRIPTIONS, METHODS, ComparisonBox, RunProgress, format_eta
from engine.terms import events

SOURCE_FOLDER = "folder"
SOURCE_LIBRARY = "library"
SOURCES = ((SOURCE_FOLDER, "A caption folder"), (SOURCE_LIBRARY, "This library's annotations"))


class TrainingForm(QDialog):
    """The widgets of the training dialog and the drawing of a run's events (no behaviour of its own)."""

    def __init__(self, data_folder: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Train a model")
        self.losses: list[tuple[int, float]] = []  # (global step, total loss)
        self.rsums: list[tuple[int, float]] = []  # (epoch, validation rsum)
        self.charted = True  # False: too few held-aside items for the trainer's check to mean anything (not drawn)
        self.run_progress = RunProgress(epochs=1)  # the whole run's position, shown by the progress bar
        self._phase_marker: pg.InfiniteLine | None = None  # where fine-tuning began, on the rsum plot
        self._build(data_folder)
        self.frame_epochs()

    def _build(self, data_folder: str) -> None:
        self.source = QComboBox()
        for key, text in SOURCES:
            self.source.addItem(text, key)
        self.method = QComboBox()
        self.method.addItems(METHODS)
        self.method_description = plain_label("", wrap=True)
        self.method.currentTextChanged.connect(lambda name: self.method_description.setText(
            METHOD_DESCRIPTIONS.get(name, "")))
        self.method_description.setText(METHOD_DESCRIPTIONS[self.method.currentText()])
        self.data = QLineEdit(data_folder, placeholderText="A caption folder (images/ + captions.tsv)")
        self.browse_button = QPushButton("Browse…")
        self.browse_button.clicked.connect(self._browse)
        data_row = QHBoxLayout()
        data_row.addWidget(self.data, 1)
        data_row.addWidget(self.browse_button)
        self.train_split = QLineEdit("train")
        self.val_split = QLineEdit("dev")
        self.val_split.setToolTip("The split of the caption folder measured after every epoch")
        split_row = QHBoxLayout()
        split_row.addWidget(QLabel("train"))
        split_row.addWidget(self.train_split)
        split_row.addWidget(QLabel("validation"))
        split_row.addWidget(self.val_split)
        self.epochs = QSpinBox(minimum=1, maximum=1000, value=10)  # then engine.loop.retrain.planned_epochs
        self.epochs.setToolTip("The epochs this run trains: for a retrain that starts from the active model, the "
                               "budget the engine uses for one (change it if you like; what is shown is what runs)")
        self.finetune = QSpinBox(minimum=0, maximum=100, value=0, suffix=" epochs", specialValueText="off")
        self.finetune.setToolTip("After the epochs above, fine-tune the image backbone itself with the best model "
                                 "for this many epochs (photos only). The whole backbone is meant for a GPU: on a "
                                 "CPU an epoch over 6,000 photos takes about a quarter of an hour.")
        self.finetune_blocks = QSpinBox(minimum=1, maximum=16, value=16, prefix="last ", suffix=" of 16 blocks")
        self.finetune_blocks.setToolTip("Fine-tune only the backbone's last blocks: below 16 the frozen part runs "
                                        "once per picture and is cached (no augmentation), fast enough for a CPU "
                                        "(5 blocks: about 1.5 minutes an epoch over 6,000 photos)")
        self.finetune_blocks.setEnabled(False)  # until fine-tuning is on
        finetune_row = QHBoxLayout()
        finetune_row.addWidget(self.finetune, 1)
        finetune_row.addWidget(self.finetune_blocks, 1)
        self.device = QComboBox()
        self.device.addItems(DEVICES)
        form = QFormLayout()
        form.addRow("Train on", self.source)
        form.addRow("Method", self.method)
        form.addRow("", self.method_description)  # its own row: a wrapped label's height follows its width
        form.addRow("Data", data_row)
        form.addRow("Splits", split_row)
        form.addRow("Epochs", self.epochs)
        form.addRow("Fine-tune backbone", finetune_row)
        form.addRow("Device", self.device)
        self.data_summary = plain_label("", wrap=True)
        self.data_warning = plain_label("", wrap=True)
        self.data_warning.setStyleSheet("color: #b35900;")
        self.progress = QProgressBar(minimum=0, maximum=1, value=0)
        self.status = plain_label("Not started", wrap=True)  # messages carry paths
        self.loss_plot = self._plot("training loss", "step")
        self.loss_curve = self.loss_plot.plot(pen=pg.mkPen("#1f77b4", width=2))
        self.val_plot = self._plot("trainer's check: rsum, model alone", "epoch")
        epoch_axis = self.val_plot.getAxis("bottom")
        epoch_axis.enableAutoSIPrefix(False)  # epochs are whole numbers: never "epoch (x0.001)"
        self.val_curve = self.val_plot.plot(pen=pg.mkPen("#d62728", width=2), symbol="o", symbolSize=6)
        self.log_view = QPlainTextEdit(readOnly=True, maximumBlockCount=2000)
        self.log_view.setMaximumHeight(110)
        self.result_box = ComparisonBox()
        self.result_box.hide()
        self.result_table, self.result_note, self.use_button = (self.result_box.table, self.result_box.note,
                                                                self.result_box.use_button)
        self.start_button = QPushButton("Start")
        self.resume_button = QPushButton("Resume", enabled=False)
        self.resume_button.setToolTip("Continue the cancelled run from its last checkpoint")
        self.cancel_button = QPushButton("Cancel", enabled=False)
        self.close_button = QPushButton("Close")
        self._layout(form)

    def _plot(self, title: str, x_label: str) -> pg.PlotWidget:
        plot = StillPlot(background=None, title=title)
        plot.setLabel("bottom", x_label)
        plot.showGrid(x=True, y=True, alpha=0.2)
        plot.setMinimumHeight(160)
        return plot

    def _layout(self, form: QFormLayout) -> None:
        plots = QHBoxLayout()
        plots.addWidget(self.loss_plot)
        plots.addWidget(self.val_plot)
        buttons = QHBoxLayout()
        buttons.addWidget(self.use_button)  # beside Close, never scrolled or pushed off-screen (issue #44)
        buttons.addStretch(1)
        for button in (self.start_button, self.resume_button, self.cancel_button, self.close_button):
            buttons.addWidget(button)
        body = QWidget()
        content = QVBoxLayout(body)
        content.setContentsMargins(0, 0, 0, 0)
        content.addLayout(form)
        content.addWidget(self.data_summary)
        content.addWidget(self.data_warning)
        content.addWidget(self.progress)
        content.addWidget(self.status)
        content.addLayout(plots, 1)
        content.addWidget(self.result_box)
        content.addWidget(self.log_view)
        # The dialog keeps its size when the result and the log appear: what does not fit scrolls (it grew from
        # 860x640 to 952x782 at a run's end and pushed "Use it and re-index" off-screen, issue #44).
        self.body = scrolled(body)
        self.body.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # labels wrap instead
        layout = QVBoxLayout(self)
        layout.addWidget(self.body, 1)
        layout.addLayout(buttons)
        self.data_summary.hide()
        self.data_warning.hide()
        fit_to_screen(self, 860, 640)

    def show_result(self) -> None:
        """Bring the comparison into view (it is below the plots: the body scrolls when the dialog is small)."""
        self.body.ensureWidgetVisible(self.result_box)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Caption folder to train on", self.data.text())
        if folder:
            self.data.setText(folder)


    def source_key(self) -> str:
        """``"folder"`` or ``"library"``."""
        return str(self.source.currentData())

    def set_source(self, key: str) -> None:
        """Choose the data source by key (``SOURCE_FOLDER`` / ``SOURCE_LIBRARY``)."""
        index = self.source.findData(key)
        if index < 0:
            raise ValueError(f"unknown training data source {key!r}")
        self.source.setCurrentIndex(index)


    # --- drawing the trainer's events
    def _on_phase(self, event: events.Phase) -> None:
        """Fine-tuning begins after the warm-up's last epoch (an early stop may have cut the warm-up short)."""
        self.run_progress.epochs = event.epoch + event.epochs
        self.run_progress.at_epoch_end(event.epoch)
        self._show_run_progress()
        self.frame_epochs()
        self._clear_phase_marker()
        self._phase_marker = pg.InfiniteLine(pos=event.epoch + 0.5, angle=90, label="fine-tuning",
                                             pen=pg.mkPen("#7f7f7f", width=1, style=Qt.PenStyle.DashLine),
                                             labelOpts={"position": 0.9, "color": "#7f7f7f"})
        self.val_plot.addItem(self._phase_marker)
        plural = "" if event.epochs == 1 else "s"
        self._append_log(f"epoch {event.epoch}: fine-tuning the image backbone for {event.epochs} epoch{plural}")

    def _clear_phase_marker(self) -> None:
        if self._phase_marker is not None:
            self.val_plot.removeItem(self._phase_marker)
            self._phase_marker = None

    def _clear_plots(self, run_progress: RunProgress) -> None:
        self.losses.clear()
        self.rsums.clear()
        self.charted = True
        self.loss_curve.setData([], [])
        self.val_curve.setData([], [])
        self._clear_phase_marker()
        self.run_progress = run_progress
        self.frame_epochs()
        self.progress.setFormat("%p%")
        self.progress.setRange(0, 1)
        self.progress.setValue(0)

    def frame_epochs(self) -> None:
        """The validation plot's x axis: whole epochs from 0 (the starting model's check, for a warm start) to the
        run's last, ticks on integers, so one point never spreads the axis over fractions of an epoch."""
        last = max(1, self.run_progress.epoch_count, *(e for e, _ in self.rsums))
        axis = self.val_plot.getAxis("bottom")
        major = max(1, -(-last // 10))  # about ten labels at most
        axis.setTickSpacing(major=float(major), minor=1.0)
        self.val_plot.setXRange(0, last, padding=0.04)
        self.val_plot.setLimits(xMin=-0.5, xMax=last + 0.5)

    def _on_progress(self, event: events.StageProgress) -> None:
        # a stage before training (feature extraction) has the bar to itself; once the run's position is
        # known (a resume) the bar keeps it, so it never jumps back
        if event.total > 0 and not self.run_progress.known:
            self.progress.setFormat(f"{event.stage} · %p%" if event.stage else "%p%")
            self.progress.setRange(0, event.total)
            self.progress.setValue(min(event.done, event.total))
        self.status.setText(f"{event.stage}: {event.message}" if event.stage else event.message)

    def _show_run_progress(self) -> None:
        run = self.run_progress
        self.progress.setFormat(run.label())  # first, so that valueChanged listeners read the new text
        self.progress.setRange(0, run.total)
        self.progress.setValue(run.done)

    def _on_step(self, event: events.Step) -> None:
        self.run_progress.at_step(event.epoch, event.step, max(1, event.total))
        self._show_run_progress()
        loss = event.total_loss
        if loss is not None:
            self.losses.append((self.run_progress.done, loss))  # x: the step of the whole run
            self._plot_losses()
        parts = [f"epoch {self.run_progress.epoch}/{self.run_progress.epoch_count}",
                 f"step {event.step}/{max(1, event.total)}"]
        if loss is not None:
            parts.append(f"loss {loss:.4f}")
        if event.lr is not None:
            parts.append(f"lr {event.lr:.2e}")
        # eta_s already covers the whole run (the trainer counts the steps of every epoch left plus the
        # validations left), so it needs no scaling here
        parts.append(f"ETA {format_eta(event.eta_s)}")
        self.status.setText(" · ".join(parts))

    def _plot_losses(self) -> None:
        if self.losses:
            xs, ys = zip(*self.losses, strict=True)
            self.loss_curve.setData(list(xs), list(ys))
        else:
            self.loss_curve.setData([], [])

    def _on_resumed(self, event: events.Resumed) -> None:
        self._append_log(f"resumed at epoch {event.epoch}, step {event.step}")
        self.run_progress.at_resume(event.epoch, event.step)
        self._show_run_progress()
        # steps after the checkpoint are trained again: their old losses make way for the new ones
        self.losses = [(x, y) for x, y in self.losses if x <= self.run_progress.done]
        self._plot_losses()

    def _on_epoch(self, event: events.EpochEnd) -> None:
        self.run_progress.at_epoch_end(event.epoch)
        self._show_run_progress()
        rsum = event.rsum
        if rsum is not None and self.charted:
            self.rsums.append((event.epoch, rsum))
            xs, ys = zip(*self.rsums, strict=True)
            self.val_curve.setData(list(xs), list(ys))
            self.frame_epochs()
        if rsum is not None:
            self._append_log(f"epoch {event.epoch}: validation rsum {rsum:.1f}")

    def _append_log(self, text: str) -> None:
        if text:
            self.log_view.appendPlainText(text)

