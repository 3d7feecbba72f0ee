"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

`tune`'s `config.toml`: a served model for each candidate on the front, ready to serve (`adapter-critic serve
--config DIR/config.toml`, or its tables merged into a config of one's own). Each runs the candidate's workflow with
the settings tried, every stage on the tuned model's API target (its URL, key variable, options, protocol, retries
and timeouts, as a prefixed name did during the search); a chain's first workflow is a served model of its own that
the second takes its draft from (`draft = { served = … }`). The config's prices come along, so costs stay known.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import msgspec
import tomli_w

from ..config import Config, Target
from ..config.target import is_relative
from .candidates import Candidate

CONFIG = "config.toml"
PREFIX = "tuned-"
# A target's fields worth writing when not at their default; the rest (derived at load) are left out.
_TARGET_FIELDS = (
    "model",
    "base_url",
    "api_key_env",
    "options",
    "forward_client_authorization",
    "retries",
    "timeout_seconds",
    "connect_timeout_seconds",
    "protocol",
)


def served_id(candidate: Candidate) -> str:
    """`tuned-self_consistency-n3-temperature0.35`: the label, as a model id."""
    said = "-".join(f"{name}{value}".lower() for name, value in sorted(candidate.settings.items()))
    name = f"{PREFIX}{candidate.workflow.replace('&', '-then-')}" + (f"-{said}" if said else "")
    return re.sub(r"[^A-Za-z0-9._-]", "", name)


def target_table(target: Target) -> dict[str, Any]:
    every = msgspec.to_builtins(target)
    defaults = {f.name: f.default for f in msgspec.structs.fields(Target)}
    table = {}
    for name in _TARGET_FIELDS:
        value = every.get(name)
        if value is None or value == {} or (name in defaults and value == defaults[name]):
            continue
        table[name] = value
    return table


def served_models(front: list[Candidate], api: Target) -> dict[str, dict[str, Any]]:
    """The served-model tables for `front` (best first), and for each chain its first workflow's."""
    api_table = target_table(api)
    tables: dict[str, dict[str, Any]] = {}
    for candidate in front:
        table: dict[str, Any] = {"mode": candidate.modes[-1], "api": api_table, **candidate.settings}
        if len(candidate.modes) == 2:
            first = Candidate(candidate.modes[:1])
            tables.setdefault(served_id(first), {"mode": first.modes[0], "api": api_table})
            table["draft"] = {"served": served_id(first)}
        tables[served_id(candidate)] = table
    return tables


def write_config(directory: Path, front: list[Candidate], config: Config, api: Target, about: str) -> Path:
    if api.api_key_env is None and not is_relative(api.base_url):  # the key its config gave it, said outright
        api = msgspec.structs.replace(api, api_key_env=config.key_env_for(api))
    data: dict[str, Any] = {"served_models": served_models(front, api)}
    if config.prices:
        data["prices"] = {name: _without_none(msgspec.to_builtins(price)) for name, price in config.prices.items()}
        data["pricing"] = _without_none(msgspec.to_builtins(config.pricing))
    header = (
        f"# Written by `adapter-critic tune` ({about}): a served model for each candidate on the front, the best\n"
        "# held-out score first. Serve it as it is (adapter-critic serve --config THIS_FILE), or copy the tables\n"
        "# into your own config. pareto.json and report.html beside it say what each scored and cost.\n\n"
    )
    path = directory / CONFIG
    path.write_text(header + tomli_w.dumps(data), encoding="utf-8")
    return path


def _without_none(value: Any) -> Any:
    return {k: v for k, v in value.items() if v is not None} if isinstance(value, dict) else value
