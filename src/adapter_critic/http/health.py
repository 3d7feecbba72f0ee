"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`GET /health?deep=1`: is each configured upstream answering?

Each distinct pair of a `base_url` and the credentials a target sends there (fallbacks included) gets one
`GET {base_url}/models` with a short timeout; the answer reports every configured target with the status and
latency of its pair, so a target with a wrong key on a shared URL reports its own failure. Plain `/health` never
calls an upstream.

The deep check answers 200 whatever it finds, with `"status": "degraded"` when an upstream is not ok: it is a
report for operators, not a liveness probe (taking every instance out of rotation because a shared upstream is
down would turn degraded answers into no answers). Concurrent deep checks share one round of probes.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx

from ..config import Config, Target
from ..core import StageTarget
from ..errors import ServerError
from ..pipeline.resolve import bind_key
from ..redact import redact_userinfo
from ..upstream.client import Upstream
from ..upstream.failures import describe_transport_error

PROBE_SECONDS = 5.0


class DeepHealth:
    """The deep health check of one service; `report()` is the JSON body."""

    def __init__(self, config: Config, upstream: Upstream) -> None:
        self._config = config
        self._upstream = upstream
        self._round: anyio.Event | None = None
        self._last: dict[str, Any] | None = None

    async def report(self) -> dict[str, Any]:
        while self._round is not None:  # a round is running: share its result
            await self._round.wait()
            if self._last is not None:
                return self._last
        self._round = anyio.Event()
        self._last = None
        try:
            self._last = await self._check()
            return self._last
        finally:
            self._round.set()
            self._round = None

    async def _check(self) -> dict[str, Any]:
        places = self._config.places()
        if self._config.passthrough is not None:
            places.append(("passthrough", self._config.passthrough))
        # Each distinct (URL, credentials) pair is probed once: a target with a wrong key on a shared URL fails
        # on its own, while targets that share both share one probe.
        probes: dict[tuple[str, str | None, bool, str], StageTarget] = {}
        pair_of: dict[str, tuple[str, str | None, bool, str]] = {}
        for where, target in places:
            stage_target = self._stage_target(target)
            forwards = stage_target.forward_client_authorization
            pair = (stage_target.base_url, stage_target.key_env, forwards, stage_target.protocol)
            probes.setdefault(pair, stage_target)
            pair_of[where] = pair
        results: dict[tuple[str, str | None, bool, str], dict[str, Any]] = {}

        async def probe(pair: tuple[str, str | None, bool, str], target: StageTarget) -> None:
            results[pair] = await self._probe(target)

        async with anyio.create_task_group() as tg:
            for pair, probed in probes.items():
                tg.start_soon(probe, pair, probed)
        targets = {
            where: {"model": target.model, "base_url": redact_userinfo(target.url), **results[pair_of[where]]}
            for where, target in places
        }
        healthy = all(result["status"] == "ok" for result in results.values())
        return {"status": "ok" if healthy else "degraded", "upstreams_checked": len(results), "targets": targets}

    def _stage_target(self, target: Target) -> StageTarget:
        if target.forward_client_authorization:  # the caller's token, which a health check does not have
            return StageTarget(
                model=target.model, base_url=target.url, forward_client_authorization=True, protocol=target.protocol
            )
        key_env = bind_key(self._config, target.url, target)
        return StageTarget(model=target.model, base_url=target.url, key_env=key_env, protocol=target.protocol)

    async def _probe(self, target: StageTarget) -> dict[str, Any]:
        started = time.perf_counter()
        result: dict[str, Any]
        try:
            status = await self._upstream.probe(target, PROBE_SECONDS)
        except (TimeoutError, httpx.TimeoutException):
            result = {"status": "error", "error": f"no answer within {PROBE_SECONDS} seconds"}
        except httpx.HTTPError as exc:
            said = describe_transport_error(exc, target)  # the project's words, not the transport library's
            detail = said or self._upstream.secrets.redact(f"{type(exc).__name__}: {exc}")
            result = {"status": "error", "error": detail}
        except ServerError as exc:
            result = {"status": "error", "error": exc.message}
        else:
            result = {"status": "ok" if 200 <= status < 300 else "error", "http_status": status}
        result["latency_ms"] = round((time.perf_counter() - started) * 1000, 3)
        return result
