"""CPU seconds each process of the dev stack spends in a phase of a benchmark (Linux `/proc`).

Why: on a shared machine a rate mixes our cost with everybody else's load; the CPU seconds a
process spends per host (or per engine run) do not. `bench_fleet.py` reads them around the raw
engine and the reprovision, so a run says which process a host's cost is in: the Temporal server
(history events, RPCs), the worker (workflow tasks, activities) or the simulated site.

A process counts with its descendants (the dev server runs under a wrapper). Cost: one read of
`/proc/<pid>/stat` per process and descendant per reading; two readings per phase.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

TICKS = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2 :].split()  # fields from the 3rd on (the name may hold spaces)


def _children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(child) for child in text]
    return found


def tree_seconds(pid: int) -> float:
    """User + system CPU seconds of `pid` and its live descendants (0 for a process gone)."""
    total, todo = 0.0, [pid]
    while todo:
        current = todo.pop()
        try:
            fields = _stat(current)
            total += (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime
            todo += _children(current)
        except (FileNotFoundError, ProcessLookupError, ValueError):
            continue
    return total


class CPUMeter:
    """CPU seconds per named process between `start` and `stop`; 'bench' is this process."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._start: dict[str, float] = {}

    def _read(self) -> dict[str, float]:
        readings = {name: tree_seconds(pid) for name, pid in self.pids.items()}
        readings["bench"] = time.process_time()
        return readings

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> dict[str, float]:
        end = self._read()
        return {name: round(end[name] - self._start[name], 2) for name in end}
