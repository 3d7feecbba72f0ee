"""The fault-injection run (`benchmarks/faults.py`) at a small size, as CI runs it: real uvicorn in front of the
chaos upstream, every failure kind injected, and every request ends in a valid answer or a valid §7 error — none
hung, none malformed — and the server shuts down cleanly. (The full size, 2,000 requests, is run by hand.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_small_fault_injection_run_has_no_hung_or_malformed_requests() -> None:
    command = [sys.executable, "-m", "benchmarks.faults", "--requests", "150", "--concurrency", "16", "--json"]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.stdout, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])

    assert result["sent"] == 150
    assert result["hung"] == 0, done.stdout
    assert result["malformed"] == 0, done.stdout
    assert result["clean_shutdown"], done.stdout
    assert done.returncode == 0
    # The run really was hostile, and the server really retried.
    assert result["upstream_calls"] > 150
    assert sum(n for kind, n in result["upstream_outcomes"].items() if kind not in ("ok", "delayed")) > 20
    assert result["retries_logged"] > 0
    assert result["ok"] + sum(result["errors"].values()) == 150
