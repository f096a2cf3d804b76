"""Polyseek's PySide6 desktop application: windows and widgets over ``engine.service.SearchService``."""
