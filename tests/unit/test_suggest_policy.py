"""Which policy "What to annotate next" applies, so its heading can say why its order (issue #31)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from engine.loop.suggest import resolve_policy


def trained(probabilistic: bool, heads: int) -> SimpleNamespace:
    return SimpleNamespace(runner=SimpleNamespace(probabilistic=probabilistic, num_embeddings=heads))


def test_auto_resolves_against_the_active_model() -> None:
    assert resolve_policy(None) == "random"  # the zero-shot ranking
    assert resolve_policy(trained(True, 1)) == "uncertainty"  # PCME
    assert resolve_policy(trained(False, 4)) == "disagreement"  # PVSE, K = 4
    assert resolve_policy(trained(False, 1)) == "random"  # VSE: nothing to rank by
    assert resolve_policy(trained(True, 1), "random") == "random"  # an explicit policy is itself
    with pytest.raises(ValueError, match="telepathy"):
        resolve_policy(None, "telepathy")
