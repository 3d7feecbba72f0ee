"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A request for more choices (`n`) than its workflow gives: refused naming `n`."""

from __future__ import annotations

import msgspec

from ..core import ChatRequest
from ..errors import RequestError


def refuse_many_choices(request: ChatRequest, mode: str) -> None:
    """A 400 naming `n` when the request asks for more choices than a one-answer workflow gives."""
    raw = request.options.get("n")
    if raw is None:
        return
    try:
        n = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        n = None
    if n is None or n == 1:
        return
    raise RequestError(
        f"`n` = {msgspec.json.encode(n).decode()[:20]}: the {mode} workflow answers with one choice. Leave `n` out "
        "(or 1), or ask a served model in direct mode, which relays every choice.",
        param="n",
    )
