"""`make chaos`: N hosts reprovisioned under the `flaky` fault profile while the worker is
SIGKILLed every `--kill-every` seconds and restarted, the Temporal dev server (SQLite file) is
SIGKILLed and restarted once, and the simulated site drops every client's watch once.

    .venv/bin/python bench/chaos.py [--hosts 100] [--kill-every 20] [--limit 1800]

Runs the dev stack `metalflow dev` runs (`DevStack`) on free ports and a state dir of its own.
The hosts' reprovisions are asked through their entities, as `metalflow host reprovision` does
(`request_reprovisions`: the one function a campaign replaces once metalflow has campaigns).
Ends with ONE JSON line on stdout (progress on stderr):

- hosts, ready (reprovision completed and every DPU Ready at the site), failed, and
  failed_without_reason (a failure whose message is empty);
- extra_power_cycles: power cycles the BMCs logged beyond the reboots DPF asked for, per host;
- violations: protocol violations the simulated site recorded, less the sessions a SIGKILLed
  worker held when it died expiring at their BMCs (`violations_recorded` counts them all);
- lost_workflows: hosts whose operation never ended (or vanished) within `--limit`;
- secrets_found: every BMC password and the API token, searched for in every workflow history
  and every log of the run (places where one was found);
- sessions_leaked: Redfish sessions still open after the last worker stopped gracefully, beyond
  those a SIGKILLed worker held when it died (a killed process cannot log out; its sessions
  live until the BMC's idle timeout, by design). `sessions_open_after_stop` counts them all.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from temporalio.client import (  # noqa: E402
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.service import RPCError  # noqa: E402

from contracts import names  # noqa: E402
from contracts.models.host import (  # noqa: E402
    REQUEST_REPROVISION_UPDATE,
    HostWorkflowInput,
    OperationAccepted,
    OperationPolicy,
    OperationRequest,
)
from metalflow.devstack.process import ManagedProcess  # noqa: E402
from metalflow.devstack.sim import SiteOptions  # noqa: E402
from metalflow.devstack.stack import (  # noqa: E402
    SERVER_READY_TIMEOUT,
    WORKER_NAME,
    WORKER_READY_TIMEOUT,
    DevStack,
    DevStackConfig,
)
from metalflow.hosts import HostRequestError, send_update  # noqa: E402
from metalflow.runtime.ports import free_port  # noqa: E402
from simulators.violations import BMC_SESSION_EXPIRED  # noqa: E402

SERVER_NAME = "Temporal dev server"
# Zero device delays; limits generous enough that a loaded machine never escalates a host.
POLICY = OperationPolicy(power_down_wait_seconds=0.0, reboot_wait_seconds=600.0, phase_timeout_seconds=1800.0)
ENDED = {WorkflowExecutionStatus.COMPLETED, WorkflowExecutionStatus.FAILED}


def say(message: str) -> None:
    print(f"chaos: {message}", file=sys.stderr, flush=True)


async def request_reprovisions(
    client: Client, hosts: list[str], policy: OperationPolicy = POLICY, say_every: int = 0
) -> tuple[dict[str, str], int]:
    """Ask every host's entity for a reprovision; the operation's workflow id per host, and how
    many requests had to be sent again.

    A request is sent again when the server is unreachable (restarting) or the entity's first
    workflow task failed or timed out (a saturated worker: Temporal refuses the update with
    "Workflow Task in failed state" until a task succeeds); a host whose reprovision already
    runs (asked before a crash) keeps that one. A campaign replaces this function when metalflow
    has campaigns.
    """
    gate = asyncio.Semaphore(20)
    retries = 0
    asked = 0

    async def one(host_id: str) -> tuple[str, str]:
        nonlocal retries, asked
        request = OperationRequest(requested_by="chaos", reason="make chaos", policy=policy)
        for _ in range(300):
            try:
                async with gate:
                    accepted = await send_update(
                        client, HostWorkflowInput(host_id=host_id, policy=policy), REQUEST_REPROVISION_UPDATE,
                        request, OperationAccepted,
                    )  # fmt: skip
                asked += 1
                if say_every and asked % say_every == 0:
                    say(f"reprovisions asked: {asked}/{len(hosts)}")
                return host_id, accepted.workflow_id
            except HostRequestError as err:
                if "in flight" in str(err):
                    return host_id, names.reprovision_workflow_id(host_id)
                raise
            except (RPCError, WorkflowUpdateRPCTimeoutOrCancelledError):
                retries += 1
                await asyncio.sleep(2)
        raise RuntimeError(f"could not ask {host_id} for a reprovision")

    found = dict(await asyncio.gather(*(one(h) for h in hosts)))
    return found, retries


class Chaos:
    """Kills and restarts the stack's processes; counts what it did."""

    def __init__(self, stack: DevStack) -> None:
        self.stack = stack
        self.worker_kills = 0
        self.server_kills = 0
        self.watch_drops = 0
        # Sessions open per BMC when a worker was SIGKILLed: it cannot log out of them, so they
        # live until the BMC's idle timeout by design; they are not counted as leaked.
        self.held_by_killed: dict[str, int] = {}

    def _process(self, name: str) -> ManagedProcess:
        return next(p for p in self.stack.processes if p.name == name)

    async def _kill_and_restart(
        self, name: str, restarted: ManagedProcess, timeout: float, dead: Callable[[], None] = lambda: None
    ) -> None:
        old = self._process(name)
        os.killpg(old.pid, signal.SIGKILL)
        await old.wait_exit()
        dead()  # what the dead process left, read before its successor starts
        index = self.stack.processes.index(old)
        self.stack.processes[index] = restarted
        await restarted.start()
        await restarted.wait_ready(timeout)

    async def kill_worker(self) -> None:
        say(f"SIGKILL the worker (pid {self._process(WORKER_NAME).pid}) and start another")

        def held() -> None:
            # Counted once it is dead, before the next starts: the sessions it held and can never
            # log out of. Counted before the kill, a session it opened in between read as leaked.
            for bmc, n in open_sessions(self.stack.sim_info["url"]).items():
                self.held_by_killed[bmc] = self.held_by_killed.get(bmc, 0) + n

        await self._kill_and_restart(WORKER_NAME, self.stack._worker(), WORKER_READY_TIMEOUT, held)
        self.worker_kills += 1

    async def kill_server(self) -> None:
        old = self._process(SERVER_NAME)
        say(f"SIGKILL the Temporal dev server (pid {old.pid}) and start it again on its database")
        # Same gRPC port (every client holds it) but a UI port picked afresh: while the server was
        # dead another process on the machine may have taken the old one (seen: the restart
        # failed "can't set UI port ... address already in use" and the run was lost).
        argv = list(old.argv)
        ui_port = free_port()
        argv[argv.index("--ui-port") + 1] = str(ui_port)
        # The stack's readiness check reads the UI at the configured port: point it at the new one.
        self.stack.config = dataclasses.replace(self.stack.config, ui_port=ui_port)
        server = ManagedProcess(
            name=SERVER_NAME, argv=argv, log_path=old.log_path, ready=old.ready, lifeline="wrapper"
        )
        # A server restarted on its SQLite file recovers every open workflow first: on the shared
        # machine that took past the dev stack's 90 s (the run then ended without figures).
        await self._kill_and_restart(SERVER_NAME, server, 4 * SERVER_READY_TIMEOUT)
        self.server_kills += 1

    async def drop_watches(self) -> int:
        response = httpx.post(f"{self.stack.sim_info['url']}/sim/faults/api/drop-watches", timeout=30)
        dropped: int = response.json()["dropped"]
        if dropped:
            say(f"the site dropped {dropped} watches")
            self.watch_drops += 1
        return dropped


