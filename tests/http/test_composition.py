"""What one app instance holds is its own: two apps in one process, each configured with a different env var for its
upstream key, mask their own key in what they log and not the other's, and leave nothing behind in the process (a
record logged outside both is masked with neither)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from adapter_critic import create_app
from adapter_critic.upstream.client import Upstream

from ..conftest import asgi_client, chat, make_config

pytestmark = pytest.mark.anyio

FIRST = "first-app-secret-111"
SECOND = "second-app-secret-222"


def logged_for(caplog: pytest.LogCaptureFixture, request_id: str) -> str:
    """Every line the request logged, tracebacks included (as a handler formats them)."""
    formatter = logging.Formatter()
    return "\n".join(formatter.format(r) for r in caplog.records if request_id in r.getMessage())


async def test_two_apps_in_one_process_mask_only_their_own_secrets(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("FIRST_KEY", FIRST)
    monkeypatch.setenv("SECOND_KEY", SECOND)

    async def explode(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(f"boom holding {FIRST} and {SECOND}")

    monkeypatch.setattr(Upstream, "complete", explode)  # logged with its traceback by whichever app called it
    first = create_app(make_config(default_api_key_env="FIRST_KEY"))
    second = create_app(make_config(default_api_key_env="SECOND_KEY"))
    caplog.set_level(logging.ERROR, logger="adapter_critic")
    async with asgi_client(first) as first_client, asgi_client(second) as second_client:
        asked = [
            await first_client.post("/chat/completions", json=chat("m-direct"), headers={"x-request-id": "first-1"}),
            await second_client.post("/chat/completions", json=chat("m-direct"), headers={"x-request-id": "second-1"}),
        ]
    assert [response.status_code for response in asked] == [500, 500]

    first_logged, second_logged = logged_for(caplog, "first-1"), logged_for(caplog, "second-1")
    assert "boom holding *** and " + SECOND in first_logged and FIRST not in first_logged
    assert "boom holding " + FIRST + " and ***" in second_logged and SECOND not in second_logged

    caplog.clear()
    logging.getLogger("adapter_critic").error("outside both: %s %s", FIRST, SECOND)
    assert caplog.records[0].getMessage() == f"outside both: {FIRST} {SECOND}"
