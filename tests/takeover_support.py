"""The takeover time of the workers tests build in their own process: the setting their worker
processes get.

tests/conftest.py sets `METALFLOW_WORKER_TAKEOVER_SECONDS` (3 s) for the worker processes tests
start (worker.py, `metalflow dev`), whose `build_worker` reads it through `Settings.from_env`. A
worker built here by `Worker(...)`, or by `build_worker` with `Settings(...)`, took the SDK's and
the settings' default, 10 s: a workflow whose in-process worker stopped while it moved on (a
restart, a handover, a worker swapped for another) waited up to that long for the next worker.
These read the same setting the product's way. Read when called, not at import: conftest.py sets
the variable after its imports.
"""

from __future__ import annotations

from datetime import timedelta

from drivers.settings import Settings


def takeover_seconds() -> float:
    """`METALFLOW_WORKER_TAKEOVER_SECONDS` as the worker reads it (the tests' 3 s)."""
    return Settings.from_env().worker_takeover_seconds


def sticky_timeout() -> timedelta:
    """The `sticky_queue_schedule_to_start_timeout` the product's `build_worker` would pass."""
    return timedelta(seconds=takeover_seconds())
