"""Many host monitors on one worker, and whether a power cycle is still served among them.

    .venv/bin/python bench/bench_monitors.py [--monitors 10000] [--limit 600]

Runs the dev stack (as `bench_fleet.py` does) with one simulated host per monitor (one DPU
each, zero delays, every DPU Ready), starts a `monitor/host-<id>` for every host as
`metalflow host monitor` does, then asks host-001's entity for one reboot and waits for it,
at most `--limit` seconds. `ok` is true when the reboot completed and the host's BMC logged
exactly one power cycle: the monitors did not starve the worker of what a power cycle needs.
Prints progress on stderr and one JSON object on stdout, with the worker's peak resident memory
and, read from the monitors' histories afterwards (server clock), how many monitors had had
their first workflow task (`monitors_started_by_reboot_end`) and had finished their join
(`monitors_watching_by_reboot_end`) when the reboot ended: the backlog the reboot passed. The
task queue's backlog per priority key when the reboot is asked is `backlog_at_ask` (the
server's approximate counts: workflow and activity tasks). `--drain` then waits, within
`--limit`, until both backlogs are empty: `drained_seconds` from the first start, or
`backlog_left` at the limit, and `monitors_watching_at_end`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from temporalio.api.enums.v1 import EventType, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

import metalflow.devstack.stack as devstack_stack  # noqa: E402
from contracts import names  # noqa: E402
from contracts.models.host import (  # noqa: E402
    REQUEST_REBOOT_UPDATE,
    HostMonitorInput,
    HostWorkflowInput,
    OperationAccepted,
    OperationPolicy,
    OperationRequest,
)
from metalflow.devstack.sim import SIM_READY_TIMEOUT, SiteOptions  # noqa: E402
from metalflow.devstack.stack import WORKER_NAME, DevStack, DevStackConfig  # noqa: E402
from metalflow.hosts import send_update  # noqa: E402
from metalflow.monitors import start_monitor  # noqa: E402
from metalflow.runtime.ports import free_port  # noqa: E402

POLICY = OperationPolicy(power_down_wait_seconds=0.0, reboot_wait_seconds=600.0, phase_timeout_seconds=1800.0)


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):  # the peak resident set since the process started
            return int(line.split()[1]) / 1024
    return float("nan")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    # The simulated site builds every host before it answers: minutes for 10,000 on a loaded
    # machine (1,000 hosts x 2 DPUs took 49 s), past the dev stack's 120 s meant for a demo site.
    # (stack.py reads the name it imported from devstack.sim at each start: set it there.)
    setattr(devstack_stack, "SIM_READY_TIMEOUT", max(SIM_READY_TIMEOUT, 120 + 0.1 * args.monitors))  # noqa: B010
    state_dir = Path(tempfile.mkdtemp(prefix="metalflow-bench-monitors-"))
    site = SiteOptions(
        hosts=args.monitors,
        dpus_per_host=1,
        timings="zero",
        initialised=True,
        port=free_port(),
        dpu_bmcs=False,
    )
    stack = DevStack(
        DevStackConfig(state_dir=state_dir, port=free_port(), ui_port=free_port(), site=site), say=say
    )
    result: dict[str, Any] = {"monitors": args.monitors, "ok": False}
    began = time.monotonic()
    try:
        await stack.start()
        client = await stack.client()
        worker = next(p for p in stack.processes if p.name == WORKER_NAME)
        gate = asyncio.Semaphore(50)
        started = 0

        async def monitor(n: int) -> None:
            nonlocal started
            async with gate:
                await start_monitor(
                    client, HostMonitorInput(host_id=f"host-{n + 1:03d}", requested_by="bench")
                )
            started += 1
            if started % max(1, args.monitors // 10) == 0:
                say(f"monitors started: {started}/{args.monitors}")

        await asyncio.wait_for(asyncio.gather(*(monitor(n) for n in range(args.monitors))), args.limit)
        result["start_seconds"] = round(time.monotonic() - began, 1)
        say("asking host-001 for one reboot among the monitors")
        result["backlog_at_ask"] = await backlog(client)
        request = OperationRequest(requested_by="bench", reason="bench_monitors", policy=POLICY)
        ended: datetime | None = None
        reboot_began = time.monotonic()
        try:
            # Bounded too: the entity's first task may queue behind every monitor's (2026-11-23:
            # 10,000 monitors, the update not accepted 15 minutes later).
            accepted = await asyncio.wait_for(
                send_update(
                    client, HostWorkflowInput(host_id="host-001", policy=POLICY), REQUEST_REBOOT_UPDATE,
                    request, OperationAccepted,
                ),
                max(60.0, args.limit - (time.monotonic() - began)),
            )  # fmt: skip
            result["accepted_seconds"] = round(time.monotonic() - reboot_began, 1)
            remaining = max(60.0, args.limit - (time.monotonic() - began))
            operation = client.get_workflow_handle(accepted.workflow_id)
            await asyncio.wait_for(operation.result(), remaining)
            ended = (await operation.describe()).close_time
            log = httpx.get(f"{stack.sim_info['url']}/sim/hosts/host-001/power-log", timeout=30).json()
            cycles = sum(1 for entry in log if entry["to"] == "On")
            result["power_cycles"] = cycles
            result["ok"] = cycles == 1
        except (TimeoutError, Exception) as err:  # noqa: BLE001 - the figure is whether it was served
            result["error"] = f"{type(err).__name__}: {err}"
        result["reboot_seconds"] = round(time.monotonic() - reboot_began, 1)
        result["worker_peak_mb"] = round(rss_mb(worker.pid), 1)
        running = await client.count_workflows(
            f'{names.OPERATION.name}="{names.MONITOR}" AND ExecutionStatus="Running"'
        )
        result["monitors_running"] = running.count
        if args.drain:
            await drain(client, args, began, result)
        if ended is not None:
            remaining = max(60.0, args.limit - (time.monotonic() - began))
            try:
                started_by, watching_by = await asyncio.wait_for(
                    backlog_at(client, args.monitors, ended), remaining
                )
                result["monitors_started_by_reboot_end"] = started_by
                result["monitors_watching_by_reboot_end"] = watching_by
            except Exception as err:  # noqa: BLE001 - a figure the run could not read stays out
                result["backlog_error"] = f"{type(err).__name__}: {err}"
    except TimeoutError:
        result["error"] = f"starting {args.monitors} monitors took longer than {args.limit:g} s"
    finally:
        await stack.stop()
        if not args.keep:
            shutil.rmtree(state_dir, ignore_errors=True)
    return result


async def backlog(client: Client) -> dict[str, dict[int, int]]:
    """The task queue's approximate backlog per priority key, workflow and activity tasks."""
    found: dict[str, dict[int, int]] = {}
    for kind, queue_type in (
        ("workflow", TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW),
        ("activity", TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY),
    ):
        described = await client.workflow_service.describe_task_queue(
            DescribeTaskQueueRequest(
                namespace=client.namespace,
                task_queue=TaskQueue(name=names.TASK_QUEUE),
                task_queue_type=queue_type,
                report_stats=True,
            )
        )
        found[kind] = {
            key: stats.approximate_backlog_count
            for key, stats in sorted(described.stats_by_priority_key.items())
        }
    return found


