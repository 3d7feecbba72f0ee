"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

The trace viewer: a single web page over the runs API, served at `GET /ui` under the mount (docs/guides/viewer.md).

The page and its assets (`static/`: plain HTML, CSS and JavaScript modules, no build step, nothing fetched
from elsewhere) ship inside the package. They hold no data: every run is read by the page from the runs
API with the caller's key, so the page itself is public while the data stays behind inbound auth.
"""

from __future__ import annotations

from .page import Viewer

__all__ = ["Viewer"]
