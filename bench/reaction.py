"""Reaction time, taken apart: where the time from DPF's ask to the BMC's reset goes, and a paced
run that measures it as latency rather than as a burst's backlog.

Used by `bench_fleet.py`. Clocks: DPF's ask and the reset are the simulated site's own
(`/sim/timeline`); the child's start and the scheduling of its first power activity are the
Temporal server's event times. Both run on this machine's clock.

Stages per reboot child (`HostRebootWorkflow`), medians and p99 over the reboots measured:
- `asked_to_started`: DPF set the reboot-required annotation -> the reboot child started (the
  site watch's signal, the operation's workflow task, the child's start);
- `started_to_scheduled`: -> its `power_cycle_host` (or first `set_power_state`, ForceOff) was
  scheduled (the child's own workflow tasks, inventory and BMC lease);
- `scheduled_to_reset`: -> the BMC accepted the reset (the power activity itself).

The paced run asks one host's reprovision every `pace` seconds, so at a rate the stack sustains
each reboot meets an idle worker: its reaction is the path's latency, not the queue of a burst.
Cost: one history read per reboot child, after the run.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from contracts import names

POWER_ACTIVITIES = ("power_cycle_host", "set_power_state")


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def median_p99(values: Iterable[float]) -> tuple[float | None, float | None]:
    ordered = sorted(values)
    if not ordered:
        return None, None
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return round(statistics.median(ordered), 3), round(p99, 3)


def reaction_seconds(
    timeline: dict[str, list[dict[str, str]]], since: datetime, hosts: Iterable[str] | None = None
) -> list[float]:
    """For each reboot DPF asked for after `since` (of `hosts`, or all): seconds until that
    host's BMC accepted a reset."""
    wanted = None if hosts is None else set(hosts)
    resets: dict[str, list[datetime]] = {}
    for reset in timeline["resets"]:
        resets.setdefault(reset["host"], []).append(datetime.fromisoformat(reset["time"]))
    found = []
    for asked in timeline["reboots_asked"]:
        at = datetime.fromisoformat(asked["time"])
        if at < since or (wanted is not None and asked["host"] not in wanted):
            continue
        later = [t for t in resets.get(asked["host"], []) if t >= at]
        if later:
            found.append((min(later) - at).total_seconds())
    return found


async def reboot_stages(
    client: Client, timeline: dict[str, list[dict[str, str]]], since: datetime, hosts: Iterable[str]
) -> dict[str, Any]:
    """The three stages (module docstring) of every reboot child of `hosts` started after `since`."""
    wanted = set(hosts)
    asks: dict[str, list[datetime]] = {}
    for asked in timeline["reboots_asked"]:
        asks.setdefault(asked["host"], []).append(datetime.fromisoformat(asked["time"]))
    resets: dict[str, list[datetime]] = {}
    for reset in timeline["resets"]:
        resets.setdefault(reset["host"], []).append(datetime.fromisoformat(reset["time"]))
    stages: dict[str, list[float]] = {
        name: [] for name in ("asked_to_started", "started_to_scheduled", "scheduled_to_reset")
    }
    async for execution in client.list_workflows('WorkflowType="HostRebootWorkflow"'):
        host = execution.typed_search_attributes.get(names.HOST_ID)
        if host not in wanted or execution.start_time < since:
            continue
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        started = history.events[0].event_time.ToDatetime().astimezone()
        scheduled = next(
            (
                e.event_time.ToDatetime().astimezone()
                for e in history.events
                if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
                and e.activity_task_scheduled_event_attributes.activity_type.name in POWER_ACTIVITIES
            ),
            None,
        )
        asked = max((t for t in asks.get(host, []) if t <= started), default=None)
        if asked is None or scheduled is None:
            continue
        reset = min((t for t in resets.get(host, []) if t >= scheduled), default=None)
        stages["asked_to_started"].append((started - asked).total_seconds())
        stages["started_to_scheduled"].append((scheduled - started).total_seconds())
        if reset is not None:
            stages["scheduled_to_reset"].append((reset - scheduled).total_seconds())
    figures: dict[str, Any] = {"reboots": len(stages["asked_to_started"])}
    for name, values in stages.items():
        figures[f"{name}_median_s"], figures[f"{name}_p99_s"] = median_p99(values)
    return figures


async def paced(
    request_one: Callable[[str], Any],
    wait_for: Callable[[str, str], Any],
    hosts: list[str],
    pace: float,
    limit: float,
) -> dict[str, Any]:
    """Ask `request_one(host)` (-> the operation's workflow id) for each host, one every `pace`
    seconds, and wait (at most `limit` seconds from the first ask) for `wait_for(host, id)`."""
    began = time.monotonic()
    waits = []
    for i, host in enumerate(hosts):
        await asyncio.sleep(max(0.0, began + i * pace - time.monotonic()))
        workflow_id = await request_one(host)
        waits.append(asyncio.ensure_future(wait_for(host, workflow_id)))
        if (i + 1) % max(1, len(hosts) // 10) == 0:
            say(f"paced: asked {i + 1}/{len(hosts)}")
    _, pending = await asyncio.wait(waits, timeout=max(1.0, limit - (time.monotonic() - began)))
    for wait in pending:
        wait.cancel()
    return {"seconds": round(time.monotonic() - began, 2), "stalled": bool(pending)}
