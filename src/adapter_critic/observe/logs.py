"""Logs a person can use: one INFO line per request, the request id on every line of a run, a start-up line
naming what is served, and a JSON formatter.

- `request_log` is a run-event subscriber: when a run finishes it logs one line — request id, served model,
  mode, status, each stage's latency, tokens, retries, degraded — with the same values as record attributes
  (`extra`) for structured formatters.
- `request_scope` binds a request id to everything its run logs (retries, degrade warnings, adapter
  rejections): a filter on the `adapter_critic` logger adds `request_id` to each record and puts
  `[request_id]` in front of its message.
- `JsonFormatter` writes one JSON object per record; use it from uvicorn's `--log-config`, or set
  `ADAPTER_CRITIC_LOG_FORMAT=json` for the standalone server.

`JsonFormatter` is public (`__all__`, named in a logging config as `adapter_critic.observe.logs.JsonFormatter`);
everything else here is internal.
"""

from __future__ import annotations

import contextvars
import json
import logging
import os
import sys
import time
from typing import Any

from ..config import Config
from ..events import Event, RunFinished, RunRecord
from ..redact import redact_userinfo

__all__ = ["JsonFormatter"]

logger = logging.getLogger("adapter_critic")

_request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("adapter_critic_request_id", default=None)
_FIELDS = ("request_id", "served_model", "mode", "status", "duration_ms", "stages", "tokens", "retries", "degraded")


class request_scope:
    """Everything logged inside the block (and in tasks started from it) carries `request_id`.

    A class rather than a generator-based context manager: it runs for every request."""

    __slots__ = ("_request_id", "_token")

    def __init__(self, request_id: str) -> None:
        self._request_id = request_id

    def __enter__(self) -> None:
        self._token = _request_id.set(self._request_id)

    def __exit__(self, *exc: object) -> None:
        _request_id.reset(self._token)


def current_request_id() -> str | None:
    """The request id bound by the enclosing `request_scope`, if any."""
    return _request_id.get()


class _RequestIdFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        request_id = _request_id.get()
        if request_id is not None and not hasattr(record, "request_id"):
            record.request_id = request_id
            record.msg, record.args = f"[{request_id}] {record.getMessage()}", None
        return True


_filter = _RequestIdFilter()


def protect_request_ids() -> None:
    """Add the request-id filter to the `adapter_critic` logger (once)."""
    if _filter not in logger.filters:
        logger.filters.insert(0, _filter)  # before redaction, which then sees the final message


def request_log(event: Event) -> None:
    """A run-event subscriber that logs one INFO line per finished run (nothing when INFO is off)."""
    if type(event) is RunFinished and logger.isEnabledFor(logging.INFO):
        assert isinstance(event, RunFinished)
        fields = summary(event.record, event.status)
        logger.info(_line(fields), extra={"run": fields})


def summary(record: RunRecord, status: str) -> dict[str, Any]:
    """A finished run's log fields."""
    total = record.total_usage()
    retries = sum(max(0, stage.attempts - stage.calls) for stage in record.stages.values())  # a cancelled call: 0
    return {
        "request_id": record.run_id,
        "served_model": record.served_model,
        "mode": record.mode,
        "status": status,
        "duration_ms": round(record.elapsed_ms(), 1),
        "stages": {name: round(stage.elapsed_ms, 1) for name, stage in record.stages.items()},
        "tokens": {"prompt": total.prompt_tokens, "completion": total.completion_tokens},
        "retries": retries,
        "degraded": record.degraded,
    }


def _line(fields: dict[str, Any]) -> str:
    stages = ", ".join(f"{name} {ms:.0f} ms" for name, ms in fields["stages"].items()) or "none"
    tokens = fields["tokens"]
    degraded = " degraded" if fields["degraded"] else ""
    return (
        f"{fields['served_model']} ({fields['mode']}) {fields['status']}{degraded} in {fields['duration_ms']:.0f} ms"
        f" | stages: {stages} | tokens: {tokens['prompt']} in, {tokens['completion']} out"
        f" | retries: {fields['retries']}"
    )


def served_line(config: Config) -> str:
    """The start-up line: each served model, its mode and the upstream hosts its targets call (never keys)."""
    parts = []
    for served_id, served in config.served_models.items():
        if served.route is not None:
            parts.append(f"{served_id} (auto → one of {', '.join(served.route.candidates)})")
            continue
        hosts = dict.fromkeys(
            f"served model {t}" if isinstance(t, str) else _host(t.base_url) for _, t in served.stage_targets()
        )
        parts.append(f"{served_id} ({served.mode} → {', '.join(hosts)})")
    return f"serving {len(parts)} model(s): " + "; ".join(parts)


def _host(base_url: str) -> str:
    if base_url.startswith("/"):
        return f"in-process {base_url}"
    rest = redact_userinfo(base_url).split("://", 1)[-1]
    return rest.split("/", 1)[0].rpartition("@")[2]


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, the request id and a run's fields."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = getattr(record, "request_id", None)
        if request_id is not None:
            data["request_id"] = request_id
        run = getattr(record, "run", None)
        if isinstance(run, dict):
            data.update((key, run[key]) for key in _FIELDS if key in run)
        if record.exc_info:
            data["exception"] = record.exc_text or self.formatException(record.exc_info)
        return json.dumps(data, ensure_ascii=False)


def configure_standalone_logging() -> None:
    """The standalone server's logging, unless the host configured its own (uvicorn `--log-config`, a root
    handler): `adapter_critic` records to stderr at the level of uvicorn's `--log-level`, as plain lines or,
    with `ADAPTER_CRITIC_LOG_FORMAT=json`, as JSON."""
    if logger.hasHandlers():
        return
    handler = logging.StreamHandler(sys.stderr)
    if os.environ.get("ADAPTER_CRITIC_LOG_FORMAT", "").strip().lower() == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter("%(levelname)s:     %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.getLogger("uvicorn.error").getEffectiveLevel())
    logger.propagate = False
