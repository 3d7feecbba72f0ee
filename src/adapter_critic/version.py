"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

This package's version, looked up once: `adapter_critic.__version__`, and what every upstream call says it is
(`USER_AGENT`)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("adapter_critic")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0.0.0+unknown"

# Every upstream call says who makes it, the same on every path (aiohttp or httpx, direct mode or a stage), so an
# upstream's logs tell this server's calls from its other clients'.
USER_AGENT = f"adapter_critic/{__version__}"