def open_sessions(url: str) -> dict[str, int]:
    """Open Redfish sessions per BMC, as the simulated BMCs count them."""
    found: dict[str, int] = httpx.get(f"{url}/sim/sessions", timeout=30).json()
    return found


async def statuses(client: Client, operations: dict[str, str]) -> dict[str, WorkflowExecutionStatus | None]:
    found: dict[str, WorkflowExecutionStatus | None] = {}
    for host, workflow_id in operations.items():
        try:
            found[host] = (await client.get_workflow_handle(workflow_id).describe()).status
        except RPCError:
            found[host] = None
    return found


async def run(args: argparse.Namespace) -> dict[str, Any]:
    state_dir = Path(tempfile.mkdtemp(prefix="metalflow-chaos-"))
    site = SiteOptions(hosts=args.hosts, faults="flaky", seed=args.seed, timings="zero", initialised=True,
                       port=free_port())  # fmt: skip
    stack = DevStack(
        DevStackConfig(state_dir=state_dir, port=free_port(), ui_port=free_port(), site=site), say=say
    )
    chaos = Chaos(stack)
    try:
        await stack.start()
        client = await stack.client()
        url = stack.sim_info["url"]
        hosts = [h["id"] for h in yaml.safe_load(Path(stack.sim_info["site"]).read_text())["hosts"]]
        began = time.monotonic()
        asked = asyncio.ensure_future(request_reprovisions(client, hosts))
        plan = {args.server_kill_at: chaos.kill_server}
        watches_dropped = False
        next_worker_kill = args.kill_every
        operations: dict[str, str] = {}
        request_retries = 0
        while time.monotonic() - began < args.limit:
            await asyncio.sleep(1)
            elapsed = time.monotonic() - began
            for at in sorted(plan):
                if elapsed >= at:
                    await plan.pop(at)()
            if not watches_dropped and elapsed >= args.watch_drop_at:
                watches_dropped = await chaos.drop_watches() > 0  # again until a watch was open
            if elapsed >= next_worker_kill and chaos.worker_kills < args.max_worker_kills:
                await chaos.kill_worker()
                next_worker_kill = time.monotonic() - began + args.kill_every
            if asked.done() and not operations:
                operations, request_retries = asked.result()
                say(f"every host's reprovision asked ({len(operations)})")
            if (
                operations
                and not plan
                and watches_dropped
                and chaos.worker_kills >= min(1, args.max_worker_kills)
            ):
                try:
                    current = await statuses(client, operations)
                except RPCError:
                    continue
                if all(s in ENDED for s in current.values()):
                    break
        say(f"chaos over after {time.monotonic() - began:.0f} s; collecting")
        if not operations and asked.done():
            operations, request_retries = asked.result()
        result = await collect(client, stack, url, hosts, operations, chaos.held_by_killed)
        result.update(
            worker_kills=chaos.worker_kills,
            server_kills=chaos.server_kills,
            watch_drops=chaos.watch_drops,
            request_retries=request_retries,
            seconds=round(time.monotonic() - began, 1),
        )
        worker = next(p for p in stack.processes if p.name == WORKER_NAME)
        await worker.stop()  # graceful: a worker that stops cleanly logs out of every BMC
        stack.processes.remove(worker)
        left = open_sessions(url)
        result["sessions_open_after_stop"] = sum(left.values())
        result["sessions_held_by_killed_workers"] = sum(chaos.held_by_killed.values())
        result["sessions_left"] = left
        result["sessions_leaked"] = sum(
            max(0, n - chaos.held_by_killed.get(bmc, 0)) for bmc, n in left.items()
        )
        result["secrets_found"] = secrets_found(state_dir, await histories(client))
        return result
    finally:
        await stack.stop()
        if not args.keep:
            shutil.rmtree(state_dir, ignore_errors=True)


