"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Opening the run store the `runs` and `replay` commands read: `--store URL`, else the `store.url` of
`--config`, else where the standalone server records by default (a SQLite file in the user's data directory)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..store.settings import OFF, STORE_ENV, default_url
from .errors import CliError
from .options import config_option, load_served

if TYPE_CHECKING:
    from ..store.records import RunQuery, RunSummary
    from ..store.runstore import RunStore

_F = TypeVar("_F", bound=Callable[..., Any])


def store_options(function: _F) -> _F:
    """`--store URL` (default `$ADAPTER_CRITIC_STORE`) and `--config FILE` (for its `store.url`)."""
    option = click.option(
        "--store",
        "store_url",
        envvar=STORE_ENV,
        metavar="URL",
        help=f"sqlite:///path or postgresql://…; default ${STORE_ENV}, the config's store.url, else the server's",
    )
    return config_option(option(function))


def chosen_url(store_url: str | None, config_path: str | None) -> str:
    url = store_url or (load_served(config_path).config.store.url if config_path else None) or default_url()
    if url.strip().lower() == OFF:
        raise CliError(f"the run store is off ({STORE_ENV} or store.url is {OFF!r}); give --store URL")
    return url.strip()


def _require_sqlite_file(url: str) -> None:
    """Reading never creates a store: a SQLite file that is not there is one line, not an empty store."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.exists():
            raise CliError(f"no runs recorded at {path} (no such file); the server records there once it has run")


@contextlib.asynccontextmanager
async def reading(store_url: str | None, config_path: str | None, *, create: bool = False) -> AsyncIterator[RunStore]:
    """The run store to read (`create`: and write, made when it is not there), opened; every way it cannot be
    opened is one line."""
    url = chosen_url(store_url, config_path)
    if not create:
        _require_sqlite_file(url)
    try:
        from ..store import open_store
        from ..store.database import StoreURLError
    except ImportError as exc:
        extra = "postgres" if url.startswith("postgres") else "store"
        raise CliError(
            f"the run store needs the {extra} extra: pip install 'adapter_critic[{extra}]' ({exc})"
        ) from None
    try:
        store = await open_store(url)
    except (StoreURLError, ImportError) as exc:
        raise CliError(str(exc)) from None
    except Exception as exc:  # the database driver's own errors (refused, no such database, not a database…)
        said = str(exc).strip().splitlines()
        raise CliError(f"cannot open the run store {url}: {type(exc).__name__}: {said[0] if said else ''}") from None
    async with store:
        yield store


async def every_run(store: RunStore, query: RunQuery, limit: int | None = None) -> AsyncIterator[RunSummary]:
    """The runs `query` finds, newest first, page after page (at most `limit`)."""
    cursor: str | None = None
    given = 0
    while True:
        page = await store.list_runs(query, limit=1000, cursor=cursor)
        for summary in page.data:
            if limit is not None and given >= limit:
                return
            given += 1
            yield summary
        if not page.next_cursor:
            return
        cursor = page.next_cursor
