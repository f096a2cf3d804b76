"""A3VSE eq. 1 (Huang et al., §3.3): the K-head context-aware attention against a loop-by-loop reference.

The reference follows the reading written in ``trainer/methods/a3vse.py``: per head k the context vector is
``c_k = mean_i tanh(Q_k v_i)`` over the valid entities, the score of entity i is
``a_ik = tanh(c_k . tanh(P_k v_i) / sqrt(K'))``, the weights are ``softmax_i(lambda * a_ik)`` over the valid
entities and the attended vector is ``sum_i alpha_ik v_i``.
"""

from __future__ import annotations

import math

import pytest
import torch

from trainer.methods.a3vse import ContextAttention

torch.set_num_threads(1)


def ref_context_attention(x: torch.Tensor, mask: torch.Tensor | None, p: torch.Tensor, q: torch.Tensor,
                          heads: int, temperature: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 1 one batch row, one head, one entity at a time; ``p``/``q`` are (heads * K', H) weights."""
    batch, n, dim = x.shape
    cdim = p.shape[0] // heads
    attn = torch.zeros(batch, heads, n, dtype=torch.float64)
    out = torch.zeros(batch, heads, dim, dtype=torch.float64)
    for b in range(batch):
        valid = [i for i in range(n) if mask is None or float(mask[b, i]) > 0]
        for k in range(heads):
            p_k, q_k = p[k * cdim:(k + 1) * cdim].double(), q[k * cdim:(k + 1) * cdim].double()
            context = [0.0] * cdim
            for i in valid:
                projected = q_k @ x[b, i].double()
                for c in range(cdim):
                    context[c] += math.tanh(float(projected[c])) / len(valid)
            scores = {}
            for i in valid:
                projected = p_k @ x[b, i].double()
                dot = sum(context[c] * math.tanh(float(projected[c])) for c in range(cdim))
                scores[i] = math.tanh(dot / math.sqrt(cdim))
            top = max(temperature * s for s in scores.values())
            exps = {i: math.exp(temperature * s - top) for i, s in scores.items()}
            norm = sum(exps.values())
            for i in valid:
                attn[b, k, i] = exps[i] / norm
                out[b, k] += attn[b, k, i] * x[b, i].double()
    return attn, out


@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("heads,context_dim", [(1, 4), (3, 9)])
def test_context_attention_matches_eq1_reference(masked: bool, heads: int, context_dim: int) -> None:
    torch.manual_seed(heads * 10 + context_dim)
    dim, temperature = 5, 3.0
    module = ContextAttention(dim, context_dim, heads, temperature)
    with torch.no_grad():  # O(1) weights so both tanh are in their non-linear range and the scale matters
        module.p.weight.copy_(torch.randn_like(module.p.weight))
        module.q.weight.copy_(torch.randn_like(module.q.weight))
    x = torch.randn(2, 4, dim)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]]) if masked else None
    with torch.no_grad():
        attn, attended = module(x, mask)
    want_attn, want_out = ref_context_attention(x, mask, module.p.weight.detach(),
                                                 module.q.weight.detach(), heads, temperature)
    assert attn.shape == (2, heads, 4) and attended.shape == (2, heads, dim)
    assert torch.allclose(attn.double(), want_attn, rtol=1e-5, atol=1e-6)
    assert torch.allclose(attended.double(), want_out, rtol=1e-5, atol=1e-6)
    if masked:
        assert float(attn[0, :, 3].abs().max()) == 0.0 and float(attn[1, :, 2:].abs().max()) == 0.0


def test_context_attention_maps_are_not_uniform() -> None:
    """Guards the reference test above against a degenerate setting where every variant gives the mean."""
    torch.manual_seed(0)
    module = ContextAttention(5, 4, 2, 3.0)
    with torch.no_grad():
        module.p.weight.copy_(torch.randn_like(module.p.weight))
        module.q.weight.copy_(torch.randn_like(module.q.weight))
    with torch.no_grad():
        attn, _ = module(torch.randn(2, 4, 5), None)
    assert float((attn - 0.25).abs().max()) > 0.05
