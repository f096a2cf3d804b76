"""The library loop: annotations -> training set -> trainer -> judged new model.

The training set with its fixed held-aside split (``trainingset``), annotation import and export
(``annotations``), evaluation and metrics (``evaluate``, ``metrics``), what to annotate next (``active``,
``suggest``), the activation rule (``judge``), the retraining job (``retrain``) and the shipped starter model
(``starter``). It drives the search service through :class:`~engine.loop.service_api.LoopService` and never
imports ``engine.service``, which sits above it and offers these jobs to the CLI and the GUI.
"""
