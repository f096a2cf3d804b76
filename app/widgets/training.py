"""The training dialog: starts the trainer as its own process and plots its JSON progress live.

The trainer runs as ``<command> train ... --json-progress`` through :class:`QProcess` (never in the GUI
process: torch stays out of it, and a crash in training never takes the window down). It prints one JSON
object per line::

    {"event": "step", "epoch": 1, "step": 10, "total": 100, "loss": {"total": 0.5, ...}, "lr": 2e-4,
     "eta_s": 12.3}
    {"event": "epoch", "epoch": 1, "val": {"rsum": 123.4, ...}}
    {"event": "done", "model_dir": "..."}

Other lines (warnings, tracebacks) go to the log pane as plain text.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyqtgraph as pg
from PySide6.QtCore import QProcess, QProcessEnvironment, QTimer, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app import qtcompat  # noqa: F401  (binding work-around, before any signal is emitted)
from app.widgets.plaintext import plain_label

log = logging.getLogger(__name__)

METHODS = ("vse", "pvse", "pcme", "a3vse", "twobranch-embed", "twobranch-sim", "instance")
DEVICES = ("auto", "cpu", "cuda")
KILL_AFTER_MS = 3000  # a trainer that ignores SIGTERM this long is killed


@dataclass(frozen=True, slots=True)
class TrainingRequest:
    """The arguments of one ``train`` run (the CLI contract of ``polyseek train``)."""

    method: str
    data: Path
    out: Path
    epochs: int = 10
    device: str = "auto"

    def arguments(self) -> list[str]:
        """The trainer's command-line arguments after the program itself."""
        return ["train", "--method", self.method, "--data", str(self.data), "--out", str(self.out),
                "--epochs", str(self.epochs), "--device", self.device, "--json-progress"]


