"""``python -m app`` starts the desktop application."""

from app.main import main

raise SystemExit(main())
