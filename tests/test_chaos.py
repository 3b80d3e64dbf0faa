"""The short chaos run of `make chaos` (bench/chaos.py), in `make test`: 10 hosts reprovisioned
under the `flaky` fault profile while the worker is SIGKILLed once and restarted, the Temporal dev
server (SQLite file) is SIGKILLed and restarted once, and the site drops every client's watch
once. Every host ends Ready or failed with a reason; nothing is lost, doubled, leaked or shown.

Runs in this process (the stack's servers hold this session's lifeline: a killed test run leaves
none behind); about a minute on a quiet 2-core machine.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

from chaos import run  # noqa: E402


async def test_ten_hosts_through_one_kill_of_each_kind_end_ready_with_nothing_lost_or_doubled() -> None:
    args = argparse.Namespace(
        hosts=10, kill_every=8.0, max_worker_kills=1, server_kill_at=15.0, watch_drop_at=3.0,
        seed=0, limit=240.0, keep=False,
    )  # fmt: skip
    result = await run(args)
    assert (result["worker_kills"], result["server_kills"], result["watch_drops"]) == (1, 1, 1), result
    assert result["hosts"] == 10
    assert result["ready"] + result["failed"] == 10, result
    assert {
        key: result[key]
        for key in ("failed_without_reason", "extra_power_cycles", "violations", "lost_workflows",
                    "secrets_found", "sessions_leaked")
    } == dict.fromkeys(("failed_without_reason", "extra_power_cycles", "violations", "lost_workflows",
                        "secrets_found", "sessions_leaked"), 0), result  # fmt: skip
