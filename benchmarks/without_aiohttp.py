"""`python -m benchmarks.without_aiohttp <uvicorn args>`: uvicorn with `httpx_aiohttp` made unimportable, so the
product runs on its fallback, httpx's default transport (as in an install without the `server` extra)."""

from __future__ import annotations

import sys

sys.modules["httpx_aiohttp"] = None  # type: ignore[assignment]  # `import httpx_aiohttp` now raises ImportError

import uvicorn.main  # noqa: E402

if __name__ == "__main__":
    uvicorn.main.main()
