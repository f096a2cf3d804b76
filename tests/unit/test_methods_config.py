"""Registry and typed configs of trainer.methods: paper defaults, validation with named fields, JSON."""

from __future__ import annotations

import json

import pytest

from trainer.methods import (
    ConfigError,
    build_config,
    build_loss,
    build_model,
    config_from_dict,
    config_from_json,
    get_method,
    list_methods,
)
from trainer.methods.registry import PRESETS, MethodSpec, register_method

METHODS = ["vse", "pvse", "pcme", "a3vse", "twobranch-embed", "twobranch-sim", "instance"]


def test_every_method_is_registered_with_matching_classes() -> None:
    assert list_methods() == METHODS
    for method in METHODS:
        spec = get_method(method)
        config = build_config(method, preset="test")
        assert config.method == method and isinstance(config, spec.config_cls)
        assert type(build_model(config)) is spec.model_cls
        assert type(build_loss(config)) is spec.criterion_cls


def test_defaults_are_the_papers_hyper_parameters() -> None:
    pvse = build_config("pvse")
    assert (pvse.num_embeds, pvse.embed_dim, pvse.margin, pvse.div_weight, pvse.mmd_weight) == (
        3, 1024, 0.1, 0.1, 0.01)
    pcme = build_config("pcme")
    assert (pcme.num_samples, pcme.embed_dim, pcme.kl_weight) == (7, 1024, 1e-5)
    a3 = build_config("a3vse")
    assert (a3.num_heads, a3.embed_dim, a3.beta, a3.margin_vt, a3.margin_vs, a3.grl_eta) == (
        3, 512, 0.8, 0.2, 0.3, 10.0)
    assert (a3.lambda_vvu, a3.lambda_ts, a3.lambda_vt, a3.lambda_vus, a3.lambda_vs, a3.lambda_vut) == (
        0.2, 0.1, 0.5, 0.5, 0.3, 0.3)
    tb = build_config("twobranch-embed")
    assert (tb.hidden_dim, tb.embed_dim, tb.margin, tb.top_k, tb.dropout) == (2048, 512, 0.1, 50, 0.5)
    assert (tb.lambda_i2t, tb.lambda_t2i, tb.lambda_image_nbr, tb.lambda_text_nbr) == (1.0, 2.0, 0.0, 0.2)
    assert build_config("twobranch-sim").sim_hidden == (512, 256)
    inst = build_config("instance")
    assert (inst.embed_dim, inst.dropout, inst.margin, inst.text_global, inst.text_cnn_length) == (
        2048, 0.75, 1.0, "cnn", 32)
    for method in METHODS:
        config = build_config(method)
        assert (config.image_dim, config.image_regions, config.max_frames) == (1280, 49, 8)


def test_text_word_dim_follows_the_text_encoder_unless_set() -> None:
    assert build_config("pvse").text_word_dim == 50
    assert build_config("pvse", {"text_encoder": "minilm"}).text_word_dim == 384
    assert build_config("pvse", {"text_encoder": "minilm-sentence"}).word_dim == 384
    assert build_config("pvse", {"text_encoder": "minilm", "text_word_dim": 16}).text_word_dim == 16


@pytest.mark.parametrize(("method", "overrides", "field"), [
    ("pvse", {"num_heads": 3}, "num_heads"),  # unknown field
    ("pvse", {"num_embeds": "3"}, "num_embeds"),  # wrong type
    ("pvse", {"num_embeds": 2.5}, "num_embeds"),
    ("pvse", {"num_embeds": True}, "num_embeds"),
    ("pvse", {"num_embeds": 0}, "num_embeds"),  # out of range
    ("pvse", {"margin": -0.1}, "margin"),
    ("pvse", {"margin": float("nan")}, "margin"),
    ("pvse", {"hardest_negative": 1}, "hardest_negative"),
    ("pvse", {"text_encoder": "bert"}, "text_encoder"),
    ("pvse", {"embed_dim": 7}, "embed_dim"),  # the bi-GRUs split it in two
    ("pcme", {"match_scale_init": 0.0}, "match_scale_init"),
    ("a3vse", {"beta": 1.5}, "beta"),
    ("a3vse", {"text_encoder": "minilm-sentence"}, "text_encoder"),
    ("twobranch-embed", {"dropout": 1.2}, "dropout"),
    ("twobranch-sim", {"sim_hidden": [4, "a"]}, "sim_hidden"),
    ("twobranch-sim", {"sim_hidden": [4, 0]}, "sim_hidden"),
    ("instance", {"text_cnn_blocks": [1, 1, 1]}, "text_cnn_blocks"),
    ("instance", {"hidden_dim": 9, "text_global": "bigru"}, "hidden_dim"),
    ("instance", {"num_classes": 0}, "num_classes"),
    ("vse", {"method": "pvse"}, "method"),
])
def test_bad_values_raise_config_errors_naming_the_field(method: str, overrides: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=f"^{field}:"):
        build_config(method, overrides)


def test_unknown_method_and_preset_are_rejected() -> None:
    with pytest.raises(ConfigError, match="^method:"):
        build_config("clip")
    with pytest.raises(ConfigError, match="^preset:"):
        build_config("vse", preset="huge")
    assert PRESETS == ("paper", "test")


def test_overrides_apply_over_the_test_preset() -> None:
    config = build_config("pvse", {"num_embeds": 5}, preset="test")
    assert (config.num_embeds, config.embed_dim, config.image_dim) == (5, 8, 12)


def test_lists_become_tuples_and_ints_become_floats() -> None:
    config = build_config("twobranch-sim", {"sim_hidden": [8, 4], "dropout": 0})
    assert config.sim_hidden == (8, 4) and isinstance(config.dropout, float)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("preset", ["paper", "test"])
def test_configs_round_trip_through_json(method: str, preset: str) -> None:
    config = build_config(method, preset=preset)
    text = config.to_json()
    assert json.loads(text)["method"] == method
    assert config_from_json(text) == config
    assert config_from_dict(config.to_dict()) == config


def test_serialised_configs_are_validated() -> None:
    with pytest.raises(ConfigError, match="^method:"):
        config_from_dict({"margin": 0.1})
    with pytest.raises(ConfigError, match="^colour:"):
        config_from_dict({"method": "vse", "colour": "blue"})
    with pytest.raises(ConfigError, match="^margin:"):
        config_from_json('{"method": "vse", "margin": "wide"}')
    with pytest.raises(ConfigError, match="JSON"):
        config_from_json("{not json")


def test_configs_are_immutable() -> None:
    config = build_config("vse")
    with pytest.raises(AttributeError):
        config.margin = 0.5  # type: ignore[misc]


def test_registering_a_clashing_method_is_refused() -> None:
    spec = get_method("vse")
    with pytest.raises(ConfigError, match="already registered"):
        register_method(spec)
    with pytest.raises(ConfigError, match="does not match"):
        register_method(MethodSpec("vse2", spec.config_cls, spec.model_cls, spec.criterion_cls, ""))
