"""Polyseek's trainer: datasets, models, losses, training loops, evaluation and ONNX export (torch).

Runs in its own process (``python -m trainer`` / ``polyseek train``); never imports Qt.
"""
