"""How a method trains by default: the recipe each method module registers beside its model (``MethodSpec.recipe``).

Standard library only; the trainer's loop (:mod:`trainer.runsettings`, :mod:`trainer.train`) applies it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The MiniLM sentence vector as the global text feature: what most recipes ask of the config.
SENTENCE_TEXT: dict[str, Any] = {"text_encoder": "minilm-sentence"}


@dataclass(frozen=True)
class Recipe:
    """How a method trains by default on cached features.

    ``overrides`` are config fields the recipe sets over the paper defaults. ``schedule``: 'plateau' multiplies
    the learning rate by ``schedule_factor`` after ``schedule_patience`` epochs without a better validation rsum;
    'cosine' anneals it to 0 over the run; 'step' multiplies it by ``schedule_factor`` from epoch ``step_epoch``
    on; 'constant' keeps it. ``patience`` epochs without improvement stop the run.
    ``per_item`` captions of every item make an epoch (None: all of them); ``group`` > 1 puts that many
    captions of one item into the same batch (neighbourhood sampling).
    ``val_items`` caps the items of the per-epoch validation (the final report uses them all).

    An epoch shows every item once with one of its captions (``per_item=1``) unless a recipe says otherwise: on
    cached features five caption passes cost five times as much and overfit as soon (linear VSE++ on Flickr8k
    peaks after ~15 such epochs).
    """

    overrides: dict[str, Any]
    optimizer: str = "adam"
    lr: float = 2e-4
    weight_decay: float = 0.0
    schedule: str = "plateau"
    schedule_factor: float = 0.5
    schedule_patience: int = 1
    step_epoch: int = 0
    epochs: int = 15
    patience: int = 3
    batch_size: int = 128
    group: int = 1
    per_item: int | None = 1
    val_items: int = 1000