async def collect(
    client: Client,
    stack: DevStack,
    url: str,
    hosts: list[str],
    operations: dict[str, str],
    held_by_killed: dict[str, int],
) -> dict[str, Any]:
    ready = failed = without_reason = lost = 0
    for host in hosts:
        workflow_id = operations.get(host)
        status = None
        if workflow_id is not None:
            status = (await statuses(client, {host: workflow_id}))[host]
        if status == WorkflowExecutionStatus.COMPLETED and dpus_ready(stack, host):
            ready += 1
        elif status == WorkflowExecutionStatus.FAILED:
            failed += 1
            try:
                await client.get_workflow_handle(workflow_id or "").result()
            except WorkflowFailureError as err:
                cause = err.cause
                without_reason += 0 if cause is not None and str(cause).strip() else 1
        else:
            lost += 1
    timeline = httpx.get(f"{url}/sim/timeline", timeout=30).json()
    asked: dict[str, int] = {}
    for entry in timeline["reboots_asked"]:
        asked[entry["host"]] = asked.get(entry["host"], 0) + 1
    extra = 0
    for host in hosts:
        log = httpx.get(f"{url}/sim/hosts/{host}/power-log", timeout=30).json()
        extra += max(0, sum(1 for e in log if e["to"] == "On") - asked.get(host, 0))
    violations = httpx.get(f"{url}/sim/violations", timeout=30).json()
    kinds: dict[str, int] = {}
    # A SIGKILLed worker cannot log out: each session it held expires at its BMC's idle timeout
    # and the BMC records `bmc-session-expired`. Those (per BMC, up to the sessions open there
    # when the worker was killed) are expected; any other violation, or an expiry beyond them,
    # is a finding.
    excused = dict(held_by_killed)
    findings = 0
    for violation in violations:
        kinds[violation["kind"]] = kinds.get(violation["kind"], 0) + 1
        if violation["kind"] == BMC_SESSION_EXPIRED and excused.get(violation["subject"], 0) > 0:
            excused[violation["subject"]] -= 1
        else:
            findings += 1
    return {
        "hosts": len(hosts),
        "ready": ready,
        "failed": failed,
        "failed_without_reason": without_reason,
        "extra_power_cycles": extra,
        "violations": findings,
        "violations_recorded": len(violations),
        "violations_by_kind": kinds,
        "lost_workflows": lost,
    }


