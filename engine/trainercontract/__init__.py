"""The contract between the engine and the trainer process, in one room both sides import.

The trainer runs as its own process (torch lives there) and the engine may not import it; the trainer may import
the engine's light modules. So everything the two must agree on is defined here, with the standard library and
numpy only:

- :mod:`~engine.trainercontract.command`: the trainer's command lines (``python -m trainer train ...``,
  ``prepare``, a passed-through ``polyseek train``);
- :mod:`~engine.trainercontract.events`: the ``--json-progress`` events, written by the trainer and read by the
  engine, and what a progress display shows of them;
- :mod:`~engine.trainercontract.runfolder`: what a run leaves in its folder: the file names, the state file's
  format (:class:`~engine.trainercontract.runfolder.TrainerState`), ``metrics.json``
  (:class:`~engine.trainercontract.runfolder.TrainerMetrics`), ``config.json``'s method, and reading a resumable
  checkpoint back; every engine reader of a run folder goes through it;
- :mod:`~engine.trainercontract.exportformat`: the ONNX export folder's manifest;
- :mod:`~engine.trainercontract.metrics`: the retrieval metrics (R@K, ranks, rsum) both sides report, and the
  report typed (:class:`~engine.trainercontract.metrics.RetrievalReport`).
"""
