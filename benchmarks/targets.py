"""What `run.py` checks beyond the pipeline's own ratios: the run store's cost and tail, with the SQLite store on
beside the same product with it off, in the same rounds.

`STORED` names the product servers `run.py` starts with the store on (each with metrics on, the standalone
server's defaults) and their capture; `STORED_MODES` the modes each is loaded with (streamed: direct only).
"""

from __future__ import annotations

from typing import Any

STORED = {"store": "full", "store metadata": "metadata"}
STORED_MODES = {"store": (("direct", 1), ("critic", 3)), "store metadata": (("direct", 1),)}
TAIL_US = 300.0  # added p99 with the store on, over with it off
CPU_FULL, CPU_METADATA = 1.20, 1.10


def store_rows(s: dict[str, dict[str, Any]]) -> list[tuple[str, float, str, float]]:
    """The store's figures: added p99 at concurrency 1 and 16 against store off, and CPU per request against off."""
    rows: list[tuple[str, float, str, float]] = []
    for mode in ("direct", "critic", "direct stream"):
        on, off = s[f"{mode} (store)"], s[mode]
        rows.append((f"{mode}, store on: added p99 at concurrency 1 over store off (µs)",
                     on["p99_us"] - off["p99_us"], "≤", TAIL_US))  # fmt: skip
        rows.append((f"{mode}, store on: p99 at concurrency 16 over store off (µs)",
                     on["p99_c16_us"] - off["p99_c16_us"], "≤", TAIL_US))  # fmt: skip
    rows.append(("direct, store on (full) + metrics: CPU/request vs store off",
                 s["direct (store)"]["cpu_us"] / s["direct"]["cpu_us"], "≤", CPU_FULL))  # fmt: skip
    rows.append(("direct, store on (metadata) + metrics: CPU/request vs store off",
                 s["direct (store metadata)"]["cpu_us"] / s["direct"]["cpu_us"], "≤", CPU_METADATA))  # fmt: skip
    return rows
