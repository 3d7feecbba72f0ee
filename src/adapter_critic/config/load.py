"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Reading a config file (TOML, JSON, YAML) and the checks that depend on how the config is used.

Every mistake is reported as one `ConfigError` naming the file and the key path
(`served_models.x.api.base_url`), never as a bare traceback.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .schema import Config
from .target import is_relative


def load_config(path: str | Path) -> Config:
    """Read and validate a `.toml`, `.json`, `.yaml` or `.yml` config file."""
    path = Path(path)
    source = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{source}: cannot read the config file ({exc.strerror or exc})") from None
    suffix = path.suffix.lower()
    data: Any
    try:
        if suffix == ".toml":
            data = tomllib.loads(raw.decode("utf-8"))
        elif suffix == ".json":
            data = json.loads(raw)
        elif suffix in (".yaml", ".yml"):
            data = _load_yaml(raw, source)
        else:
            raise ConfigError(f"{source}: unknown config format {suffix!r}; use .toml, .json, .yaml or .yml")
    except ConfigError:
        raise
    except (ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{source}: not valid {suffix[1:].upper()}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: the top level must be a table/object with `served_models`")
    return Config.from_dict(data, source=source)


def source_of(config: Config) -> str:
    """The file a config was loaded from (`<config>` when it was built in code)."""
    source: str = config.__dict__.get("source", "<config>")
    return source


def require_absolute_urls(config: Config, source: str | None = None, *, served_here: tuple[str, ...] = ()) -> None:
    """Refuse relative `base_url`s where no wrapped app can serve them (create_app, standalone); `served_here`: the
    relative ones an app in this process does serve (the demo model's)."""
    source = source or source_of(config)
    for where, target in config.key_paths():
        if is_relative(target.base_url) and target.base_url.rstrip("/") not in served_here:
            raise ConfigError(
                f"{source}: {where}.base_url: {target.base_url!r} is a relative URL; "
                "relative URLs only work with AdapterCriticMiddleware, which serves them in-process from the "
                "wrapped app. Use an absolute URL such as http://127.0.0.1:8000/v1."
            )


def _load_yaml(raw: bytes, source: str) -> Any:
    try:
        import yaml
    except ImportError:
        raise ConfigError(
            f"{source}: YAML config needs PyYAML: pip install 'adapter_critic[yaml]' (or use .toml/.json)"
        ) from None
    try:
        return yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{source}: not valid YAML: {exc}") from None
