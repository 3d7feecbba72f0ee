"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The `[store]` table of the config, and which store a server records to.

The env var `ADAPTER_CRITIC_STORE` wins over `store.url`; `"none"` turns recording off. Without either, the
standalone server records to a SQLite file in the user's data directory (`default_url`) and a mounted app or the
middleware records nothing.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

from ..errors import ConfigError

if TYPE_CHECKING:
    from .runstore import RunStore

logger = logging.getLogger("adapter_critic")

STORE_ENV = "ADAPTER_CRITIC_STORE"
OFF = "none"


class StoreConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Where runs are recorded, what of them, and for how long.

    The store itself and the runs API are described in docs/guides/store.md."""

    url: str | None = None
    """`sqlite:///relative.db`, `sqlite:////absolute.db`, `postgresql://user:pass@host/db`, or `"none"` (off). Not
    set: a SQLite file in the user's data directory for the standalone server, off for a mounted app or the
    middleware. The env var `ADAPTER_CRITIC_STORE` wins over it."""
    capture: Literal["full", "metadata"] = "full"
    """`"full"` keeps the messages, stage outputs and answers; `"metadata"` keeps no message text."""
    api: bool = True
    """Serve the runs API (`GET /runs`, `/runs/{id}`, `/runs/{id}/events`), behind the same inbound auth as the
    chat endpoint."""
    max_age_days: Annotated[float, msgspec.Meta(gt=0)] | None = None
    """Retention: older runs are deleted in the background. Not set: kept."""
    max_runs: Annotated[int, msgspec.Meta(gt=0)] | None = None
    """Retention: all but the newest this many runs are deleted in the background. Not set: kept."""
    queue_size: Annotated[int, msgspec.Meta(gt=0)] = 10_000
    """The in-memory queue of records waiting to be written; when it is full, records are dropped and counted."""
    batch_size: Annotated[int, msgspec.Meta(gt=0)] = 2_000  # records: about 670 direct runs
    """How many records one transaction writes at most."""
    prune_interval_seconds: Annotated[float, msgspec.Meta(gt=0)] = 300.0
    """How often retention runs (and once at start-up)."""
    writer: Literal["process", "inline"] = "process"
    """Where a batch's rows are made and written: `"process"`, a writer process of the server's own, off its
    interpreter and its core (docs/guides/store.md#the-writer-process); `"inline"`, on the server's event loop and
    a thread of its. An in-memory SQLite store (`sqlite:///:memory:`) is always written inline: no other process
    can open it."""
    heartbeat_seconds: Annotated[float, msgspec.Meta(gt=0)] = 30.0
    """How often each server says in the store that it is alive, and looks for runs left `running` by servers that
    are gone: those are marked `interrupted`. A server on another host (or in another container) is gone once it has
    not beaten for 4 beats; one on this host as soon as its process has exited."""


def data_dir() -> Path:
    """The user's data directory for adapter_critic (XDG on Linux, Application Support on macOS, LOCALAPPDATA on
    Windows)."""
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return base / "adapter_critic"


def default_url() -> str:
    return f"sqlite:///{data_dir() / 'runs.sqlite3'}"


def store_url(config: StoreConfig, default: str | None) -> str | None:
    """The URL to record to (None: off): the env var, else `store.url`, else `default`."""
    chosen = os.environ.get(STORE_ENV, "").strip() or config.url or default
    if chosen is None or chosen.strip().lower() == OFF:
        return None
    return chosen.strip()


def recording_store(config: StoreConfig, default: str | None, secrets: Callable[[], Sequence[str]]) -> RunStore | None:
    """The store a server records to (not started yet), or None when recording is off.

    A store that was asked for explicitly (env var, `store.url`) and cannot be used is a `ConfigError`; the
    standalone default is given up with a warning instead (the database libraries are the `store` extra)."""
    url = store_url(config, None)
    explicit = url is not None
    if url is None and config.url is None and not os.environ.get(STORE_ENV, "").strip():
        url = store_url(config, default)
    if url is None:
        return None
    try:
        from .database import Database, StoreURLError
        from .runstore import RunStore
    except ImportError as exc:
        extra = "postgres" if url.startswith("postgres") else "store"
        message = f"the run store needs the `{extra}` extra (pip install 'adapter_critic[{extra}]'): {exc}"
        if explicit:
            raise ConfigError(f"store.url: {message}") from None
        logger.warning("not recording runs: %s", message)
        return None
    try:
        database = Database(url)
    except (StoreURLError, ImportError, ValueError) as exc:
        if explicit:
            raise ConfigError(f"store.url: {exc}") from None
        logger.warning("not recording runs: %s", exc)
        return None
    store = RunStore(
        database,
        queue_size=config.queue_size,
        batch_size=config.batch_size,
        max_age_days=config.max_age_days,
        max_runs=config.max_runs,
        prune_interval_seconds=config.prune_interval_seconds,
        heartbeat_seconds=config.heartbeat_seconds,
        secrets=secrets,
        writer=config.writer,
    )
    store.required = explicit
    return store


async def start_recording(store: RunStore, config: StoreConfig) -> bool:
    """Start `store` at a server's start-up and say where runs go (one INFO line). A store that cannot be opened
    stops the start-up when it was asked for (`store.url`, the env var); the standalone default is given up with a
    warning instead, and False says so."""
    try:
        await store.start()
    except Exception as exc:
        reason = f"the run store at {store.where()} could not be opened: {type(exc).__name__}: {exc}"
        if store.required:
            logger.error("%s (store.url, %s)", reason, STORE_ENV)
            raise
        logger.warning("not recording runs: %s", reason)
        await store.aclose()
        return False
    logger.info("recording runs to %s (capture %s)", store.where(), config.capture)
    return True
