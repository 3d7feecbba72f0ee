"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Serving the viewer's page and assets, with a strict Content-Security-Policy on every one of them.

The CSP allows scripts, styles and connections to this server only, no inline script or style, no `eval`,
and Trusted Types with no policy: in a browser that enforces them, assigning a string to `innerHTML` (or any
other HTML sink) throws, so model output can only ever reach the page as text.
"""

from __future__ import annotations

import html
from importlib import resources

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..errors import RequestError
from ..protocols.openai.render import error_response

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'; "
    "require-trusted-types-for 'script'; trusted-types 'none'"
)
HEADERS = {
    "content-security-policy": CSP,
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "x-frame-options": "DENY",
    "cache-control": "no-cache",
}
_TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".html": "text/html; charset=utf-8",
}
_ROOT_MARK = "{{root}}"


class Viewer:
    """The viewer's routes under `prefix`: `/ui` (the page) and `/ui/<asset>` (its scripts and styles).

    Assets are read from the package once, when the routes are built."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        static = resources.files(__package__).joinpath("static")
        self.assets: dict[str, tuple[bytes, str]] = {}
        for entry in static.iterdir():
            suffix = entry.name[entry.name.rfind(".") :]
            if entry.is_file() and suffix in _TYPES and entry.name != "index.html":
                self.assets[entry.name] = (entry.read_bytes(), _TYPES[suffix])
        self.index = static.joinpath("index.html").read_text("utf-8")

    def routes(self) -> list[Route]:
        return [
            Route(f"{self.prefix}/ui", self.page, methods=["GET"]),
            Route(f"{self.prefix}/ui/{{asset}}", self.asset, methods=["GET"]),
        ]

    def public_paths(self) -> list[str]:
        """The paths inbound auth lets through: the page and its assets, which hold no data."""
        return [f"{self.prefix}/ui", *(f"{self.prefix}/ui/{name}" for name in self.assets)]

    async def page(self, request: Request) -> Response:
        # The API's root as the browser sees it (a host's mount path included), for the page's links and calls.
        root = html.escape(request.scope.get("root_path", "") + self.prefix, quote=True)
        return Response(self.index.replace(_ROOT_MARK, root), media_type=_TYPES[".html"], headers=HEADERS)

    async def asset(self, request: Request) -> Response:
        name: str = request.path_params["asset"]
        found = self.assets.get(name)
        if found is None:
            error = RequestError(f"The viewer has no asset {name!r}; open {self.prefix}/ui.", status_code=404)
            return error_response(error)
        body, media_type = found
        return Response(body, media_type=media_type, headers=HEADERS)
