"""The config (docs/reference/config.md): its schema, loading it from a file, and validating it up front."""

from __future__ import annotations

from .load import load_config, require_absolute_urls, source_of
from .schema import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_MAX_MESSAGES,
    DEFAULT_MAX_UPSTREAM_CONNECTIONS,
    DEFAULT_MAX_UPSTREAM_RESPONSE_BYTES,
    Config,
)
from .served import ServedModel
from .target import Target, is_relative, normalize_url

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_MESSAGES",
    "DEFAULT_MAX_UPSTREAM_CONNECTIONS",
    "DEFAULT_MAX_UPSTREAM_RESPONSE_BYTES",
    "Config",
    "ServedModel",
    "Target",
    "is_relative",
    "load_config",
    "normalize_url",
    "require_absolute_urls",
    "source_of",
]
