"""The library loop: annotations -> training set -> trainer -> a new model compared with the active one.

The training set with its fixed held-aside split (``trainingset``), annotation import and export
(``annotations``), evaluation (``evaluate``), the figure a model is shown by (``figures``), what to annotate next
(``active``, ``suggest``), two models measured the same way (``compare``) and the activation rule (``gate``), the
trainer process (``trainerprocess``) and the retraining job (``retrain``). It sits above the search service and
takes its parts directly (:class:`engine.service.SearchService`: catalog, feature store, encoders,
``switch_model``); :mod:`engine.workspace` offers its jobs to the CLI and the GUI.
"""
