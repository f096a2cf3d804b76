"""Polyseek's PySide6 desktop application: windows and widgets over ``engine.workspace.Workspace``."""
import app.qtcompat  # noqa: F401  (works around a PySide6 6.12.0 refcount bug before any signal is emitted)
