"""Features: what the pretrained networks make of a file or a sentence, and where it is kept.

The backbone (EfficientNet-Lite0) and the text encoders (MiniLM, GloVe) on ONNX Runtime (``backbone``, ``text``,
``onnx``), the :class:`~engine.features.encoders.Encoders` that open them on first use, the pretrained assets
(``assets``), a media file turned into backbone features plus regional semantics (``extract``, ``regional``), and
the shared feature store keyed by content hash (``featurestore``). Imports only ``engine.media`` and the
foundation modules (``engine.types``, ``progress``, ``paths``, ``files``, ``sqlitestore``).
"""
