"""Command line of the trainer process: ``python -m trainer {prepare,train,evaluate,export}``."""

from __future__ import annotations

import argparse
import logging
import sys


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(prog="polyseek", description="Polyseek trainer process")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="export the pretrained backbone and text encoder to ONNX")
    p.add_argument("--force", action="store_true")
    args, rest = parser.parse_known_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if args.command == "prepare":
        from trainer.prepare import prepare

        root = prepare(force=args.force)
        print(f"assets ready in {root}")
        return 0
    parser.error(f"unknown command {args.command}")
    return 2
