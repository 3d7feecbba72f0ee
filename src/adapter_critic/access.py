"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

What a named key may reach (docs/guides/security.md#tenants): the served models its `models` globs name, and through
overrides only the targets of those served models.

A key with `models` is bounded: it sees and asks only the served models (and prefixed names) its globs match, and an
override may point a stage only at a target (model, URL and the key bound to it) that one of those served models
already has, so no request of it makes the server call another served model's upstream with that upstream's key. A
key with `allow_overrides = false` may send no override at all. A key without `models`, a nameless key and a server
without named keys reach every served model, and overrides as the server's `allow_overrides` and
`allowed_override_base_urls` allow.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable

from .config import Config
from .config.limits import AuthKey
from .core import Plan, StageTarget
from .errors import RequestError
from .pipeline.resolve import resolve

# The longest model name a request may give that is not a served model's id, and the characters such a name may have:
# what upstream model names use (`Qwen/Qwen2.5-7B-Instruct`, `llama3:8b`, `hf.co/org/model:Q4_K_M`), and `&` for
# chains. Anything else is refused before it reaches an upstream, a log or the store.
MAX_MODEL_NAME = 256
_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:/@&+")


def check_model_name(model: str) -> None:
    """Refuse (400) a requested model name that no upstream could serve: too long, with a character outside
    `_NAME_CHARACTERS`, or with a path step (`..`) or a URL scheme (`://`) in it."""
    problem = None
    if not model:
        problem = "is empty"
    elif len(model) > MAX_MODEL_NAME:
        problem = f"is {len(model)} characters long; at most {MAX_MODEL_NAME} are allowed"
    elif not _NAME_CHARACTERS.issuperset(model):
        problem = "has characters a model name cannot have (letters, digits and `._-:/@&+` are allowed)"
    elif ".." in model or "://" in model:
        problem = "has a path step (`..`) or a URL (`://`) in it"
    if problem is not None:
        raise RequestError(f"The requested model name {problem}.", param="model", code="invalid_model_name")


def forbidden(message: str, param: str | None = None) -> RequestError:
    """The 403 of a key asking for something it may not reach."""
    return RequestError(message, status_code=403, param=param, code="permission_denied")


class KeyPolicy:
    """The served models each named key may use, and the targets its overrides may name."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self._keys: dict[str, AuthKey] = {key.name: key for key in config.auth.keys}
        self._bounded = {name: tuple(key.models) for name, key in self._keys.items() if key.models is not None}
        self._reachable: dict[str, frozenset[tuple[str, str, str | None]]] = {}
        self._allows: dict[tuple[str | None, str], bool] = {}
        # Some key is bounded (`models`) or may not override: else a request pays nothing here.
        self.any_bounds = bool(self._bounded) or any(not key.allow_overrides for key in self._keys.values())

    def bounded(self, caller: str | None) -> bool:
        """The caller's key has a `models` list."""
        return caller is not None and caller in self._bounded

    def allows(self, caller: str | None, model: str) -> bool:
        """The caller's key may use the served model (or prefixed name) `model`."""
        patterns = self._bounded.get(caller) if caller is not None else None
        if patterns is None:
            return True
        known = self._allows.get((caller, model))
        if known is None:
            known = any(fnmatch.fnmatchcase(model, pattern) for pattern in patterns)
            if model in self.config.served_models:  # remembered for served models only: a finite set
                self._allows[(caller, model)] = known
        return known

    def visible(self, caller: str | None, models: Iterable[str]) -> list[str]:
        """Those of `models` the caller may use (what its model list shows)."""
        return [model for model in models if self.allows(caller, model)]

    def check_overrides(self, caller: str | None, plan: Plan, where: str = "x_adapter_critic") -> None:
        """Refuse (403) a plan made with overrides that the caller may not make: any override, for a key with
        `allow_overrides = false`; for a bounded key, a stage target that no served model it may use has."""
        key = self._keys.get(caller) if caller is not None else None
        if key is None:
            return
        if not key.allow_overrides:
            raise forbidden(
                f"The key {key.name!r} may not send overrides (allow_overrides = false).", "x_adapter_critic"
            )
        if key.models is None:
            return
        reachable = self._reachable.get(key.name)
        if reachable is None:
            reachable = self._reachable[key.name] = self._targets_of(key.name)
        for target in plan.all_targets():
            if target.served is None and _identity(target) not in reachable:
                raise forbidden(
                    f"An override names the model {target.model!r} at an upstream that no served model the key "
                    f"{key.name!r} may use has; a key with `models` may override only to its served models' targets.",
                    where,
                )

    def _targets_of(self, caller: str) -> frozenset[tuple[str, str, str | None]]:
        """Every stage target (model, URL, bound key) of the served models `caller` may use, as they resolve."""
        found: set[tuple[str, str, str | None]] = set()
        for served_id in self.visible(caller, self.config.served_models):
            plan = resolve(self.config, served_id, None)
            found.update(_identity(target) for target in plan.all_targets() if target.served is None)
        return frozenset(found)


def _identity(target: StageTarget) -> tuple[str, str, str | None]:
    """What an upstream call is: which model, where, with which of the server's keys."""
    return target.model, target.base_url, target.key_env