class JsonLines:
    """Splits a byte stream into JSON events; partial lines wait for the rest, other lines pass as text."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[dict[str, Any] | str]:
        """Every complete line so far: a dict for each JSON event, the text for anything else."""
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        return [_parse_line(line) for line in lines if line.strip()]

    def flush(self) -> list[dict[str, Any] | str]:
        rest, self._buffer = self._buffer, b""
        return [_parse_line(rest)] if rest.strip() else []


def _parse_line(line: bytes) -> dict[str, Any] | str:
    text = line.decode("utf-8", errors="replace").rstrip("\r")
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text
    return value if isinstance(value, dict) and "event" in value else text


def format_eta(seconds: float | None) -> str:
    if seconds is None or seconds < 0:
        return "—"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


class TrainingDialog(QDialog):
    """Choose a method and a caption folder, start training, watch loss and validation rsum, cancel."""

    model_trained = Signal(str)  # the model directory the trainer wrote
    state_changed = Signal(str)  # "running", "done", "cancelled", "failed"

    def __init__(self, command: list[str], models_dir: Path, data_folder: str = "",
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Train a model")
        self.command = list(command)
        self.models_dir = models_dir
        self.state = "idle"
        self.model_dir: str | None = None
        self.losses: list[tuple[int, float]] = []  # (global step, total loss)
        self.rsums: list[tuple[int, float]] = []  # (epoch, validation rsum)
        self._parser = JsonLines()
        self._cancelling = False
        self._process: QProcess | None = None
        self._kill_timer = QTimer(self, singleShot=True, interval=KILL_AFTER_MS)
        self._kill_timer.timeout.connect(self._kill)
        self._build(data_folder)

    # --- layout
    def _build(self, data_folder: str) -> None:
        self.method = QComboBox()
        self.method.addItems(METHODS)
        self.data = QLineEdit(data_folder, placeholderText="A caption folder (images/ + captions.tsv)")
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        data_row = QHBoxLayout()
        data_row.addWidget(self.data, 1)
        data_row.addWidget(browse)
        self.epochs = QSpinBox(minimum=1, maximum=1000, value=10)
        self.device = QComboBox()
        self.device.addItems(DEVICES)
        form = QFormLayout()
        form.addRow("Method", self.method)
        form.addRow("Data", data_row)
        form.addRow("Epochs", self.epochs)
        form.addRow("Device", self.device)
        self.progress = QProgressBar(minimum=0, maximum=1, value=0)
        self.status = plain_label("Not started")  # messages carry paths
        self.loss_plot = self._plot("training loss", "step")
        self.loss_curve = self.loss_plot.plot(pen=pg.mkPen("#1f77b4", width=2))
        self.val_plot = self._plot("validation rsum", "epoch")
        self.val_curve = self.val_plot.plot(pen=pg.mkPen("#d62728", width=2), symbol="o", symbolSize=6)
        self.log_view = QPlainTextEdit(readOnly=True, maximumBlockCount=2000)
        self.log_view.setMaximumHeight(110)
        self.start_button = QPushButton("Start")
        self.cancel_button = QPushButton("Cancel", enabled=False)
        self.close_button = QPushButton("Close")
        self.start_button.clicked.connect(lambda: self.start())
        self.cancel_button.clicked.connect(self.cancel)
        self.close_button.clicked.connect(self.close)
        self._layout(form)

    def _plot(self, title: str, x_label: str) -> pg.PlotWidget:
        plot = pg.PlotWidget(background=None, title=title)
        plot.setLabel("bottom", x_label)
        plot.showGrid(x=True, y=True, alpha=0.2)
        plot.setMinimumHeight(160)
        return plot

    def _layout(self, form: QFormLayout) -> None:
        plots = QHBoxLayout()
        plots.addWidget(self.loss_plot)
        plots.addWidget(self.val_plot)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        for button in (self.start_button, self.cancel_button, self.close_button):
            buttons.addWidget(button)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(self.progress)
        layout.addWidget(self.status)
        layout.addLayout(plots, 1)
        layout.addWidget(self.log_view)
        layout.addLayout(buttons)
        self.resize(820, 560)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Caption folder to train on", self.data.text())
        if folder:
            self.data.setText(folder)

    # --- running
    def request(self) -> TrainingRequest:
        """The run the form describes; the output folder is a new one under the models folder."""
        method = self.method.currentText()
        out = self.models_dir / f"{method}-{time.strftime('%Y%m%d-%H%M%S')}"
        return TrainingRequest(method, Path(self.data.text().strip()), out, self.epochs.value(),
                               self.device.currentText())

    def start(self, request: TrainingRequest | None = None) -> None:
        """Start the trainer process (one at a time)."""
        if self._process is not None:
            return
        request = request or self.request()
        if not str(request.data) or str(request.data) == ".":
            self.status.setText("Choose a caption folder to train on first.")
            return
        self.losses.clear()
        self.rsums.clear()
        self.loss_curve.setData([], [])
        self.val_curve.setData([], [])
        self._parser = JsonLines()
        self._cancelling = False
        self.model_dir = None
        self._process = self._spawn(request)
        self._set_state("running", f"Starting {request.method}…")

    def _spawn(self, request: TrainingRequest) -> QProcess:
        process = QProcess(self)
        env = QProcessEnvironment.systemEnvironment()
        env.insert("PYTHONUNBUFFERED", "1")  # progress lines must arrive as they are printed
        process.setProcessEnvironment(env)
        process.readyReadStandardOutput.connect(self._read_stdout)
        process.readyReadStandardError.connect(self._read_stderr)
        process.finished.connect(self._finished)
        process.errorOccurred.connect(self._process_error)
        arguments = self.command[1:] + request.arguments()
        self._append_log("$ " + " ".join([self.command[0], *arguments]))
        process.start(self.command[0], arguments)
        return process

    def cancel(self) -> None:
        """Ask the trainer to stop (SIGTERM), killing it if it has not after a few seconds."""
        if self._process is None:
            return
        self._cancelling = True
        self.status.setText("Cancelling…")
        self.cancel_button.setEnabled(False)
        self._process.terminate()
        self._kill_timer.start()

    def _kill(self) -> None:
        if self._process is not None:
            self._process.kill()

    @property
    def running(self) -> bool:
        return self._process is not None

    # --- output
    def _read_stdout(self) -> None:
        if self._process is not None:
            self._handle(self._parser.feed(bytes(self._process.readAllStandardOutput().data())))

    def _read_stderr(self) -> None:
        if self._process is not None:
            text = bytes(self._process.readAllStandardError().data()).decode("utf-8", errors="replace")
            self._append_log(text.rstrip("\n"))

    def _handle(self, events: list[dict[str, Any] | str]) -> None:
        for event in events:
            if isinstance(event, str):
                self._append_log(event)
            elif event["event"] == "step":
                self._on_step(event)
            elif event["event"] == "epoch":
                self._on_epoch(event)
            elif event["event"] == "done":
                self.model_dir = str(event.get("model_dir", ""))

    def _on_step(self, event: dict[str, Any]) -> None:
        step, total = int(event.get("step", 0)), max(1, int(event.get("total", 1)))
        epoch = int(event.get("epoch", 0))
        loss = event.get("loss", {})
        total_loss = loss.get("total") if isinstance(loss, dict) else loss
        self.progress.setRange(0, total)
        self.progress.setValue(min(step, total))
        if total_loss is not None:
            self.losses.append((len(self.losses) + 1, float(total_loss)))
            xs, ys = zip(*self.losses, strict=True)
            self.loss_curve.setData(list(xs), list(ys))
        lr = event.get("lr")
        parts = [f"epoch {epoch}", f"step {step}/{total}"]
        if total_loss is not None:
            parts.append(f"loss {float(total_loss):.4f}")
        if lr is not None:
            parts.append(f"lr {float(lr):.2e}")
        parts.append(f"ETA {format_eta(event.get('eta_s'))}")
        self.status.setText(" · ".join(parts))

    def _on_epoch(self, event: dict[str, Any]) -> None:
        val = event.get("val") or {}
        if "rsum" in val:
            self.rsums.append((int(event.get("epoch", len(self.rsums) + 1)), float(val["rsum"])))
            xs, ys = zip(*self.rsums, strict=True)
            self.val_curve.setData(list(xs), list(ys))
            self._append_log(f"epoch {event.get('epoch')}: validation rsum {float(val['rsum']):.1f}")

    def _append_log(self, text: str) -> None:
        if text:
            self.log_view.appendPlainText(text)

    def _process_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            self._append_log(f"could not start {self.command[0]}")
            self._cleanup()
            self._set_state("failed", f"Could not start the trainer ({self.command[0]})")

    def _finished(self, code: int, status: QProcess.ExitStatus) -> None:
        self._handle(self._parser.flush())
        self._kill_timer.stop()
        self._cleanup()
        if self._cancelling:
            self._set_state("cancelled", "Cancelled")
        elif status == QProcess.ExitStatus.NormalExit and code == 0 and self.model_dir:
            self._set_state("done", f"Done: model written to {self.model_dir}")
            self.model_trained.emit(self.model_dir)
        else:
            self._set_state("failed", f"The trainer stopped with exit code {code}; see the log below")

    def _cleanup(self) -> None:
        if self._process is not None:
            self._process.deleteLater()
            self._process = None

    def _set_state(self, state: str, message: str) -> None:
        self.state = state
        self.status.setText(message)
        running = state == "running"
        self.start_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        for widget in (self.method, self.data, self.epochs, self.device):
            widget.setEnabled(not running)
        self.state_changed.emit(state)

    def closeEvent(self, event: Any) -> None:
        if self._process is not None:
            self.cancel()
            self._process.waitForFinished(KILL_AFTER_MS)
            if self._process is not None:
                self._process.kill()
                self._process.waitForFinished(1000)
        super().closeEvent(event)
