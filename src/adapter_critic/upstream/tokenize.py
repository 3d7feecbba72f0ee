"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`TokenCounter`: asking a stage target's upstream how many tokens a request's input is, where it can say.

- A target with `protocol = "anthropic"`: its own `POST {base_url}/messages/count_tokens` (`{"input_tokens": N}`).
- An OpenAI-compatible target: the model server's `POST /tokenize`, beside its `base_url`'s `/v1`
  (`http://host:8000/v1` → `http://host:8000/tokenize`), as vLLM and llama.cpp serve it. vLLM's takes the chat
  (`{"model", "messages", "tools"}`, its chat template applied) and answers `{"count": N, ...}`; llama.cpp's takes
  text (`{"content": ...}`) and answers `{"tokens": [...]}`. vLLM's form is asked first (a llama.cpp server
  answers it with no `count`), then llama.cpp's; a server without `/tokenize` (404 or 405 to both) is asked at
  `/extras/tokenize` as llama-cpp-python serves it (`{"input": ...}`, answering `{"tokens": [...]}`). Which one a
  URL answered, or that it has none of them, is remembered for the URL's next counts.

The call carries the target's key like a stage call (it goes to the same server). Any failure — no such endpoint,
an error status, a timeout, an answer without a count — is None: the caller estimates instead.
"""

from __future__ import annotations

import logging
from typing import Any, Literal

import anyio
import msgspec

from ..core import StageTarget
from .client import Upstream
from .failures import TRANSPORT_ERRORS
from .sizes import read_limited, sent

logger = logging.getLogger("adapter_critic")

Kind = Literal["vllm", "llama.cpp", "llama-cpp-python", "none"]


class _Count(msgspec.Struct):
    input_tokens: int | None = None  # Anthropic's count_tokens
    count: int | None = None  # vLLM's /tokenize
    tokens: list[Any] | None = None  # llama.cpp's /tokenize


_count_decoder = msgspec.json.Decoder(_Count)
_encoder = msgspec.json.Encoder()
# The statuses that say "no such endpoint": a URL that answers both forms with one of them is not asked again.
_NO_ENDPOINT = frozenset({404, 405})


class TokenCounter:
    """Counts on upstreams for one service; remembers which `/tokenize` form each URL answers."""

    def __init__(self, upstream: Upstream, max_response_bytes: int) -> None:
        self.upstream = upstream
        self.max_response_bytes = max_response_bytes
        self._kinds: dict[str, Kind] = {}

    async def anthropic(self, target: StageTarget, body: bytes) -> int | None:
        """The count of an Anthropic target's `/messages/count_tokens` for `body`."""
        _, answer = await self._post(target, f"{target.base_url}/messages/count_tokens", body)
        return answer.input_tokens if answer is not None else None

    async def tokenize(self, target: StageTarget, chat: dict[str, Any], text: str) -> tuple[int, Kind] | None:
        """The count of an OpenAI-compatible target's `/tokenize` — of `chat` (vLLM) or of `text` (llama.cpp) —
        and which of them counted."""
        url = tokenize_url(target.base_url)
        kind = self._kinds.get(url)
        if kind == "none":
            return None
        if kind == "llama-cpp-python":
            return (await self._extras(target, url, text))[1]
        statuses: list[int | None] = []
        if kind != "llama.cpp":
            status, answer = await self._post(target, url, _encoder.encode({"model": target.model, **chat}))
            if answer is not None and answer.count is not None:
                self._kinds[url] = "vllm"
                return answer.count, "vllm"
            if status is None or status >= 500:
                return None  # down or failing: nothing learned, asked again next time
            statuses.append(status)
        status, answer = await self._post(target, url, _encoder.encode({"content": text}))
        if answer is not None and answer.tokens is not None:
            self._kinds[url] = "llama.cpp"
            return len(answer.tokens), "llama.cpp"
        statuses.append(status)
        if kind is None and all(status in _NO_ENDPOINT for status in statuses):
            status, counted = await self._extras(target, url, text)
            if counted is not None or status not in _NO_ENDPOINT:
                return counted
            logger.info("%s serves no /tokenize; its token counts are estimated", target.label)
            self._kinds[url] = "none"
        return None

    async def _extras(self, target: StageTarget, url: str, text: str) -> tuple[int | None, tuple[int, Kind] | None]:
        """llama-cpp-python's `/extras/tokenize` (beside `url`) of `text`: its status, and the count."""
        extras = f"{url.removesuffix('/tokenize')}/extras/tokenize"
        status, answer = await self._post(target, extras, _encoder.encode({"model": target.model, "input": text}))
        if answer is None or answer.tokens is None:
            return status, None
        self._kinds[url] = "llama-cpp-python"
        return status, (len(answer.tokens), "llama-cpp-python")

    async def _post(self, target: StageTarget, url: str, body: bytes) -> tuple[int | None, _Count | None]:
        """POST `body` to `url` with the target's headers: the answer's status (None: no answer), and the answer
        when it is a 200 JSON object."""
        client = self.upstream.client_for(target.base_url, target.pinned)
        headers = self.upstream.headers_for(target)
        timeout = self.upstream.timeout_for(target)
        try:
            with anyio.fail_after(timeout.read):
                async with sent(client, "POST", url, content=body, headers=headers, timeout=timeout) as response:
                    status = response.status_code
                    content = await read_limited(response, self.max_response_bytes) if status == 200 else b""
        except TRANSPORT_ERRORS as exc:
            logger.warning("counting tokens on %s failed (%s); estimating instead", target.label, type(exc).__name__)
            return None, None
        if status != 200:
            return status, None
        try:
            return status, _count_decoder.decode(content)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):  # not JSON, or no count of a known shape
            return status, None


def tokenize_url(base_url: str) -> str:
    """Where a model server behind `base_url` serves `/tokenize`: beside its `/v1`, at the root of the server."""
    root = base_url.rstrip("/").removesuffix("/v1")
    return f"{root}/tokenize"