async def drain(client: Client, args: argparse.Namespace, began: float, result: dict[str, Any]) -> None:
    """Wait, within the limit, until no task of the queue waits; then count the watching monitors."""
    say("waiting for the monitors' backlog to drain")
    left: dict[str, dict[int, int]] = {}
    while time.monotonic() - began < args.limit:
        left = await backlog(client)
        if not any(n for counts in left.values() for n in counts.values()):
            result["drained_seconds"] = round(time.monotonic() - began, 1)
            break
        await asyncio.sleep(10)
    else:
        result["backlog_left"] = left
    now = datetime.now(UTC)
    try:
        _, result["monitors_watching_at_end"] = await asyncio.wait_for(
            backlog_at(client, args.monitors, now), max(120.0, args.limit - (time.monotonic() - began))
        )
    except Exception as err:  # noqa: BLE001 - a figure the run could not read stays out
        result["drain_error"] = f"{type(err).__name__}: {err}"


async def backlog_at(client: Client, monitors: int, ended: datetime) -> tuple[int, int]:
    """How many monitors had their first workflow task started, and their join (the site watch's
    `join_site_dpf_watch`) completed, by `ended` (server clock: the reboot's close time)."""
    gate = asyncio.Semaphore(50)

    async def one(n: int) -> tuple[bool, bool]:
        started = joined = False
        join_ids: set[int] = set()
        handle = client.get_workflow_handle(names.monitor_workflow_id(f"host-{n + 1:03d}"))
        async with gate:
            async for event in handle.fetch_history_events(page_size=50):
                at = event.event_time.ToDatetime(tzinfo=UTC)
                if at > ended:
                    break
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                    started = True
                scheduled = event.activity_task_scheduled_event_attributes
                if event.HasField("activity_task_scheduled_event_attributes"):
                    if scheduled.activity_type.name == "join_site_dpf_watch":
                        join_ids.add(event.event_id)
                completed = event.activity_task_completed_event_attributes
                if event.HasField("activity_task_completed_event_attributes"):
                    if completed.scheduled_event_id in join_ids:
                        joined = True
                        break
        return started, joined

    seen = await asyncio.gather(*(one(n) for n in range(monitors)))
    return sum(1 for s, _ in seen if s), sum(1 for _, j in seen if j)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--monitors", type=int, default=10_000)
    parser.add_argument("--limit", type=float, default=900.0, help="seconds for the whole run")
    parser.add_argument("--keep", action="store_true", help="keep the state dir (logs, history)")
    parser.add_argument(
        "--drain", action="store_true", help="after the reboot, wait until the monitors' backlog is empty"
    )
    print(json.dumps(asyncio.run(run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
