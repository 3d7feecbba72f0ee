"""Internal: not part of the public API (which `adapter_critic`'s docstring lists); it may change in any release.

Metrics summed over `uvicorn --workers N`: the shared directory prometheus-client's multiprocess mode writes to.

Each worker of a standalone server writes its numbers to files in `PROMETHEUS_MULTIPROC_DIR`, and a scrape of any
worker sums them. When that variable is not set and this process is a worker started by a supervisor (uvicorn's
`--workers`, `--reload`), the workers agree on a directory named after their supervisor — its pid and its start
time, so a later server never finds an earlier one's numbers — under the system's temporary directory.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import tempfile
from pathlib import Path

from ..store.processes import start_time

logger = logging.getLogger("adapter_critic")

ENV = "PROMETHEUS_MULTIPROC_DIR"


def prepare_multiprocess_dir() -> str | None:
    """The multiprocess directory this process should write its metrics to (set in the environment), or None
    for a single process. Must run before `prometheus_client` is first imported."""
    given = os.environ.get(ENV, "").strip()
    if given:
        return given
    if multiprocessing.parent_process() is None:
        return None  # one process: its own numbers are the server's
    supervisor = os.getppid()
    path = Path(tempfile.gettempdir()) / f"adapter_critic-metrics-{supervisor}-{start_time(supervisor) or ''}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        if path.stat().st_uid != os.getuid():
            raise PermissionError(f"{path} belongs to another user")
    except OSError as exc:
        logger.warning(
            "metrics: cannot share numbers between workers (%s); each worker reports its own. Set %s to a "
            "directory only this server writes to.",
            exc,
            ENV,
        )
        return None
    os.environ[ENV] = str(path)
    return str(path)
