"""Models of trainer.methods: forward/backward, shapes, attention maps, masking, GRL, building blocks."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from trainer.methods import (
    ImageInput,
    MethodInputError,
    PairBatch,
    TextInput,
    VideoInput,
    build_config,
    build_loss,
    build_model,
    list_methods,
)
from trainer.methods.a3vse import DOMAIN_PAIRS, DomainAdversarialLoss
from trainer.methods.encoders import (
    GradientReversal,
    MaskedRNN,
    grl_gamma,
    masked_softmax,
    place_on_canvas,
    position_shift_offsets,
)
from trainer.methods.pcme import PCMEBranch
from trainer.methods.pvse import PIENet
from trainer.methods.twobranch import balanced_pairs

torch.set_num_threads(1)
ATTENTION_METHODS = ("pvse", "pcme", "a3vse")


def text_input(config, size: int = 4, length: int = 5) -> TextInput:  # noqa: ANN001
    mask = torch.ones(size, length)
    mask[0, 2:] = 0.0
    mask[-1, 4:] = 0.0
    return TextInput(torch.randn(size, length, config.word_dim), mask, torch.randn(size, config.sentence_dim))


def image_input(config, size: int = 4) -> ImageInput:  # noqa: ANN001
    local = torch.randn(size, config.image_regions, config.image_dim)
    return ImageInput(local, torch.randn(size, config.image_dim))


def video_input(config, size: int = 4, length: int = 3) -> VideoInput:  # noqa: ANN001
    mask = torch.ones(size, length)
    mask[1, 1:] = 0.0
    return VideoInput(torch.randn(size, length, config.image_dim), mask)


def make_batch(config, visual, size: int = 4) -> PairBatch:  # noqa: ANN001
    extra = {}
    if config.method == "a3vse":
        extra = {"unlabelled_visual": image_input(config, size), "pseudo_text": text_input(config, size),
                 "progress": 0.3}
    return PairBatch(visual, text_input(config, size), visual_ids=torch.tensor([0, 1, 2, 2])[:size], **extra)


@pytest.mark.parametrize("method", list_methods())
@pytest.mark.parametrize("kind", ["image", "video"])
def test_every_model_trains_one_step(method: str, kind: str) -> None:
    torch.manual_seed(0)
    config = build_config(method, preset="test")
    model, criterion = build_model(config), build_loss(config)
    visual = image_input(config) if kind == "image" else video_input(config)
    batch = make_batch(config, visual)
    terms = criterion(model(batch), batch)
    assert "total" in terms and all(torch.isfinite(v) for v in terms.values())
    terms["total"].backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0
    before = [p.detach().clone() for p in model.parameters()]
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    assert any(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))


TEXT_COMBINATIONS = [(m, t) for m in list_methods() for t in ("glove", "minilm", "minilm-sentence")
                     if not (m == "a3vse" and t == "minilm-sentence")]  # a3vse attends over tokens


@pytest.mark.parametrize(("method", "text_encoder"), TEXT_COMBINATIONS)
def test_encoders_return_unit_embeddings_of_the_declared_shape(method: str, text_encoder: str) -> None:
    torch.manual_seed(1)
    config = build_config(method, {"text_encoder": text_encoder}, preset="test")
    model = build_model(config).eval()
    with torch.no_grad():
        outputs = [model.encode_visual(image_input(config, 3)), model.encode_visual(video_input(config, 3)),
                   model.encode_caption(text_input(config, 3))]
    for out in outputs:
        assert out.emb.shape == (3, model.num_embeds, model.embed_size)
        assert torch.allclose(out.emb.norm(dim=-1), torch.ones(3, model.num_embeds), atol=1e-5)
        assert (out.attn is None) == (model.attention_heads == 0)
        assert (out.logsigma is None) == (not model.probabilistic)
    sims = model.similarity(outputs[2], outputs[0])
    assert sims.shape == (3, 3) and torch.isfinite(sims).all()


@pytest.mark.parametrize("method", ATTENTION_METHODS)
def test_attention_maps_sum_to_one_and_ignore_padding(method: str) -> None:
    torch.manual_seed(2)
    config = build_config(method, preset="test")
    model = build_model(config).eval()
    text, video = text_input(config), video_input(config)
    with torch.no_grad():
        maps = {"image": (model.encode_visual(image_input(config)).attn, None),
                "video": (model.encode_visual(video).attn, video.mask),
                "text": (model.encode_caption(text).attn, text.mask)}
    for name, (attn, mask) in maps.items():
        assert attn is not None and attn.shape[1] == model.attention_heads, name
        assert torch.allclose(attn.sum(-1), torch.ones(attn.shape[:2]), atol=1e-5), name
        if mask is not None:
            assert float(attn[(mask == 0)[:, None, :].expand_as(attn)].abs().sum()) == 0.0, name


@pytest.mark.parametrize("method", list_methods())
def test_padding_does_not_change_an_encoding(method: str) -> None:
    """A caption or clip padded to a longer batch encodes exactly as it does alone."""
    torch.manual_seed(3)
    config = build_config(method, preset="test")
    model = build_model(config).eval()
    text, video = text_input(config, 2, 6), video_input(config, 2, 4)
    with torch.no_grad():
        padded_text = model.encode_caption(text).emb[0]
        alone = TextInput(text.tokens[:1, :2], text.mask[:1, :2], text.sentence[:1])
        padded_video = model.encode_visual(video).emb[1]
        alone_video = VideoInput(video.frames[1:, :1], video.mask[1:, :1])
        assert torch.allclose(padded_text, model.encode_caption(alone).emb[0], atol=1e-5)
        assert torch.allclose(padded_video, model.encode_visual(alone_video).emb[0], atol=1e-5)


@pytest.mark.parametrize("cell", ["gru", "lstm"])
def test_masked_rnn_matches_packed_bidirectional_rnn(cell: str) -> None:
    torch.manual_seed(4)
    rnn = MaskedRNN(3, 4, cell=cell, bidirectional=True)
    reference = {"gru": torch.nn.GRU, "lstm": torch.nn.LSTM}[cell](3, 4, batch_first=True, bidirectional=True)
    with torch.no_grad():  # copy the two directions' weights into one bidirectional RNN
        for name, param in rnn.forward_rnn.named_parameters():
            getattr(reference, name).copy_(param)
        for name, param in rnn.backward_rnn.named_parameters():
            getattr(reference, name + "_reverse").copy_(param)
    x, lengths = torch.randn(3, 5, 3), torch.tensor([5, 2, 3])
    mask = (torch.arange(5)[None, :] < lengths[:, None]).float()
    outputs, finals = rnn(x, mask)
    packed_out, state = reference(pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False))
    want_out, _ = pad_packed_sequence(packed_out, batch_first=True, total_length=5)
    hidden = state[0] if cell == "lstm" else state
    assert torch.allclose(outputs, want_out, atol=1e-5)
    assert torch.allclose(finals, torch.cat([hidden[0], hidden[1]], -1), atol=1e-5)


def test_masked_softmax_zeroes_padding_and_survives_empty_rows() -> None:
    scores, mask = torch.randn(2, 4), torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0]])
    weights = masked_softmax(scores, mask)
    assert torch.allclose(weights[0].sum(), torch.tensor(1.0)) and float(weights[0, 2:].abs().sum()) == 0.0
    assert torch.equal(weights[1], torch.zeros(4))


def test_pie_net_implements_eq_2_to_4() -> None:
    torch.manual_seed(5)
    net = PIENet(local_dim=6, embed_dim=4, heads=2)
    global_feature, local = torch.randn(1, 4), torch.randn(1, 3, 6)
    out = net(global_feature, local)
    w1, w2 = net.attention.w1.weight, net.attention.w2.weight
    assert w1.shape == (3, 6)  # A = D / 2
    alpha = torch.softmax(w2 @ torch.tanh(w1 @ local[0].T), dim=1)  # eq. 2, (K, B)
    upsilon = torch.sigmoid(alpha @ local[0] @ net.fc.weight.T + net.fc.bias)  # eq. 3
    z = F.layer_norm(global_feature + upsilon, (4,), net.norm.weight, net.norm.bias)  # eq. 4
    assert torch.allclose(out.attn[0], alpha, atol=1e-6)
    assert torch.allclose(out.local[0], upsilon, atol=1e-6)
    assert torch.allclose(out.emb[0], F.normalize(z, dim=-1), atol=1e-6)


def test_pcme_heads_follow_fig3() -> None:
    """mu: L2(LayerNorm(global + sigmoid(fc(attended)))); sigma: global + fc(attended), no sigmoid/LN/L2."""
    torch.manual_seed(13)
    global_feature, local = torch.randn(2, 4), torch.randn(2, 3, 6)
    for mean_head in (True, False):
        branch = PCMEBranch(6, 4, heads=1, mean_head=mean_head)
        out, attn = branch(global_feature, local, None)
        attended = (attn @ local)[:, 0]
        residual = attended @ branch.fc.weight.T + branch.fc.bias
        if mean_head:
            normed = F.layer_norm(global_feature + torch.sigmoid(residual), (4,), branch.norm.weight,
                                  branch.norm.bias)
            want = F.normalize(normed, dim=-1)
        else:
            want = global_feature + residual
        assert torch.allclose(out, want, atol=1e-6), mean_head


def test_pvse_similarity_is_the_best_head_pair() -> None:
    torch.manual_seed(6)
    config = build_config("pvse", preset="test")
    model = build_model(config).eval()
    with torch.no_grad():
        q, items = model.encode_caption(text_input(config, 2)), model.encode_visual(image_input(config, 3))
        sims = model.similarity(q, items)
    for i in range(2):
        for j in range(3):
            best = max(float(q.emb[i, p] @ items.emb[j, r]) for p in range(2) for r in range(2))
            assert float(sims[i, j]) == pytest.approx(best, abs=1e-6)


def test_gradient_reversal_flips_and_scales_by_the_schedule() -> None:
    assert grl_gamma(0.0) == 0.0
    assert grl_gamma(1.0, 10.0) == pytest.approx(2 / (1 + math.exp(-10)) - 1)
    assert grl_gamma(0.25, 10.0) == pytest.approx(2 / (1 + math.exp(-2.5)) - 1)
    with pytest.raises(MethodInputError, match="progress"):
        grl_gamma(1.5)
    x, w = torch.randn(3, requires_grad=True), torch.randn(3)
    (GradientReversal(0.7)(x) * w).sum().backward()
    assert torch.allclose(x.grad, -0.7 * w)


def test_a3vse_encoders_receive_the_reversed_discriminator_gradient() -> None:
    torch.manual_seed(7)
    config = build_config("a3vse", {"adversarial_game": "reversal"}, preset="test")
    model = build_model(config)
    batch = make_batch(config, image_input(config))
    batch.progress = 0.4
    out = model(batch)
    gamma = grl_gamma(0.4, config.grl_eta)
    assert model.grl.gamma == pytest.approx(gamma)
    assert {f"domain_{n}_pos" for n in DOMAIN_PAIRS} <= set(out.extras)
    loss = DomainAdversarialLoss()(out.extras["domain_v_t_pos"], out.extras["domain_v_t_neg"])["total"]
    got = torch.autograd.grad(loss, out.text.emb, retain_graph=True)[0]
    plain = out.text.emb.detach()[:, 0].requires_grad_()
    disc = model.discriminators["v_t"]
    direct = DomainAdversarialLoss()(disc(out.visual.emb.detach()[:, 0]).squeeze(-1), disc(plain).squeeze(-1))
    want = torch.autograd.grad(direct["total"], plain, retain_graph=True)[0]
    assert torch.allclose(got[:, 0], -gamma * want, atol=1e-6)
    # the discriminator itself is trained normally (descends its BCE)
    disc_grad = torch.autograd.grad(loss, disc[0].weight)[0]
    direct_grad = torch.autograd.grad(direct["total"], disc[0].weight)[0]
    assert torch.allclose(disc_grad, direct_grad, atol=1e-6)


def test_a3vse_without_unlabelled_data_runs_the_annotated_terms_only() -> None:
    config = build_config("a3vse", preset="test")
    model, criterion = build_model(config), build_loss(config)
    batch = PairBatch(image_input(config), text_input(config))
    terms = criterion(model(batch), batch)
    assert terms["tri_vs"].item() == 0.0 and terms["adv_v_vu"].item() == 0.0
    assert terms["adv_v_t"].item() > 0.0


def test_pcme_samples_follow_the_predicted_gaussian() -> None:
    torch.manual_seed(8)
    config = build_config("pcme", {"num_samples": 4000}, preset="test")
    model = build_model(config)
    batch = make_batch(config, image_input(config, 2), 2)
    out = model(batch)
    samples = out.extras["visual_samples"].detach()
    mu, sigma = out.visual.emb[:, 0].detach(), out.visual.logsigma[:, 0].detach().exp()
    assert samples.shape == (2, 4000, config.embed_dim)
    assert torch.allclose(samples.mean(1), mu, atol=0.15 * float(sigma.max()))
    assert torch.allclose(samples.std(1), sigma, rtol=0.1)
    unc = model.uncertainty(out.visual)
    assert torch.allclose(unc, sigma.log().mean(-1).exp(), rtol=1e-5)
    probs = model.match_probability(out.text, out.visual, num_samples=3)
    assert probs.shape == (2, 2) and bool(((probs >= 0) & (probs <= 1)).all())


def test_twobranch_sim_pairs_are_balanced_and_negatives_do_not_match() -> None:
    torch.manual_seed(9)
    positives = torch.eye(5, dtype=torch.bool)
    positives[0, 1] = positives[1, 0] = True
    rows, cols, labels = balanced_pairs(positives, 2)
    assert int((labels > 0).sum()) == int((labels < 0).sum()) == 10
    assert bool(positives[rows[labels > 0], cols[labels > 0]].all())
    assert not bool(positives[rows[labels < 0], cols[labels < 0]].any())
    rows, cols, labels = balanced_pairs(torch.ones(2, 2, dtype=torch.bool), 1)
    assert bool((labels > 0).all())  # nothing to contrast against: positives only


def test_twobranch_sim_similarity_uses_its_network() -> None:
    torch.manual_seed(10)
    config = build_config("twobranch-sim", preset="test")
    model = build_model(config).eval()
    with torch.no_grad():
        q, items = model.encode_caption(text_input(config, 2)), model.encode_visual(image_input(config, 3))
        sims = model.similarity(q, items)
        want = model.head(q.emb[1, 0] * items.emb[2, 0])
    assert float(sims[1, 2]) == pytest.approx(float(want), abs=1e-6)


def test_instance_model_needs_group_labels_in_range() -> None:
    config = build_config("instance", preset="test")
    model = build_model(config)
    with pytest.raises(MethodInputError, match="visual_ids"):
        model(PairBatch(image_input(config), text_input(config)))
    with pytest.raises(MethodInputError, match="visual_ids"):
        model(PairBatch(image_input(config), text_input(config), visual_ids=torch.tensor([0, 1, 2, 99])))
    out = model(make_batch(config, image_input(config)))
    assert out.extras["visual_logits"].shape == (4, config.num_classes)
    assert model.classifier.weight.shape == (config.num_classes, config.embed_dim)
    assert model.classifier.bias is None  # W_share, one classifier for both modalities (eq. 5, 7)


def test_text_cnn_position_shift_moves_words_within_the_canvas() -> None:
    torch.manual_seed(11)
    tokens, mask = torch.randn(3, 4, 2), torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    offsets = torch.stack([position_shift_offsets(mask, 6) for _ in range(200)])
    assert int(offsets.min()) == 0
    assert offsets.max(0).values.tolist() == [2, 4, 5]  # canvas minus length, every value reachable
    canvas = place_on_canvas(tokens, mask, 6, torch.tensor([2, 1, 5]))
    assert torch.equal(canvas[0, 2:6], tokens[0]) and float(canvas[0, :2].abs().sum()) == 0.0
    assert torch.equal(canvas[1, 1:3], tokens[1, :2]) and float(canvas[1, 3:].abs().sum()) == 0.0
    assert torch.equal(canvas[2, 5], tokens[2, 0])
    clipped = place_on_canvas(torch.randn(1, 9, 2), torch.ones(1, 9), 6)
    assert clipped.shape == (1, 6, 2)  # long sentences lose their final words


def test_text_cnn_is_deterministic_in_eval_and_shifts_in_training() -> None:
    torch.manual_seed(12)
    config = build_config("instance", preset="test")
    model = build_model(config)
    text = text_input(config, 4, 3)
    model.eval()
    with torch.no_grad():
        first, second = model.encode_caption(text).emb, model.encode_caption(text).emb
    assert torch.equal(first, second)
    model.train()
    with torch.no_grad():
        shifted = [model.text_encoder(text.tokens, text.mask, None) for _ in range(5)]
    assert any(not torch.allclose(shifted[0], s) for s in shifted[1:])


@pytest.mark.parametrize(("name", "call"), [
    ("tokens", lambda m, c: m.encode_text(torch.randn(2, 3, c.word_dim + 1), torch.ones(2, 3))),
    ("mask", lambda m, c: m.encode_text(torch.randn(2, 3, c.word_dim), torch.ones(2, 4))),
    ("local", lambda m, c: m.encode_image(torch.randn(2, 4, c.image_dim - 1), torch.randn(2, c.image_dim))),
    ("frames", lambda m, c: m.encode_video(torch.randn(2, c.image_dim), torch.ones(2, 1))),
])
def test_wrong_shapes_raise_errors_naming_the_input(name: str, call) -> None:  # noqa: ANN001
    config = build_config("pvse", preset="test")
    with pytest.raises(MethodInputError, match=name):
        call(build_model(config), config)
