"""The method registry: method id -> config class, model class and loss (criterion) class.

Each method module (``vse.py``, ``pvse.py``, ...) holds its config, model and criterion and lists them in
``METHODS``; this module imports the modules named in ``METHOD_MODULES`` and registers what they list.

``build_config(method, overrides, preset=...)`` makes a validated config (paper defaults, then a preset,
then overrides); ``build_model(config)`` and ``build_loss(config)`` make the matching model and criterion.
The ``test`` preset shrinks every dimension so a model builds and trains in milliseconds on a CPU, like
timm's ``test_*`` models.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

from torch import nn

from trainer.methods.config import CONFIG_CLASSES, ConfigError, MethodConfig, TextGlobalConfig
from trainer.methods.interface import MethodSpec, RetrievalModel

# The modules that hold the methods, in registration order; each lists its MethodSpecs in ``METHODS``.
# A new method is one new module in trainer/methods/ and its name here.
METHOD_MODULES: tuple[str, ...] = ("vse", "pvse", "pcme", "a3vse", "twobranch", "instance")

_REGISTRY: dict[str, MethodSpec] = {}

_TEST_COMMON: dict[str, Any] = {"image_dim": 12, "image_regions": 4, "text_word_dim": 6, "sentence_dim": 5,
                                "embed_dim": 8}
_TEST_TEXT_CNN: dict[str, Any] = {"text_cnn_length": 7, "text_cnn_width": 6, "text_cnn_blocks": [1, 1],
                                  "text_cnn_channels": [8, 12]}
PRESETS: tuple[str, ...] = ("paper", "test")


def register_method(spec: MethodSpec) -> MethodSpec:
    """Add a method; its id must be new and match its config's and model's ``method``."""
    if spec.name in _REGISTRY:
        raise ConfigError(f"method: {spec.name!r} is already registered")
    if spec.config_cls.method != spec.name or spec.model_cls.method != spec.name:
        raise ConfigError(f"method: {spec.name!r} does not match its config or model class")
    _REGISTRY[spec.name] = spec
    CONFIG_CLASSES[spec.name] = spec.config_cls
    return spec


def list_methods() -> list[str]:
    """Registered method ids, in registration order."""
    return list(_REGISTRY)


def get_method(name: str) -> MethodSpec:
    """The spec of a method id; :class:`ConfigError` naming ``method`` if unknown."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ConfigError(f"method: unknown method {name!r}; known: {list_methods()}") from None


def preset_values(method: str, preset: str) -> dict[str, Any]:
    """The field values a preset sets for a method (``paper``: none, the defaults already are the paper's)."""
    spec = get_method(method)
    if preset == "paper":
        return {}
    if preset != "test":
        raise ConfigError(f"preset: unknown preset {preset!r}; known: {list(PRESETS)}")
    values = dict(_TEST_COMMON)
    if issubclass(spec.config_cls, TextGlobalConfig):
        values.update(_TEST_TEXT_CNN)
    values.update(spec.test_preset)
    return values


def build_config(method: str, overrides: dict[str, Any] | None = None, preset: str = "paper") -> MethodConfig:
    """A validated config for ``method``: paper defaults, then ``preset``, then ``overrides``.

    Raises :class:`ConfigError` naming the field for an unknown field, a wrong type or a value out of range.
    """
    spec = get_method(method)
    overrides = dict(overrides or {})
    if "method" in overrides and overrides.pop("method") != method:
        raise ConfigError(f"method: overrides name a different method than {method!r}")
    known = {f.name for f in dataclasses.fields(spec.config_cls)}
    for name in overrides:
        if name not in known:
            raise ConfigError(f"{name}: unknown field for method {method!r}")
    return spec.config_cls(**{**preset_values(method, preset), **overrides})


def build_model(config: MethodConfig) -> RetrievalModel:
    """The model of ``config.method`` built from ``config``."""
    return get_method(config.method).model_cls(config)


def build_loss(config: MethodConfig) -> nn.Module:
    """The criterion of ``config.method``: called as ``criterion(model(batch), batch)`` -> named terms."""
    return get_method(config.method).criterion_cls(config)


for _name in METHOD_MODULES:
    for _spec in importlib.import_module(f"trainer.methods.{_name}").METHODS:
        register_method(_spec)
