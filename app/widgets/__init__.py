"""The main window's parts; each takes the search service through ``set_service`` and owns no engine logic."""
