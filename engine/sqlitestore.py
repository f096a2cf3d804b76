"""One SQLite file with the house settings: WAL, busy timeout, schema migrations, a lock and atomic transactions.

The base of :class:`engine.library.catalog.Catalog` and :class:`engine.features.featurestore.FeatureStore`
(and the trainer's caption cache). See the catalog's module docstring for the durability and threading rules.
"""

from __future__ import annotations

import logging
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any

from sqlite_utils import Database

BUSY_TIMEOUT_S = 30.0

_CHUNK = 500  # ids per "IN (...)" query, well under SQLite's bound-parameter limit
_FULL_DISK_BYTES = 1 << 20  # less free space than this next to a failed write: the disk is the cause


class CatalogError(Exception):
    """An operation on one of Polyseek's SQLite files failed (catalog, feature store, text cache: each has its
    own subclass or uses this one); the message names the file and the record. The name is the catalog's, the
    first of them, kept so that every ``except CatalogError`` stays as it was."""


Migration = Callable[[sqlite3.Connection], None]


def _full_disk_note(path: Path, exc: BaseException) -> str:
    """" (the disk is full)" when an error came from a full disk that SQLite reports as a plain I/O error
    (it cannot grow its shared-memory file), so the user reads the cause and the fix."""
    if "disk is full" in str(exc):
        return ""
    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        return ""
    return " (the disk is full: free some space; nothing saved was lost)" if free < _FULL_DISK_BYTES else ""


def _chunks(items: Sequence[Any], size: int = _CHUNK) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _marks(n: int) -> str:
    return ",".join("?" * n)


class SQLiteStore:
    """One SQLite file with the house settings, schema migrations, a lock and atomic transactions.

    Shared by :class:`Catalog` and :class:`engine.features.featurestore.FeatureStore`. ``migrations[v]`` upgrades the
    file from schema version ``v`` to ``v + 1``; ``first_pragmas`` run before anything else (e.g.
    ``auto_vacuum``, which only takes effect on a file without tables).
    """

    error: type[CatalogError] = CatalogError

    def __init__(
        self, path: Path, migrations: Sequence[Migration], first_pragmas: Sequence[str] = ()
    ) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._depth = 0
        self._conn: sqlite3.Connection | None = None
        self._listeners: list[Callable[[], None]] = []
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(
                self.path, timeout=BUSY_TIMEOUT_S, check_same_thread=False, isolation_level=None
            )
            for pragma in first_pragmas:
                self._conn.execute(pragma)
            self._configure(self._conn)
            self.db = Database(self._conn, execute_plugins=False)
            self._migrate(migrations)
        except (sqlite3.Error, OSError) as exc:
            self.close()
            raise self.error(f"cannot open {self.path}: {exc}{_full_disk_note(self.path, exc)}") from exc

    @staticmethod
    def _configure(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_TIMEOUT_S * 1000)}")

    def _migrate(self, migrations: Sequence[Migration]) -> None:
        while True:
            with self.transaction("schema migration") as conn:
                conn.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
                version = self._read_version(conn)
                if version > len(migrations):
                    raise self.error(
                        f"{self.path} has schema v{version}, newer than this app's v{len(migrations)}"
                    )
                if version == len(migrations):
                    return
                migrations[version](conn)
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES ('schema_version', ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                    (str(version + 1),),
                )

    @staticmethod
    def _read_version(conn: sqlite3.Connection) -> int:
        row = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
        return int(row[0]) if row else 0

    @property
    def schema_version(self) -> int:
        """The schema version recorded in the file."""
        with self._lock:
            return self._read_version(self._live())

    def _live(self) -> sqlite3.Connection:
        if self._conn is None:
            raise self.error(f"{self.path} is closed")
        return self._conn

    def _wrap(self, what: str, exc: sqlite3.Error) -> CatalogError:
        return self.error(f"{what} failed in {self.path}: {exc}{_full_disk_note(self.path, exc)}")

    @contextmanager
    def transaction(self, what: str = "write") -> Iterator[sqlite3.Connection]:
        """Run a block as one transaction (a savepoint when nested); any exception rolls all of it back.

        SQLite errors come out as :attr:`error` naming ``what`` and the file.
        """
        with self._lock:
            conn = self._live()
            savepoint = f"sp{self._depth}" if self._depth else None
            try:
                conn.execute(f"SAVEPOINT {savepoint}" if savepoint else "BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._wrap(what, exc) from exc
            self._depth += 1
            try:
                yield conn
            except BaseException as exc:
                self._depth -= 1
                self._rollback(conn, savepoint)
                if isinstance(exc, sqlite3.Error):
                    raise self._wrap(what, exc) from exc
                raise
            self._depth -= 1
            try:
                conn.execute(f"RELEASE {savepoint}" if savepoint else "COMMIT")
            except sqlite3.Error as exc:
                self._rollback(conn, savepoint)
                raise self._wrap(what, exc) from exc
        if savepoint is None:
            self._committed()

    def on_commit(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener()`` after every committed transaction of this connection, on the thread that wrote
        (outside the lock, so it may read the file); returns the function that stops the calls.

        Every write goes through :meth:`transaction`, so a listener hears of every change this process makes:
        what shows the file's content (the GUI's counts and results) can follow it instead of each writer having
        to remember to say so."""
        with self._lock:
            self._listeners.append(listener)

        def stop() -> None:
            with self._lock:
                if listener in self._listeners:
                    self._listeners.remove(listener)
        return stop

    def _committed(self) -> None:
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener()
            except Exception:  # noqa: BLE001 - a listener's failure must never undo or fail the write
                logging.getLogger(__name__).exception("commit listener of %s failed", self.path)

    @staticmethod
    def _rollback(conn: sqlite3.Connection, savepoint: str | None) -> None:
        try:
            if savepoint:
                conn.execute(f"ROLLBACK TO {savepoint}")
                conn.execute(f"RELEASE {savepoint}")
            elif conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass  # the original exception matters more; SQLite already rolled back on a fatal error

    def _read(self, what: str, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            try:
                return self._live().execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise self._wrap(what, exc) from exc

    def _read_in(self, what: str, sql: str, head: Sequence[Any], ids: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Run ``sql`` (with one ``{marks}`` placeholder for an IN list) over ``ids`` in chunks."""
        rows: list[tuple[Any, ...]] = []
        for chunk in _chunks(ids):
            rows += self._read(what, sql.format(marks=_marks(len(chunk))), (*head, *chunk))
        return rows

    def integrity_ok(self) -> bool:
        """True when ``PRAGMA integrity_check`` says ok and no foreign key points nowhere."""
        rows = self._read("integrity check", "PRAGMA integrity_check")
        dangling = self._read("foreign key check", "PRAGMA foreign_key_check")
        return rows == [("ok",)] and not dangling

    def close(self) -> None:
        """Close the connection; later calls raise :attr:`error`."""
        with self._lock:
            if self._conn is not None:
                try:
                    self._conn.execute("PRAGMA optimize")
                except sqlite3.Error:
                    pass  # optimize is advisory; closing must not fail because of it
                self._conn.close()
                self._conn = None

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
