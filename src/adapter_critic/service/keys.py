"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Who may call (`auth_api_keys_env`, `[[auth.keys]]`): the accepted keys, and who presents a token.

Off unless the config names an env var or keys. The env vars are read on every request, so keys rotate without a
restart. A presented token is compared with every accepted key in constant time (digests of equal length, no early
exit). An unset or empty env var fails closed: every request is refused (401) and a warning is logged, rather than
the server silently becoming open to anyone. Where the token is found in a request is the HTTP layer's
(`http.auth`).
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
from collections.abc import Sequence

from ..config.limits import AuthKey
from ..errors import AuthenticationError

logger = logging.getLogger("adapter_critic")

CHALLENGE = {"www-authenticate": "Bearer"}


class KeyRing:
    """Who may call one app or middleware: the accepted keys; no `env_name` and no `keys` means auth is off."""

    def __init__(self, env_name: str | None, keys: Sequence[AuthKey] = ()) -> None:
        self.env_name = env_name
        self.keys = tuple(keys)
        self.admins = frozenset(key.name for key in keys if key.admin)
        self._hashed = [(bytes.fromhex(k.key_sha256), k.name) for k in keys if k.key_sha256 is not None]
        self._warned = False
        if self.enabled and not self._digests():
            self._warn_unconfigured()

    @property
    def enabled(self) -> bool:
        return self.env_name is not None or bool(self.keys)

    def identify(self, token: bytes | None, hint: str) -> AuthenticationError | str | None:
        """Who presents `token`: the name of its named key, None for a nameless key (or auth off), or the 401 to
        answer — never saying which key, or how close. `hint` says where the key is sent, for a missing one."""
        if not self.enabled:
            return None
        accepted = self._digests()
        if not accepted:
            self._warn_unconfigured()
            return AuthenticationError(
                "This server requires an API key, but has no accepted keys configured; ask its operator.",
                code="invalid_api_key",
                headers=CHALLENGE,
            )
        self._warned = False
        if token is None:
            return AuthenticationError(
                f"Missing API key: send it in {hint}.", code="invalid_api_key", headers=CHALLENGE
            )
        presented = hashlib.sha256(token).digest()
        matched = False
        caller = None
        for digest, name in accepted:  # every key, always: the time taken must not depend on which one matched
            equal = hmac.compare_digest(presented, digest)
            matched |= equal
            caller = name if equal else caller
        if matched:
            return caller
        logger.debug("refused a request with an unknown API key")
        return AuthenticationError("Incorrect API key provided.", code="invalid_api_key", headers=CHALLENGE)

    def _digests(self) -> list[tuple[bytes, str | None]]:
        """Every accepted key's SHA-256 and its name (None: a key of `auth_api_keys_env`), read from the env now."""
        raw = os.environ.get(self.env_name, "") if self.env_name else ""
        keys = (key.strip() for key in raw.split(","))
        found: list[tuple[bytes, str | None]] = [(hashlib.sha256(key.encode()).digest(), None) for key in keys if key]
        for key in self.keys:
            value = os.environ.get(key.key_env, "").strip() if key.key_env else ""
            if value:
                found.append((hashlib.sha256(value.encode()).digest(), key.name))
        found += self._hashed
        return found

    def _warn_unconfigured(self) -> None:
        if not self._warned:
            self._warned = True
            logger.warning(
                "adapter_critic: inbound auth is on (auth_api_keys_env = %r, auth.keys: %s) but no key is set (the "
                "env vars are unset or empty), so every request except /health is refused with 401. Set them.",
                self.env_name,
                ", ".join(key.name for key in self.keys) or "none",
            )
