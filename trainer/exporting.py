"""A model folder's ONNX export, every run's last step and ``polyseek export``'s: the head, with the backbone and the
text encoder it fine-tuned where it did (:mod:`trainer.finetune`, :mod:`trainer.textencoder`), written as the
engine reads it (:mod:`trainer.methods.export`)."""

from __future__ import annotations

from pathlib import Path

from trainer.finetune import export_backbone, finetuned_backbone, load_backbone
from trainer.methods import RetrievalModel, export_model
from trainer.textencoder import export_text, finetuned_text, load_text_encoder


def export_folder(model_dir: Path, head: RetrievalModel, out: Path, trained_on: dict[str, int] | None = None) -> dict:
    """Export a model folder's head, with its fine-tuned backbone and text encoder where it has them;
    ``trained_on``: the photos and clips its visual branches learnt from (the manifest's ``trained_on``)."""
    found = finetuned_backbone(model_dir)
    backbone = None
    if found is not None:
        tuned = load_backbone(found[1])
        backbone = lambda dest: export_backbone(tuned, found[0], dest)  # noqa: E731
    text_found = finetuned_text(model_dir)
    text = None
    if text_found is not None:
        encoder = load_text_encoder(text_found[2], text_found[1])
        text = lambda dest: export_text(encoder, text_found[0], dest)  # noqa: E731
    return export_model(head, out, backbone=backbone, text=text, trained_on=trained_on)
