"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A read of the run store for one of the served-model routes (`http.lessons`, `http.shadows`): a 503 that says so when
the store is off, and one that says to retry when it cannot be read (the driver's error in the log, not the answer).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from ..errors import Overloaded
from ..service.chat import ChatService

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

logger = logging.getLogger("adapter_critic")
_T = TypeVar("_T")


async def read_store(chat: ChatService, what: str, read: Callable[[AsyncEngine], Awaitable[_T]]) -> _T:
    """`read` the chat service's run store for `what` (`"Lessons"`, `"Shadow evaluations"`)."""
    store = chat.store
    if store is None:
        raise Overloaded(f"{what} are kept in the run store, which is off.", code="store_unavailable")
    try:
        return await read(store.database.engine)
    except Exception as exc:  # the database driver's own errors
        logger.warning("%s could not be read: %s: %s", what, type(exc).__name__, exc)
        raise Overloaded("The run store cannot be read right now; retry later.", code="store_unavailable") from None
