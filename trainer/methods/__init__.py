"""Models and losses of the five papers, registered by method id, with typed configs and ONNX export.

Method ids: ``vse`` (global features, VSE++), ``pvse`` (PIE-Net, Song & Soleymani), ``pcme`` (Chun et
al.), ``a3vse`` (Huang et al.), ``twobranch-embed`` and ``twobranch-sim`` (Wang, Li & Lazebnik),
``instance`` (Zheng et al.).

Inputs are cached backbone features, never pixels or words: photos give ``local`` (B, 49, 1280) and
``pooled`` (B, 1280); GIFs/videos give ``frames`` (B, T, 1280) with a (B, T) ``mask``; captions give
token vectors ``tokens`` (B, L, W) (GloVe W=50 or MiniLM W=384) with a (B, L) ``mask`` and, for
``text_encoder='minilm-sentence'``, MiniLM's ``sentence`` vector (B, 384). Masks are 1 on valid
positions, which form a prefix of each row.

Using a method::

    config = build_config("pvse", {"num_embeds": 4})            # paper defaults + overrides, validated
    model, criterion = build_model(config), build_loss(config)
    batch = PairBatch(visual=ImageInput(local, pooled), text=TextInput(tokens, mask),
                      visual_ids=photo_ids, progress=epoch / epochs)
    terms = criterion(model(batch), batch)                       # dict of named tensors + 'total'
    terms["total"].backward()                                    # optimise model.parameters() only

Every model has the same interface (:class:`RetrievalModel`):

- ``encode_image(local, pooled)``, ``encode_video(frames, mask)``, ``encode_text(tokens, mask,
  sentence=None)`` -> :class:`EncoderOutput` with ``emb`` (B, K, D) L2-normalised embeddings (PCME: the
  means), ``attn`` (B, H, R) attention maps summing to 1 over valid inputs (or None), ``logsigma``
  (B, K, D) for PCME (or None), plus training-only ``local`` / ``feature``;
- ``forward(batch: PairBatch) -> PairOutput`` (both encodings plus method-specific ``extras``: PCME
  samples and a, b; A3VSE discriminator logits; instance logits; two-branch pair scores);
- ``similarity(query, items) -> (Q, N)`` retrieval scores, higher is better (PVSE: best of K x K cosines;
  PCME: cosine of the means, ``match_probability`` for the sampled eq. 2; two-branch-sim: its network);
- ``image_inputs`` / ``video_inputs`` / ``text_inputs``, ``num_embeds``, ``embed_size``,
  ``attention_heads``, ``probabilistic`` for exporters and the engine.

All learnable parameters (including PCME's a, b and A3VSE's discriminators) live in the model; criteria
hold none. ``export_model(model, out_dir)`` writes one ONNX graph per encoder plus ``manifest.json``
(see :mod:`trainer.methods.export`). Configs serialise with ``config.to_json()`` /
``config_from_json(text)``. ``build_config(method, preset="test")`` gives tiny dimensions for tests.
"""

from trainer.methods.config import (
    ConfigError,
    MethodConfig,
    config_from_dict,
    config_from_json,
)
from trainer.methods.export import ExportError, export_model, load_manifest
from trainer.methods.interface import (
    EncoderOutput,
    ImageInput,
    MethodInputError,
    MethodSpec,
    PairBatch,
    PairOutput,
    RetrievalModel,
    TextInput,
    VideoInput,
)
from trainer.methods.registry import (
    build_config,
    build_loss,
    build_model,
    get_method,
    list_methods,
    register_method,
)

__all__ = [
    "ConfigError", "EncoderOutput", "ExportError", "ImageInput", "MethodConfig", "MethodInputError",
    "MethodSpec", "PairBatch", "PairOutput", "RetrievalModel", "TextInput", "VideoInput", "build_config",
    "build_loss", "build_model", "config_from_dict", "config_from_json", "export_model", "get_method",
    "list_methods", "load_manifest", "register_method",
]
