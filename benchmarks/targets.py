"""What `run.py` checks beyond the pipeline's own ratios: the run store's cost and tail, with the SQLite store on
beside the same product with it off, in the same rounds.

`STORED` names the product servers `run.py` starts with the store on (each with metrics on, the standalone
server's defaults) and their capture; `STORED_MODES` the modes each is loaded with (streamed: direct only). The
store writes through its writer process: its CPU bound is the server's process's (`cpu_own_us`), and the CPU of
all the server's processes (`cpu_us`, the writer's included) is printed beside it against the bounds it had when
the store wrote in the server's process.
"""

from __future__ import annotations

from typing import Any

STORED = {"store": "full", "store metadata": "metadata"}
STORED_MODES = {"store": (("direct", 1), ("critic", 3)), "store metadata": (("direct", 1),)}
TAIL_US = 300.0  # added p99 with the store on, over with it off, at concurrency 1
TAIL_C16_US = 1000.0  # and at concurrency 16
CPU_OWN = 1.10  # the server's process, store on over off (both captures)
CPU_FULL, CPU_METADATA = 1.20, 1.10  # all its processes


def store_rows(s: dict[str, dict[str, Any]]) -> list[tuple[str, float, str, float]]:
    """The store's figures: added p99 at concurrency 1 and 16 against store off, and CPU per request against off."""
    rows: list[tuple[str, float, str, float]] = []
    for mode in ("direct", "critic", "direct stream"):
        on, off = s[f"{mode} (store)"], s[mode]
        rows.append((f"{mode}, store on: added p99 at concurrency 1 over store off (µs)",
                     on["p99_us"] - off["p99_us"], "≤", TAIL_US))  # fmt: skip
        rows.append((f"{mode}, store on: p99 at concurrency 16 over store off (µs)",
                     on["p99_c16_us"] - off["p99_c16_us"], "≤", TAIL_C16_US))  # fmt: skip
    for capture, stored, bound in (("full", "direct (store)", CPU_FULL), ("metadata", "direct (store metadata)",
                                                                            CPU_METADATA)):  # fmt: skip
        on, off = s[stored], s["direct"]
        own = on.get("cpu_own_us", on["cpu_us"]) / off.get("cpu_own_us", off["cpu_us"])
        rows.append((f"direct, store on ({capture}) + metrics: CPU/request of the server's process vs store off",
                     own, "≤", CPU_OWN))  # fmt: skip
        rows.append((f"direct, store on ({capture}) + metrics: CPU/request of all its processes vs store off",
                     on["cpu_us"] / off["cpu_us"], "≤", bound))  # fmt: skip
    return rows