def dpus_ready(stack: DevStack, host: str) -> bool:
    info = stack.sim_info
    token = yaml.safe_load(Path(info["kubeconfig"]).read_text())["users"][0]["user"]["token"]
    # The `flaky` profile answers some API requests 503 (a Status, no items): ask again.
    for _ in range(50):
        response = httpx.get(
            f"{info['url']}/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpus",
            headers={"Authorization": f"Bearer {token}"}, timeout=30,
        )  # fmt: skip
        if response.status_code == 200:
            break
        time.sleep(0.2)
    response.raise_for_status()
    mine = [o for o in response.json()["items"] if o["spec"].get("dpuNodeName") == f"node-{host}"]
    return bool(mine) and all((o.get("status") or {}).get("phase") == "Ready" for o in mine)


async def histories(client: Client) -> list[str]:
    """Every workflow history of the run, as the UI would show it (JSON)."""
    found = []
    async for execution in client.list_workflows():
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        found.append(history.to_json())
    return found


def secrets_found(state_dir: Path, history_texts: list[str]) -> int:
    """Places (a history, a log file) holding any BMC password or the API token of the run."""
    secrets = [json.loads(p.read_text())["password"] for p in (state_dir / "credentials").glob("*.json")]
    secrets.append(yaml.safe_load((state_dir / "kubeconfig").read_text())["users"][0]["user"]["token"])
    texts = history_texts + [p.read_text(errors="replace") for p in state_dir.glob("*.log")]
    return sum(1 for text in texts if any(secret in text for secret in secrets if secret))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--hosts", type=int, default=100)
    parser.add_argument("--kill-every", type=float, default=20.0, help="seconds between worker SIGKILLs")
    parser.add_argument("--max-worker-kills", type=int, default=1_000)
    parser.add_argument("--server-kill-at", type=float, default=30.0, help="seconds in: kill the server once")
    parser.add_argument("--watch-drop-at", type=float, default=15.0, help="seconds in: drop every watch once")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=float, default=1800.0)
    parser.add_argument("--keep", action="store_true", help="keep the state dir (logs, history)")
    print(json.dumps(asyncio.run(run(parser.parse_args()))), flush=True)


if __name__ == "__main__":
    main()
