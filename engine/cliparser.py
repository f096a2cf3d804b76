"""The ``polyseek`` command line's arguments: every command with its options (:func:`command_parser`), as
:func:`engine.cli.main` reads them; ``train`` and ``export`` are only named here (the trainer process parses
them)."""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.loop.defaults import DEFAULT_HOLDOUT, DEFAULT_METHOD

TRAINER_COMMANDS = ("train", "export")


def command_parser() -> argparse.ArgumentParser:
    """``polyseek``'s commands and their options (the trainer's commands are forwarded, so only named here)."""
    parser = argparse.ArgumentParser(prog="polyseek", description="Search your media by meaning.")
    parser.add_argument("--version", action="version", version=f"polyseek {_version()}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress details to stderr")
    sub = parser.add_subparsers(dest="command")
    p = sub.add_parser("index", help="index folders (or files) into a library")
    p.add_argument("paths", nargs="+", type=Path)
    _common(p)
    p = sub.add_parser("search", help="search a library with a sentence or a media file")
    p.add_argument("text", nargs="?", help="the sentence to search for")
    p.add_argument("--media", type=Path, help="search by example: an image, GIF or video file")
    p.add_argument("--queries", type=Path, metavar="FILE",
                   help="answer every sentence of FILE (one a line, blank lines skipped) in one run; with --json, "
                        "one JSON line per query")
    p.add_argument("--top", type=int, default=10)
    _common(p)
    p = sub.add_parser("evaluate", help="retrieval metrics of a model, or of a library's search, on a caption folder")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="'zero-shot' or a trained model directory: the model alone")
    which.add_argument("--library", help="a library whose search (every kind of evidence, the user's words "
                       "included) ranks its whole content for the folder's captions; the folder's media must be "
                       "indexed in it")
    p.add_argument("--data", required=True, type=Path)
    p.add_argument("--split", default=None)
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("models", help="the registered models and which one is active; --activate switches it")
    p.add_argument("--library", default="default")
    p.add_argument("--activate", default=None, metavar="NAME",
                   help="make this model the library's active one: a registered name, a model directory "
                        "(registered on the way) or 'zero-shot'")
    p.add_argument("--json", action="store_true")
    _retrain_parser(sub)
    p = sub.add_parser("annotations", help="export or import a library's captions (caption folder or COCO JSON); "
                                           "export is the backup of what you wrote")
    p.add_argument("action", choices=["export", "import"])
    p.add_argument("path", type=Path, help="export: the folder or .json to write; import: a caption folder, COCO "
                                           "captions JSON or an annotation snapshot (<library>/snapshots/*.json)")
    p.add_argument("--library", default="default")
    p.add_argument("--format", default=None, choices=["folder", "coco"],
                   help="export format (default: coco for a .json path, else folder)")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("purge-missing", help="delete the items whose files are missing or offline, with their "
                                             "captions and pairs (a snapshot of every annotation is kept)")
    p.add_argument("--library", default="default")
    p.add_argument("--yes", action="store_true", help="delete; without it, only say what would be deleted")
    p.add_argument("--json", action="store_true")
    p = sub.add_parser("prepare", help="prepare the pretrained ONNX assets (done on first use otherwise)")
    p.add_argument("--force", action="store_true")
    for name in TRAINER_COMMANDS:
        sub.add_parser(name, help=f"{name} (runs the trainer process; see `polyseek {name} --help`)", add_help=False)
    return parser


def _retrain_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("retrain", help="train a new model version on the library's annotations, re-index, and "
                                       "compare R@K on the held-aside annotations")
    p.add_argument("--library", default="default")
    p.add_argument("--method", default=None,
                   help=f"trainer method (default: the active model's, starting from its weights; {DEFAULT_METHOD}, "
                        "which also learns from the un-annotated items, when zero-shot ranking is active)")
    p.add_argument("--from-scratch", action="store_true",
                   help="train from random weights instead of starting from the active model")
    p.add_argument("--always-activate", action="store_true",
                   help="activate the new model even when it is worse on the held-aside annotations")
    p.add_argument("--holdout", type=float, default=DEFAULT_HOLDOUT,
                   help=f"fraction of the annotated items kept aside for evaluation (default {DEFAULT_HOLDOUT})")
    p.add_argument("--holdout-seed", type=int, default=0, help="seed of the held-aside choice (keep it fixed)")
    p.add_argument("--epochs", type=int, default=None, help="default: 20 from the active model, 10 from random "
                   "weights (what the training dialog proposes)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field")
    p.add_argument("--preset", default=None, choices=["paper", "test"], help="trainer preset ('test': tiny)")
    p.add_argument("--batch-size", type=int, default=None)
    p.add_argument("--device", default=None, choices=["auto", "cpu", "cuda"])
    p.add_argument("--name", default=None, help="the new model's name (default: <method>-<library>-<time>)")
    p.add_argument("--json", action="store_true",
                   help="stdout: the trainer's JSON progress lines, then one 'result' line with before/after")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--library", default="default", help="library name (default: 'default')")
    p.add_argument("--model", default=None, help="registered model name or model directory")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("polyseek")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"
