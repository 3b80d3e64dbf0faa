"""The suite's modules ordered longest first, for pytest-xdist's `--dist loadfile` (`make test`).

Why: xdist hands whole modules to its workers in the order it is given, and by default first
sorts them by their number of tests, most first (`--loadscope-reorder`). Our longest modules are
one or two tests each (the demo run twice, a worker SIGKILLed four times), so they came last and
one worker still ran them after the others had finished: the suite's wall time was that tail.
Longest first (the classic longest-processing-time rule) lets the short modules fill in around
them. `make test` passes `--no-loadscope-reorder` so xdist keeps this order.

`module_seconds.json` holds each module's seconds (setup, call and teardown of its tests) from
one measured run. Only the order depends on it: a stale or missing figure costs balance, never a
test. Modules it does not list (new ones) run after the listed ones, in collection order; tests
keep their order inside their module, so module fixtures and in-module sequences are unchanged.

Refresh the figures from a run with `--durations=0` (`-vv` shows every duration):
`make pytest PYTEST_ARGS='--durations=0 -vv' | python tests/module_order.py`.

Cost: one JSON read and one sort of the collected items per session; nothing per test.
"""

from __future__ import annotations

import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Protocol, TypeVar

SECONDS_FILE = Path(__file__).with_name("module_seconds.json")
# "12.34s call     tests/test_x.py::test_y[param]", as pytest's --durations prints it.
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s (?:setup|call|teardown)\s+(tests/[^:\s]+)::", re.M)


class _Item(Protocol):
    @property
    def nodeid(self) -> str: ...


T = TypeVar("T", bound=_Item)


def module_of(nodeid: str) -> str:
    """`tests/test_x.py` of `tests/test_x.py::test_y[1]`."""
    return nodeid.split("::", 1)[0]


def load_seconds(path: Path = SECONDS_FILE) -> dict[str, float]:
    """The measured seconds per module; empty when the file is missing (order then unchanged)."""
    if not path.exists():
        return {}
    loaded = json.loads(path.read_text())
    return {str(module): float(seconds) for module, seconds in loaded.items()}


def longest_first(items: list[T], seconds: dict[str, float]) -> list[T]:
    """`items` with whole modules moved: listed ones by their seconds, most first, then the rest
    in collection order; each module's own items keep their order."""
    first_seen: dict[str, int] = {}
    for item in items:
        first_seen.setdefault(module_of(item.nodeid), len(first_seen))

    def key(item: T) -> tuple[int, float, int]:
        module = module_of(item.nodeid)
        if module in seconds:
            return (0, -seconds[module], first_seen[module])
        return (1, 0.0, first_seen[module])

    return sorted(items, key=key)  # stable: a module's items keep their order


def seconds_from_durations(output: str) -> dict[str, float]:
    """Seconds per module summed from pytest's `--durations=0` lines."""
    totals: defaultdict[str, float] = defaultdict(float)
    for match in _DURATION.finditer(output):
        totals[match.group(2)] += float(match.group(1))
    return {module: round(total, 1) for module, total in sorted(totals.items(), key=lambda kv: -kv[1])}


if __name__ == "__main__":
    found = seconds_from_durations(sys.stdin.read())
    if not found:
        raise SystemExit("no `--durations=0` lines on stdin: nothing written")
    SECONDS_FILE.write_text(json.dumps(found, indent=1) + "\n")
    print(f"wrote {len(found)} modules to {SECONDS_FILE}")
