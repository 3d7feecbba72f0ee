"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

A stage target's label (`model@base_url`, as events carry it) split into what metrics and spans name: the model,
and the host and port it was called on. Remembered per label: a run's events name a handful of targets."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from urllib.parse import urlsplit


@dataclass(frozen=True, slots=True)
class TargetName:
    model: str
    host: str | None  # None: called in-process (a `base_url` that is a path)
    port: int | None


@functools.lru_cache(maxsize=512)
def target_name(label: str) -> TargetName:
    """`model@base_url` split at the `@` before the URL: a model name may hold an `@` itself (`claude@20240620`)."""
    for marker in ("@http://", "@https://", "@/"):
        at = label.rfind(marker)
        if at >= 0:
            model, base_url = label[:at], label[at + 1 :]
            break
    else:
        return TargetName(label, None, None)
    if base_url.startswith("/"):
        return TargetName(model, None, None)
    try:
        parts = urlsplit(base_url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return TargetName(model, None, None)
    return TargetName(model, parts.hostname, port)
