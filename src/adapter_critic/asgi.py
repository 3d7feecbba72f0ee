"""The standalone server: `uvicorn adapter_critic.asgi:app`.

The API is served under `/v1`. The config file comes from the env var `ADAPTER_CRITIC_CONFIG`; without it
the built-in demo is served. Its connections get `TCP_NODELAY` however the server made its sockets
(`http.nodelay`), and its process's garbage collector is tuned once it has started (`tune_garbage_collector`):
the process is the server's own, unlike a host app's.

`app` is public (`__all__`); the functions that build it are internal.
"""

from __future__ import annotations

import ctypes
import gc
import logging
import os
import sys

from starlette.applications import Starlette

from .demo import demo_config, demo_model_app
from .errors import ConfigError
from .http import nodelay
from .http.app import build_app
from .http.create import create_standalone_app
from .observe.logs import configure_standalone_logging
from .observe.workers import prepare_multiprocess_dir
from .service.compose import compose
from .store.settings import default_url

__all__ = ["app"]

CONFIG_ENV = "ADAPTER_CRITIC_CONFIG"

logger = logging.getLogger("adapter_critic")


def standalone_app() -> Starlette:
    """The app `uvicorn adapter_critic.asgi:app` serves, built from the environment, under `/v1`
    (docs/reference/http.md)."""
    configure_standalone_logging()
    prepare_multiprocess_dir()  # `--workers N`: metrics summed over the workers
    nodelay.install()
    path = os.environ.get(CONFIG_ENV, "").strip()
    if path:
        return create_standalone_app(path, on_started=tune_garbage_collector)
    config = demo_config()
    _say(
        f"adapter_critic: no config given, serving the built-in DEMO (served models {', '.join(config.served_models)}, "
        "answered by a small deterministic demo model, not a real LLM). To serve real models, set "
        f"{CONFIG_ENV}=/path/to/config.toml (see examples/)."
    )
    service = compose(config, standalone=True, in_process_app=demo_model_app(), store_default=default_url())
    return build_app(service, prefix="/v1", on_started=tune_garbage_collector)


def tune_garbage_collector() -> None:
    """The standalone server's collector settings, once it has started (its process is ours; a host app's is not
    touched).

    Everything made at start-up (modules, config, clients: most of the heap) lives as long as the process: frozen
    (`gc.freeze`), the collector no longer walks it at every full collection, which cost each one milliseconds.
    And a request allocates a few hundred objects that nearly all die with it: a youngest generation of 10,000
    instead of 700 collects a tenth as often, for the same garbage. Measured over 10 s of direct requests at
    concurrency 16, the time spent collecting fell from about 1.1 s to 0.4 s."""
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
    tune_allocator()


# glibc's `mallopt` parameters (malloc.h) and the values the standalone server sets.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_MMAP_THRESHOLD = 32 * 1024 * 1024  # the most glibc takes: every block up to 32 MiB comes from the heap
_TRIM_THRESHOLD = 128 * 1024 * 1024  # free heap kept at its top before it is given back to the system


def tune_allocator() -> bool:
    """Fixed glibc allocator thresholds for the standalone server; whether they were set (not glibc: no).

    By default glibc serves a block of more than 128 KiB with a fresh `mmap`, raising that threshold to the size
    of the biggest such block freed so far, and gives free heap back to the system once more than twice that is
    free at its top. A big answer is copied a few times on its way (read, decoded, relayed, recorded, and once more
    in the extension's `intermediate`): at 1 MiB those copies came back from the heap request after request, at
    16 MiB they were fresh mappings, or heap given back and taken again, that the kernel faulted in and zeroed page
    by page, and the CPU per MiB of answer doubled (`benchmarks/sizes.py`: some 1,400 to 1,800 page faults per MiB
    of answer at 16 MiB, about none at 1 and 4 MiB). With blocks up to 32 MiB (the most glibc takes) served from
    the heap and up to 128 MiB of free heap kept, a 16 MiB answer costs per MiB what a 1 MiB one does: the price
    is that much memory held after a big answer, as a process that served one would soon need it again.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): its allocator does as it does
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD))


def _say(message: str) -> None:
    if logger.hasHandlers():
        logger.warning(message)
    else:
        print(message, file=sys.stderr, flush=True)


try:
    app = standalone_app()
except ConfigError as exc:
    # One clear line instead of a traceback from deep inside the server's import machinery.
    raise SystemExit(f"adapter_critic: invalid config: {exc}") from None
