"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`GET /health?deep=1`: is each configured upstream answering?

Each distinct pair of a `base_url` and the credentials a target sends there (fallbacks included) gets one
`GET {base_url}/models` with a short timeout; the answer reports every configured target with the status and
latency of its pair, so a target with a wrong key on a shared URL reports its own failure. Plain `/health` never
calls an upstream.

Each target's result also says whether that answer lists the target's model (`listed`). `adapter-critic check
--deep` goes further (`confirm_models`): a target is ok only when its upstream serves its model, listed there or,
when not listed, named in a one-token chat call that is answered (an upstream that lists models under other names,
as Ollama's `llama3` for `llama3:latest`, or lists none). The server's own check makes no such calls: it may be
polled, and a call costs tokens.

The deep check answers 200 whatever it finds, with `"status": "degraded"` when an upstream is not ok: it is a
report for operators, not a liveness probe (taking every instance out of rotation because a shared upstream is
down would turn degraded answers into no answers). Concurrent deep checks share one round of probes.
"""

from __future__ import annotations

import time
from typing import Any

import anyio
import httpx
import msgspec

from ..config import Config, Target
from ..core import StageTarget
from ..errors import ServerError, UpstreamError
from ..pipeline.resolve import bind_key
from ..redact import redact_userinfo
from ..upstream.client import Upstream
from ..upstream.failures import describe_transport_error

PROBE_SECONDS = 5.0
PASSTHROUGH = "passthrough"
_Pair = tuple[str, str | None, bool, str]  # a base_url and the credentials sent there: probed once
CALL_SECONDS = 30.0  # a one-token call: a local server may load the model first


class DeepHealth:
    """The deep health check of one service; `report()` is the JSON body."""

    def __init__(self, config: Config, upstream: Upstream, *, confirm_models: bool = False) -> None:
        self._config = config
        self._upstream = upstream
        self._confirm_models = confirm_models
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
            places.append((PASSTHROUGH, self._config.passthrough))
        # Each distinct (URL, credentials) pair is probed once: a target with a wrong key on a shared URL fails
        # on its own, while targets that share both share one probe.
        probes: dict[_Pair, StageTarget] = {}
        pair_of: dict[str, _Pair] = {}
        for where, target in places:
            stage_target = self._stage_target(target)
            forwards = stage_target.forward_client_authorization
            pair = (stage_target.base_url, stage_target.key_env, forwards, stage_target.protocol)
            probes.setdefault(pair, stage_target)
            pair_of[where] = pair
        results: dict[_Pair, dict[str, Any]] = {}
        listings: dict[_Pair, frozenset[str] | None] = {}

        async def probe(pair: _Pair, target: StageTarget) -> None:
            results[pair], listings[pair] = await self._probe(target)

        async with anyio.create_task_group() as tg:
            for pair, probed in probes.items():
                tg.start_soon(probe, pair, probed)
        targets: dict[str, dict[str, Any]] = {}
        for where, target in places:
            result = {"model": target.model, "base_url": redact_userinfo(target.url), **results[pair_of[where]]}
            listed = listings[pair_of[where]]
            if listed is not None and where != PASSTHROUGH:  # the passthrough's `model` is unused
                result["listed"] = target.model in listed
            targets[where] = result
        if self._confirm_models:
            await self._confirm(places, pair_of, targets)
        healthy = all(result["status"] == "ok" for result in targets.values())
        return {"status": "ok" if healthy else "degraded", "upstreams_checked": len(results), "targets": targets}

    async def _confirm(
        self,
        places: list[tuple[str, Target]],
        pair_of: dict[str, _Pair],
        targets: dict[str, dict[str, Any]],
    ) -> None:
        """Each answering target whose model its upstream does not list: a one-token call naming the model, once
        per upstream and model; it is ok only when the call is answered."""
        called: dict[tuple[_Pair, str], tuple[Target, str]] = {}
        for where, target in places:
            if where != PASSTHROUGH and targets[where]["status"] == "ok" and not targets[where].get("listed"):
                called.setdefault((pair_of[where], target.model), (target, where))
        answers: dict[tuple[_Pair, str], dict[str, Any]] = {}

        async def call(key: tuple[_Pair, str], target: Target, where: str) -> None:
            unlisted = "does not list it" if "listed" in targets[where] else "lists no models"
            answers[key] = await self._call(self._stage_target(target), unlisted)

        async with anyio.create_task_group() as tg:
            for key, (target, where) in called.items():
                tg.start_soon(call, key, target, where)
        for where, target in places:
            answer = answers.get((pair_of[where], target.model))
            if answer is not None:
                targets[where].update(answer)

    def _stage_target(self, target: Target) -> StageTarget:
        if target.forward_client_authorization:  # the caller's token, which a health check does not have
            return StageTarget(
                model=target.model, base_url=target.url, forward_client_authorization=True, protocol=target.protocol
            )
        key_env = bind_key(self._config, target.url, target)
        return StageTarget(model=target.model, base_url=target.url, key_env=key_env, protocol=target.protocol)

    async def _probe(self, target: StageTarget) -> tuple[dict[str, Any], frozenset[str] | None]:
        """The probe's result, and the model ids its answer lists (None: not a list of models)."""
        started = time.perf_counter()
        result: dict[str, Any]
        listed: frozenset[str] | None = None
        try:
            status, body = await self._upstream.probe(target, PROBE_SECONDS)
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
            listed = _listed(body)
        result["latency_ms"] = round((time.perf_counter() - started) * 1000, 3)
        return result, listed

    async def _call(self, target: StageTarget, unlisted: str) -> dict[str, Any]:
        """A one-token chat call naming `target.model` (which `GET /models` did not list): is it served?"""
        body = {"model": target.model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
        status: int | None = None
        try:
            with anyio.fail_after(CALL_SECONDS):
                await self._upstream.complete("health", target, body)
        except TimeoutError:
            said = f"had no answer within {CALL_SECONDS:g} seconds"
        except UpstreamError as exc:
            said, status = exc.detail.rstrip("."), exc.upstream_status
        except ServerError as exc:
            said = exc.message.rstrip(".")
        else:
            return {"called": "answered"}
        verdict = "not served" if status == 404 else "not confirmed"
        error = f"{target.model!r} {verdict}: GET /models {unlisted}, and a 1-token call {said}"
        return {"status": "error", "called": "failed", "error": error}


class _Listed(msgspec.Struct):
    id: str


class _Listing(msgspec.Struct):
    data: list[_Listed]


_listing = msgspec.json.Decoder(_Listing)


def _listed(body: bytes) -> frozenset[str] | None:
    """The model ids of a `GET /models` answer (`{"data": [{"id": …}, …]}`, OpenAI's and Anthropic's shape)."""
    try:
        return frozenset(model.id for model in _listing.decode(body).data)
    except msgspec.DecodeError:  # not JSON, not that shape (an HTML page, another API), or empty
        return None
