"""`timelimit.time_limit`: a block cut off at its time limit, on asyncio (`asyncio.timeout`) and elsewhere (anyio's
`fail_after`, taken here by making the block believe it is not on asyncio)."""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from adapter_critic import timelimit

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("on_asyncio", [True, False], ids=["asyncio-timeout", "anyio-fail-after"])
async def test_a_block_past_its_limit_is_cancelled_with_a_timeout_error(
    on_asyncio: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timelimit, "on_asyncio", lambda: on_asyncio)
    with pytest.raises(TimeoutError):
        async with timelimit.time_limit(0):
            await anyio.sleep_forever()
    async with timelimit.time_limit(None):  # no limit: the block runs to its end
        await anyio.lowlevel.checkpoint()
