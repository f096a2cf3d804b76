"""The library: one user's folders, files and annotations.

The catalog (SQLite: roots, media, captions, pairs, models, embeddings), incremental indexing (``indexer``), the
caption-folder dataset format (``captionfolder``), annotation snapshots written before anything deletes them
(``snapshots``) and browsing without a query (``browse``). Imports ``engine.features`` and below.
"""
