"""The image's HEALTHCHECK: `GET /v1/health` on the port uvicorn listens on (`UVICORN_PORT`), exit 0 when it answers
200, else 1 with the reason on stderr (`docker inspect` shows it).

Standard library only: it runs with the image's Python before anything else is known to work. It asks loopback
when the server listens on every address (`0.0.0.0`, `::`), and the server's own address otherwise."""

from __future__ import annotations

import os
import sys
import urllib.request

ANY = {"", "0.0.0.0", "::", "[::]"}


def health_url() -> str:
    host = os.environ.get("UVICORN_HOST", "").strip()
    port = os.environ.get("UVICORN_PORT", "").strip() or "8000"
    if host in ANY:
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"
    return f"http://{host}:{port}/v1/health"


def main() -> int:
    url = health_url()
    try:
        # No proxy: the server is on this machine, whatever proxy the environment names.
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(url, timeout=4) as answer:
            status = answer.status
    except OSError as exc:
        print(f"{url}: {exc}", file=sys.stderr)
        return 1
    if status != 200:
        print(f"{url}: HTTP {status}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
