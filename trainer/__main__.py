"""``python -m trainer COMMAND``: the trainer process (prepare, train, evaluate, export)."""

from __future__ import annotations

import sys

from trainer.cli import main

if __name__ == "__main__":
    sys.exit(main())
