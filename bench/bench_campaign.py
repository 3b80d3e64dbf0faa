"""A campaign over many hosts: the longest workflow history and the worker's peak memory.

    .venv/bin/python bench/bench_campaign.py [--hosts 10000] [--skipped 9000] [--max-in-flight 200]
        [--limit 1500] [--sweep-sample 1000]

Runs the dev stack (as `bench_fleet.py` does: the dev server with its SQLite file, the simulated
site with zero device delays, every DPU initialised Ready, one worker `python -m worker`), one
DPU per host, and starts `campaign/bench` exactly as `metalflow campaign start` does: a
reprovision of every host (`selection.all`), one canary, then batches of `--batch-size` under
`--max-in-flight`, one host per BMC at a time. `--skipped` hosts (9 of every 10 by default) have
an instance assigned in the site file, so the campaign (skipping assigned hosts, the default)
leaves them out: the 10,000-host bound of its state and payloads is measured with 9,000 skipped.
DPF in the simulated site completes a reprovision in zero time, so the campaign measures
metalflow's own cost per host. Afterwards, `--sweep-sample` finished hosts are swept once by the
campaign's own sweep activity (outside a worker): the time of one parallel sweep at that many in
flight.

Figures (stdout, one JSON object; progress on stderr):
- `max_history_events`: the longest history among every run of the campaign (it continues as
  new) and every workflow of a sample of `--history-sample` finished hosts (entity, operation,
  reboots), with which workflow it was;
- `worker_peak_mb`: the worker's peak resident memory (VmHWM) over the run;
- `done`, `skipped`, `failed`, `remaining`, `runs`, `seconds`, `hosts_per_s`; `finished` is
  false when `--limit` passed first (the figures are then those of the part that ran);
- `max_event_bytes`: the largest history event of every run of the campaign (its start with the
  continue-as-new input, an activity's result, its completion with the result), with its type:
  Temporal refuses a payload over 2 MB (docs/DOMAIN.md section 6);
- `sweep_seconds`, `sweep_hosts`: one sweep of that many in-flight hosts.
Bounded: every wait has a limit.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import dataclasses  # noqa: E402
from datetime import timedelta  # noqa: E402

from bench_fleet import history_events  # noqa: E402
from bench_monitors import rss_mb  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.client import Client, WorkflowHandle  # noqa: E402
from temporalio.common import SearchAttributePair, TypedSearchAttributes  # noqa: E402
from temporalio.testing import ActivityEnvironment  # noqa: E402

import metalflow.devstack.stack as devstack_stack  # noqa: E402
from activities.campaign import CampaignActivities  # noqa: E402
from contracts import names, workflow_api  # noqa: E402
from contracts.models.campaign import (  # noqa: E402
    CampaignHost,
    CampaignInput,
    CampaignResult,
    CampaignStatus,
    CampaignTarget,
    FailureBudget,
    HostSelection,
    InFlight,
    Limits,
    SweepInput,
    TargetKind,
)
from contracts.models.control import STATUS_QUERY  # noqa: E402
from contracts.models.host import OperationPolicy  # noqa: E402
from metalflow.devstack.sim import SIM_READY_TIMEOUT, SiteOptions  # noqa: E402
from metalflow.devstack.stack import WORKER_NAME, DevStack, DevStackConfig  # noqa: E402
from metalflow.runtime.ports import free_port  # noqa: E402
from simulators.site import default_site, dump_site  # noqa: E402

NAME = "bench"
# Zero device delays; limits generous enough that a loaded machine never escalates a host.
POLICY = OperationPolicy(power_down_wait_seconds=0.0, reboot_wait_seconds=600.0, phase_timeout_seconds=1800.0)


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


async def start_campaign(client: Client, args: argparse.Namespace) -> WorkflowHandle[Any, CampaignResult]:
    """Start `campaign/bench` as `metalflow campaign start` does."""
    request = CampaignInput(
        name=NAME,
        target=CampaignTarget(kind=TargetKind.REPROVISION),
        selection=HostSelection(all=True),
        canary=1,
        limits=Limits(batch_size=args.batch_size, max_in_flight=args.max_in_flight, max_per_bmc=1),
        budget=FailureBudget(max_percent=10.0),
        requested_by="bench",
        reason="bench_campaign",
        host_policy=POLICY,
    )
    return await client.start_workflow(
        workflow_api.CampaignWorkflow.run,
        request,
        id=names.campaign_workflow_id(NAME),
        task_queue=names.TASK_QUEUE,
        static_summary=f"bench campaign: reprovision of all {args.hosts} hosts",
        search_attributes=TypedSearchAttributes(
            [
                SearchAttributePair(names.OPERATION, names.CAMPAIGN_OPERATION),
                SearchAttributePair(names.CAMPAIGN, NAME),
            ]
        ),
    )


async def campaign_histories(client: Client, largest: dict[str, Any]) -> dict[str, int]:
    """Events of every run of the campaign (each continue-as-new is a run of its own); the
    largest event of them all goes into `largest` (bytes, type)."""
    counts: dict[str, int] = {}
    workflow_id = names.campaign_workflow_id(NAME)
    async for execution in client.list_workflows(f'WorkflowId="{workflow_id}"'):
        history = await client.get_workflow_handle(workflow_id, run_id=execution.run_id).fetch_history()
        counts[f"{workflow_id} run {execution.run_id}"] = len(history.events)
        for event in history.events:
            size = event.ByteSize()
            if size > largest.get("bytes", 0):
                largest.update(bytes=size, type=EventType.Name(event.event_type))
    return counts


def bench_site(args: argparse.Namespace, directory: Path) -> Path:
    """The generated site of `--hosts` hosts (1 DPU, no DPU BMC), `--skipped` of them assigned
    (all but every n-th host, spread over the fleet)."""
    site = default_site(args.hosts, 1, name="bench", dpu_bmcs=False)
    run_every = max(1, round(args.hosts / max(1, args.hosts - args.skipped))) if args.skipped else 1
    assigned = 0
    for i, host in enumerate(site.hosts):
        if args.skipped and i % run_every and assigned < args.skipped:
            host.instance = f"vm-{i}"
            assigned += 1
    path = directory / "bench-site.yaml"
    path.write_text(dump_site(site))
    return path


async def sweep_once(client: Client, sample: int) -> dict[str, Any]:
    """One run of the campaign's sweep activity over `sample` finished hosts' operations (as
    if in flight), outside a worker: seconds and hosts read."""
    inventory_free = CampaignActivities(None, None, client)  # type: ignore[arg-type]  # the sweep uses Temporal only
    flights = []
    async for execution in client.list_workflows(
        f'{names.OPERATION.name}="reprovision" AND ExecutionStatus="Completed"', limit=sample
    ):
        host = _host_of(execution.id)
        flights.append(InFlight(host=CampaignHost(host_id=host), workflow_id=execution.id,
                                started_at=execution.start_time))  # fmt: skip
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, task_queue=names.TASK_QUEUE, heartbeat_timeout=timedelta(seconds=30)
    )
    began = time.monotonic()
    swept = await env.run(inventory_free.sweep_campaign_hosts, SweepInput(in_flight=tuple(flights)))
    return {"sweep_seconds": round(time.monotonic() - began, 2), "sweep_hosts": len(flights),
            "sweep_finished": len(swept.finished)}  # fmt: skip


async def watch_progress(handle: WorkflowHandle[Any, CampaignResult], pid: int, peak: list[float]) -> None:
    """Every 30 s: the campaign's counts and the worker's peak memory so far, on stderr."""
    while True:
        await asyncio.sleep(30)
        peak[0] = max(peak[0], rss_mb(pid))
        try:
            status: CampaignStatus = await handle.query(
                STATUS_QUERY, result_type=CampaignStatus, rpc_timeout=None
            )
            say(
                f"campaign: {status.phase}, done {status.done}, failed {status.failed}, in flight "
                f"{len(status.in_flight)}, remaining {status.remaining}, run {status.runs}; "
                f"worker peak {peak[0]:.0f} MB"
            )
        except Exception as err:  # noqa: BLE001 - progress is informative only
            say(f"campaign status not available now ({type(err).__name__}); worker peak {peak[0]:.0f} MB")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    # The simulated site builds every host before it answers: minutes for 10,000 on a loaded
    # machine (1,000 hosts x 2 DPUs took 49 s), past the dev stack's 120 s meant for a demo site.
    # (stack.py reads the name it imported from devstack.sim at each start: set it there.)
    setattr(devstack_stack, "SIM_READY_TIMEOUT", max(SIM_READY_TIMEOUT, 120 + 0.1 * args.hosts))  # noqa: B010
    state_dir = Path(tempfile.mkdtemp(prefix="metalflow-bench-campaign-"))
    site = SiteOptions(
        hosts=args.hosts, dpus_per_host=1, timings="zero", initialised=True, port=free_port(), dpu_bmcs=False,
        site_file=bench_site(args, state_dir),
    )  # fmt: skip
    stack = DevStack(
        DevStackConfig(state_dir=state_dir, port=free_port(), ui_port=free_port(), site=site), say=say
    )
    result: dict[str, Any] = {"hosts": args.hosts, "skipped_assigned": args.skipped}
    result.update(max_in_flight=args.max_in_flight, finished=False)
    try:
        say(f"starting the dev stack in {state_dir} ({args.hosts} hosts x 1 DPU)")
        await stack.start()
        client = await stack.client()
        worker = next(p for p in stack.processes if p.name == WORKER_NAME)
        began = time.monotonic()
        handle = await start_campaign(client, args)
        say(f"campaign started: {args.hosts} hosts, {args.max_in_flight} in flight")
        peak = [0.0]
        progress = asyncio.ensure_future(watch_progress(handle, worker.pid, peak))
        try:
            outcome: CampaignResult = await asyncio.wait_for(handle.result(), args.limit)
            result.update(
                finished=True,
                outcome=outcome.outcome,
                done=outcome.done,
                skipped=outcome.skipped,
                failed=outcome.failed,
                runs=outcome.runs,
            )
        except TimeoutError:
            say(f"the campaign had not ended after {args.limit:g} s: figures of the part that ran")
            status: CampaignStatus = await handle.query(
                STATUS_QUERY, result_type=CampaignStatus, rpc_timeout=None
            )
            result.update(
                done=status.done, skipped=status.skipped, failed=status.failed, remaining=status.remaining,
                runs=status.runs,
            )  # fmt: skip
        finally:
            progress.cancel()
        seconds = time.monotonic() - began
        result["seconds"] = round(seconds, 1)
        result["hosts_per_s"] = round(result["done"] / seconds, 3)
        result["worker_peak_mb"] = round(max(peak[0], rss_mb(worker.pid)), 1)
        largest: dict[str, Any] = {}
        histories = await campaign_histories(client, largest)
        result["max_event_bytes"] = largest.get("bytes")
        result["max_event_type"] = largest.get("type")
        finished = [
            _host_of(execution.id)
            async for execution in client.list_workflows(
                f'{names.OPERATION.name}="reprovision" AND ExecutionStatus="Completed"',
                limit=args.history_sample,
            )
        ]
        for host_id in finished:
            histories.update(await history_events(client, host_id))
        longest = max(histories, key=lambda k: histories[k]) if histories else None
        result["max_history_events"] = histories.get(longest) if longest else None
        result["max_history_workflow"] = longest
        result["campaign_runs_events"] = sorted(v for k, v in histories.items() if k.startswith("campaign/"))
        result["hosts_sampled"] = len(finished)
        if args.sweep_sample:
            say(f"one sweep of {args.sweep_sample} finished hosts")
            result.update(await sweep_once(client, args.sweep_sample))
    finally:
        await stack.stop()
        if not args.keep:
            shutil.rmtree(state_dir, ignore_errors=True)
    return result


def _host_of(workflow_id: str) -> str:
    return workflow_id.rsplit("/", 1)[-1]  # reprovision/<host>


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=10_000)
    parser.add_argument("--skipped", type=int, default=9_000, help="hosts with an instance (left out)")
    parser.add_argument("--sweep-sample", type=int, default=1000, help="hosts one measured sweep reads")
    parser.add_argument("--max-in-flight", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument(
        "--history-sample", type=int, default=5, help="finished hosts whose histories are counted"
    )
    parser.add_argument("--limit", type=float, default=1500.0, help="seconds the campaign may take")
    parser.add_argument("--keep", action="store_true", help="keep the state dir (logs, history)")
    print(json.dumps(asyncio.run(run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
