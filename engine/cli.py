"""The ``polyseek`` command line (README.md, "Command line").

``polyseek`` alone starts the GUI. ``train``, ``evaluate`` of a trained model and ``export`` run the trainer in its
own process (``python -m trainer``), so torch is only ever imported there. Errors are one line on stderr and a
non-zero exit; ``--json`` output is documented in the README.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from engine.cliparser import TRAINER_COMMANDS, command_parser
from engine.progressbar import ProgressBar, drain

if TYPE_CHECKING:
    from engine.types import SearchHit

log = logging.getLogger("polyseek")

GUI_OPTIONS = ("--library", "--no-demo", "--debug", "--quit-after")


class CliError(Exception):
    """A user error: printed as one line, exit status 2."""


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # a non-UTF-8 file name must never end a command
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    if not argv or argv[0].split("=")[0] in GUI_OPTIONS:
        # the GUI lives in the app package, which the engine never imports: become that process
        if os.name == "nt":  # Windows has no exec (execv starts a new process and returns to the shell at once)
            return subprocess.call([sys.executable, "-m", "app", *argv])
        os.execv(sys.executable, [sys.executable, "-m", "app", *argv])
    trained_evaluate = argv[0] == "evaluate" and not _is_zero_shot(argv) and not _names_library(argv)
    if (argv[0] == "train" or trained_evaluate) and not {"-h", "--help"} & set(argv):
        try:
            _prepare()  # the trainer needs the prepared assets too: first use prepares them here
        except CliError as error:
            print(f"polyseek: error: {error}", file=sys.stderr)
            return 2
    if ((argv[0] == "train" or trained_evaluate) and sys.stderr.isatty()
            and not {"--json", "--json-progress", "-h", "--help"} & set(argv)):
        from engine.trainerrun import run_with_progress

        return run_with_progress(argv)  # the trainer's events drawn as a progress bar
    if argv[0] in TRAINER_COMMANDS or trained_evaluate:
        from engine.trainercontract.command import trainer_command

        return subprocess.call(trainer_command(*argv))
    args = command_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    try:
        return _dispatch(args)
    except CliError as error:
        print(f"polyseek: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("polyseek: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # one clear line, details in the log with -v
        log.debug("failed", exc_info=True)
        print(f"polyseek: error: {error}", file=sys.stderr)
        if _disk_full(error):
            print("polyseek: the disk is full: nothing already saved was lost (the catalog is intact and every "
                  "finished step is kept); free some space and run the command again", file=sys.stderr)
        return 1


def _disk_full(error: BaseException | None) -> bool:
    """Whether an error (or one it was raised from) is a full disk (ENOSPC, SQLite's "disk is full")."""
    import errno

    while error is not None:
        if getattr(error, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "disk is full" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def _names_library(argv: list[str]) -> bool:
    return any(arg == "--library" or arg.startswith("--library=") for arg in argv)


def _is_zero_shot(argv: list[str]) -> bool:
    from engine.types import ZERO_SHOT

    for i, arg in enumerate(argv):
        if arg == "--model" and i + 1 < len(argv):
            return argv[i + 1] == ZERO_SHOT
        if arg.startswith("--model="):
            return arg.split("=", 1)[1] == ZERO_SHOT
    return False


def _prepare(force: bool = False) -> None:
    """The pretrained assets, prepared in the trainer process with a progress bar when missing (or forced)."""
    from engine.features.assets import ensure_assets
    from engine.features.backbone import AssetsMissing
    from engine.features.wordtable import ensure_table, own_assets
    from engine.search.starter import starter_graphs_ready

    try:
        drain(ensure_assets(force=force, also_ready=starter_graphs_ready))
        if own_assets() is not None:  # the zero-shot query words' table (once; under a minute)
            drain(ensure_table(own_assets()))
    except AssetsMissing as error:
        raise CliError(str(error)) from None


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "prepare":
        from engine import paths

        _prepare(args.force)
        from engine.features.wordtable import ensure_table

        drain(ensure_table(paths.assets_dir()))  # asked for: also where the environment names the folder
        print(f"assets ready in {paths.assets_dir()}")
        return 0
    if args.command == "index":
        return _index(args)
    if args.command == "search":
        return _search(args)
    if args.command == "models":
        return _models(args)
    if args.command == "evaluate":
        return _evaluate_library(args) if args.library else _evaluate(args)
    if args.command == "retrain":
        return _retrain(args)
    if args.command == "annotations":
        return _annotations(args)
    if args.command == "purge-missing":
        return _purge_missing(args)
    raise CliError(f"unknown command {args.command!r}")


def _open(library: str):
    from engine.workspace import Workspace

    _prepare()  # first use of a new home: prepared here, with progress, instead of an error
    return Workspace.open(library)


def _index(args: argparse.Namespace) -> int:
    service = _open(args.library)
    try:
        if args.model:
            _search_with_model(service, args.model)  # its embeddings are computed too; the active model stays as it is
        try:
            drain(service.library.index([p.resolve() for p in args.paths]), quiet=args.json)
        except FileNotFoundError as error:  # not a library folder either (a known one that is gone is offline)
            raise CliError(str(error)) from None
        library = service.library
        counts, failures, offline = library.counts(), library.failures(), library.offline_roots()
    finally:
        service.close()
    if args.json:
        print(json.dumps({"library": args.library, "counts": counts,
                          "failures": [{"path": p, "error": e} for p, e in failures],
                          "offline": [{"path": str(o.path), "reason": o.reason, "items": o.items}
                                      for o in offline]}, indent=2))
    else:
        kinds = ", ".join(f"{counts.get(k, 0)} {k}s" for k in ("image", "animation", "video"))
        print(f"{args.library}: {kinds}; {counts.get('failed', 0)} failed; {counts.get('missing', 0)} missing "
              "or offline (kept with their annotations)")
        for path, error in failures[:20]:
            print(f"  failed: {path}: {error}")
        for o in offline:
            print(f"  offline, skipped: {o.path}: {o.reason} ({o.items} items kept)")
    return 0


def _purge_missing(args: argparse.Namespace) -> int:
    service = _open(args.library)
    try:
        items, captions, pairs = service.library.missing_summary()
        snapshot = None
        if args.yes and items:
            items, captions, pairs, snapshot = service.library.purge_missing()
    finally:
        service.close()
    purged = bool(args.yes and items)
    if args.json:
        print(json.dumps({"library": args.library, "missing_items": items, "captions": captions, "pairs": pairs,
                          "purged": purged, "snapshot": str(snapshot) if snapshot else None}))
    elif not items:
        print(f"{args.library}: no missing or offline items")
    elif purged:
        print(f"{args.library}: deleted {items} missing items with {captions} captions and {pairs} pairs")
        if snapshot:
            print(f"  their annotations are saved in {snapshot} (`polyseek annotations import` restores them)")
    else:
        print(f"{args.library}: {items} missing or offline items with {captions} captions and {pairs} pairs "
              "would be deleted; run again with --yes to delete them")
    return 0


def _search(args: argparse.Namespace) -> int:
    if args.queries is not None and (args.text or args.media):
        raise CliError("--queries FILE searches for the file's sentences: give it without a sentence or --media")
    if args.queries is None and bool(args.text) == bool(args.media):
        raise CliError("give either a sentence or --media FILE (or --queries FILE)")
    if args.top < 1:
        raise CliError("--top must be at least 1")
    if args.media is not None and not args.media.is_file():
        raise CliError(f"no such file: {args.media}")
    queries = _queries(args.queries) if args.queries is not None else None
    service = _open(args.library)
    try:
        if args.model:
            _search_with_model(service, args.model)  # this search only: the library's active model stays as it is
        if queries is not None:
            for query in queries:  # one open library answers them all; each query's answer as soon as it is known
                _print_hits(service.search.text(query, top=args.top), args.json, query)
        elif args.media:
            _print_hits(service.search.example(args.media, top=args.top), args.json)
        else:
            _print_hits(service.search.text(args.text, top=args.top), args.json)
    finally:
        service.close()
    return 0


def _queries(path: Path) -> list[str]:
    """The sentences of a ``--queries`` file: one a line, blank lines skipped."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliError(f"no such file: {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise CliError(f"cannot read {path}: {error}") from None
    return [line.strip() for line in text.splitlines() if line.strip()]


def _hit_json(hit: SearchHit) -> dict:
    """A hit as ``search --json`` writes it (README.md, "--json output")."""
    # "captions": what people wrote (the user's and imported captions); "guess": the model's own words, kept apart
    # so that a script never reads the model's guess as something a person wrote (issue #44)
    return {"path": hit.path, "score": round(hit.score, 4), "kind": str(hit.kind),
            "captions": list(hit.captions), "guess": hit.guess,
            "match_probability": hit.match_probability, "probability": hit.match_probability, "match": hit.match,
            "uncertainty": hit.uncertainty}


def _print_hits(hits: list[SearchHit], as_json: bool, query: str | None = None) -> None:
    """A search's hits on stdout: JSON (one line ``{"query", "hits"}`` when answering a ``--queries`` file), or a
    ranked list with each hit's match in words and its probability."""
    from engine.types import percent

    if as_json:
        found = [_hit_json(h) for h in hits]
        print(json.dumps(found, indent=2) if query is None else json.dumps({"query": query, "hits": found}),
              flush=True)
        return
    if query is not None:
        print(f"“{query}”")
    for rank, h in enumerate(hits, 1):
        p = h.match_probability
        match = "" if p is None else f"{h.match + ' ' if h.match else ''}{percent(p)}".ljust(12)
        print(f"{rank:3d}. {h.score:7.3f}  {match}{h.path}")


def _search_with_model(service, name: str) -> None:
    try:
        service.models.use_here(name)
    except LookupError as error:
        raise CliError(str(error)) from None


def _models(args: argparse.Namespace) -> int:
    service = _open(args.library)
    try:
        if args.activate is not None:
            try:
                service.models.activate(args.activate)
            except LookupError as error:
                raise CliError(str(error)) from None
        models = service.models.all()
    finally:
        service.close()
    if args.json:
        print(json.dumps([{"name": m.name, "method": m.method, "path": str(m.path) if m.path else None,
                           "active": m.active, "metrics": m.metrics} for m in models], indent=2))
    else:
        for m in models:
            print(f"{'*' if m.active else ' '} {m.name:24s} {m.method}")
    return 0


def _evaluate_library(args: argparse.Namespace) -> int:
    """R@K of a library's own search (:func:`engine.search.ranking.rank_sentence`, every kind of evidence) for a
    caption folder's captions, each ranking the library's whole content: the folder's items against each other,
    and every other item of the library as a distractor (as the user searches it)."""
    import numpy as np

    from engine.library.captionfolder import CaptionFolderError, load_caption_folder
    from engine.trainercontract.metrics import report_lines, retrieval_report, rounded

    try:
        data = load_caption_folder(args.data)
    except (CaptionFolderError, OSError) as error:
        raise CliError(f"{args.data} is not a caption folder: {error}") from None
    if args.split:
        if args.split not in data.splits():
            raise CliError(f"split {args.split!r} is not in {args.data} (splits: {', '.join(data.splits())})")
        data = data.split(args.split)
    from engine.workspace import Workspace

    service = Workspace.open(args.library)
    try:
        by_path = {str(Path(m.path).resolve()): m.id for m in service.state.catalog.iter_media()}
        media = [by_path.get(str(Path(item.path).resolve())) for item in data.items]
        present = [i for i, m in enumerate(media) if m is not None]
        if not present:
            raise CliError(f"none of {args.data}'s media is in library {args.library!r}: index them first "
                           f"(polyseek index {args.data} --library {args.library})")
        position = {i: k for k, i in enumerate(present)}
        captions = [(position[i], text) for i, text in data.captions if i in position]
        mine = np.array([media[i] for i in present], np.int64)
        columns, ids = [], None
        for _, text in captions:
            ranked = service.search.rank_text(text)
            ids, ranking = ranked[0], ranked[1]
            column = np.full(len(ids), -np.inf, np.float32)
            column[ranking.rows] = ranking.total
            columns.append(column)
        scores = np.stack(columns, axis=1)
        row = {int(m): r for r, m in enumerate(ids.tolist())}
        own = np.array([row[int(m)] for m in mine])
        others = np.setdiff1d(np.arange(len(ids)), own)
        report = retrieval_report(scores[own], np.array([k for k, _ in captions]), distractors=scores[others])
    finally:
        service.close()
    report.update(library=args.library, split=args.split or "all", n_not_in_library=len(media) - len(present))
    if args.json:
        print(json.dumps(rounded(report), indent=2))
    else:
        print("\n".join(report_lines(report)))
        print(f"ranked among the library's {len(ids):,} items ({report['n_distractors']:,} of them not in the folder)")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from engine import paths
    from engine.features.encoders import Encoders
    from engine.features.featurestore import FeatureStore
    from engine.loop.evaluate import evaluate_zero_shot
    from engine.trainercontract.metrics import report_lines, rounded

    if not (args.data / "captions.tsv").is_file():
        raise CliError(f"{args.data} is not a caption folder (no captions.tsv)")
    _prepare()
    paths.home().mkdir(parents=True, exist_ok=True)
    store = FeatureStore(paths.home() / "features.sqlite")
    bar = ProgressBar(quiet=args.json)
    try:
        report = evaluate_zero_shot(args.data, args.split, store, Encoders(), progress=bar)
    finally:
        bar.close()
        store.close()
    if args.json:
        print(json.dumps(rounded(report.as_dict()), indent=2))
    else:
        print("\n".join(report_lines(report)))
    return 0


def _retrain(args: argparse.Namespace) -> int:
    from engine.loop.trainingset import check_holdout
    from engine.trainercontract import events
    from engine.workspace import RetrainOptions

    try:
        check_holdout(args.holdout)
    except ValueError as error:
        raise CliError(f"--{error}") from None  # "--holdout: expected a fraction ..."
    if args.epochs is not None and args.epochs < 1:
        raise CliError("--epochs must be at least 1")
    extra = [*(["--preset", args.preset] if args.preset else []),
             *(["--batch-size", str(args.batch_size)] if args.batch_size else []),
             *(["--device", args.device] if args.device else [])]
    options = RetrainOptions(method=args.method, warm_start=not args.from_scratch,
                             always_activate=args.always_activate, holdout=args.holdout, seed=args.holdout_seed,
                             epochs=args.epochs, overrides=tuple(args.set), trainer_args=tuple(extra), name=args.name)
    emit = (lambda event: print(json.dumps(event), flush=True)) if args.json else None
    service = _open(args.library)
    try:
        job = service.models.retrain(options, on_event=(lambda event: emit(events.to_json(event))) if emit else None)
        bar, shown = ProgressBar(quiet=args.json), set()
        try:
            for p in job.run():
                bar(p)
                for warning in job.result.warnings if job.result else []:
                    if warning not in shown:  # "too few annotations" comes before the long part, once
                        shown.add(warning)
                        print(f"polyseek: warning: {warning}", file=sys.stderr)
                        if emit:
                            emit({"event": "warning", "message": warning})
            assert job.result is not None
            for p in service.models.adopt(job.result):  # the rule's choice made active, the library re-indexed
                bar(p)
        finally:
            bar.close()
        result = job.result
    finally:
        service.close()
    assert result is not None
    if args.json:
        print(json.dumps(result.to_json()), flush=True)
    else:
        print("\n".join(result.summary_lines()))
    return 0


def _annotations(args: argparse.Namespace) -> int:
    from engine.library.catalog import snapshots
    from engine.workspace import AnnotationCounts, AnnotationError

    service = _open(args.library)
    skipped: tuple[str, ...] = ()
    pairs = None
    try:
        if args.action == "export":
            fmt = args.format or ("coco" if args.path.suffix.lower() == ".json" else "folder")
            count = service.annotations.export(args.path, fmt)
            skipped = getattr(count, "skipped", ())
        else:
            if args.format is not None:
                raise CliError("--format is for export; import reads either format")
            if not args.path.exists():
                raise CliError(f"no such file or folder: {args.path}")
            if snapshots.is_snapshot_file(args.path):
                restored = service.annotations.restore_snapshot(args.path)
                count, pairs = restored.captions, restored.pairs
            else:
                count = service.annotations.import_file(args.path)
                skipped = getattr(count, "skipped", ())
    except (AnnotationError, snapshots.SnapshotError) as error:
        raise CliError(str(error)) from None
    finally:
        service.close()
    counted = isinstance(count, AnnotationCounts)
    if args.json:
        out = {"library": args.library, "action": args.action, "path": str(args.path), "captions": int(count)}
        if counted:
            out |= count.to_json()
            out["skipped"] = list(skipped)
        if pairs is not None:
            out["pairs"] = pairs
        print(json.dumps(out))
    else:
        verb = "wrote" if args.action == "export" else "imported"
        what = count.summary() if counted else f"{count} captions and {pairs} pairs"
        print(f"{args.library}: {verb} {what} ({args.path})")
        shown = f"{', '.join(skipped[:10])}{' ...' if len(skipped) > 10 else ''}"
        if skipped and args.action == "export":
            print(f"  skipped {len(skipped)} annotated items whose files are missing or offline (a .json export "
                  f"keeps their annotations): {shown}")
        elif skipped:
            print(f"  skipped {len(skipped)} items whose files are not in this library: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
