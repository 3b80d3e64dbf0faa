"""The demo job `metalflow dev` runs: provision every simulated host, then reprovision them,
then roll the site's Grove workload `default/inference` coherently (`demo_rollout`), then run
a campaign over the hosts with an injected DPU failure its budget absorbs (`demo_campaign`).

Everything goes through the hosts' entity workflows (`host/<id>`), exactly as `metalflow host
provision|reprovision` does: the first request creates a host's entity, which runs the operation
as a child workflow (`provision/<id>`, `reprovision/<id>`, one `reboot/...` per power
cycle). The first host gets an instance before its reprovision, so the demo shows the approval
rule: the request waits until the demo approves it as the operator. At the end the demo reads
each host's BMC power log from the simulator and compares it with the reboots DPF asked for.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import yaml
from temporalio.client import Client

from contracts import names
from contracts.host_requests import PROVISION, REPROVISION, EntityRequest
from contracts.models.control import OperatorAnswer, OperatorRequest
from contracts.models.dpf import PROVISIONING_GROUP
from contracts.models.host import (
    APPROVE_UPDATE,
    ASSIGN_INSTANCE_UPDATE,
    RELEASE_INSTANCE_UPDATE,
    AssignInstanceRequest,
    HostWorkflowInput,
    OperationAccepted,
    OperationPolicy,
    OperationRequest,
)
from contracts.models.inventory import DPF_NAMESPACE
from contracts.wording import plural
from metalflow.devstack.demo_campaign import run_campaign_demo, site_of
from metalflow.devstack.demo_rollout import run_rollout_demo
from metalflow.devstack.stack import DevStackConfig
from metalflow.hosts import (
    COMPLETED,
    FAILED,
    HostRequestError,
    default_operator,
    follow_operation,
    host_status,
    recorded_status,
    send_update,
)
from metalflow.progress import Progress

DEMO_INSTANCE = "demo-tenant-instance"
DEMO_REASON = "metalflow dev demo"
# The simulated BMCs power off in half a second; the bare-metal manager's 2 minutes would only
# make the demo wait. The other limits stay generous so a slow machine never escalates.
DEMO_POLICY = OperationPolicy(
    power_down_wait_seconds=1.0, reboot_wait_seconds=120.0, phase_timeout_seconds=600.0
)
DPUNODE_LABEL = f"{PROVISIONING_GROUP}/dpunode-name"
BF4_REBOOTS = 2  # BF4 DPUs ask for a second reboot in one provisioning (docs/DOMAIN.md section 2.5)


@dataclass(frozen=True)
class DemoSite:
    """The running simulated site: its site file and its URL (for the BMC power logs)."""

    site_file: Path
    sim_url: str
    kubeconfig: Path | None = None  # its Kubernetes API's credentials (the admin token)


@dataclass(frozen=True)
class DemoHost:
    host_id: str
    models: tuple[str, ...]  # one per DPU

    @property
    def reboots_per_operation(self) -> int:
        """Host reboots DPF asks for in one provisioning of all its DPUs."""
        if not self.models:
            return 0
        return BF4_REBOOTS if "BF4" in self.models else 1

    def describe(self) -> str:
        kinds = sorted(set(self.models))
        return f"{self.host_id} ({len(self.models)} x {'/'.join(kinds) or 'no DPU'})"


def read_hosts(site_file: Path) -> list[DemoHost]:
    """The hosts of a site file, with their DPU models."""
    site: dict[str, Any] = yaml.safe_load(site_file.read_text()) or {}
    return [
        DemoHost(host["id"], tuple(d.get("model", "BF3") for d in host.get("dpus", [])))
        for host in site.get("hosts", [])
    ]


def ui_list_url(config: DevStackConfig, query: str) -> str:
    """The Temporal UI's workflow list filtered by a visibility query."""
    return f"{config.ui_url}/namespaces/{config.namespace}/workflows?query={quote(query, safe='')}"


async def run_demo(
    client: Client,
    config: DevStackConfig,
    site: DemoSite,
    say: Callable[[str], None] = print,
    task_queue: str = names.TASK_QUEUE,
    progress: Progress | None = None,
) -> bool:
    """Provision, then reprovision, every host of the site; True when every operation succeeded.

    Lines go to `progress` (live on a terminal), else as plain timestamped lines to `say`.
    """
    progress = progress or Progress(write=say)
    say = progress.note
    hosts = [host for host in read_hosts(site.site_file) if host.models]
    operator = default_operator()
    began = time.monotonic()
    say(f"demo: {plural(len(hosts), 'host')}: {', '.join(host.describe() for host in hosts)}")
    say(f"demo: watch in the Temporal UI: {config.ui_url}")
    entities = ui_list_url(config, 'Operation="host"')
    say(f"demo:   every host's entity (Phase idle / running ... / awaiting-approval): {entities}")
    if hosts:
        first = hosts[0].host_id
        everything = ui_list_url(config, f'HostId="{first}"')
        say(f"demo:   everything on {first} (entity, provision, reprovision, reboots): {everything}")
        reprovision = config.workflow_url(names.reprovision_workflow_id(first))
        say(
            f"demo:   its reprovision: {reprovision} (current details, the `status` query, "
            "the HostRebootWorkflow children, the entity's approve update)"
        )
    requests = _Requests(client, operator, task_queue, progress)
    # The BMC power logs are kept across a restart of the simulator (simulators/redfish/keep.py)
    # and the entities' generations count every reset since the first run: the audit compares
    # what each log shows and what the workflows counted, both since now.
    generations = {host.host_id: await _generation(client, host.host_id) for host in hosts}
    logged = await _power_logs(site, hosts)
    # A site restored from the state dir (a restarted `metalflow dev`) has its hosts' DPUs
    # already: provisioning them again would wait for reboots DPF never asks for.
    present = await _provisioned(site, hosts)
    if present:
        say(f"demo: DPF has the DPUs of {', '.join(present)} already (site restored): not provisioning them")
    to_provision = [host for host in hosts if host.host_id not in present]
    ok = True
    if to_provision:
        ok = await requests.round(PROVISION, to_provision)
    if ok and hosts:
        # The approval rule: a host with an instance is never reprovisioned without approval.
        answer = await requests.instance(hosts[0].host_id, ASSIGN_INSTANCE_UPDATE)
        say(f"demo: {hosts[0].host_id}: {answer} (its reprovision must now be approved)")
        ok = await requests.round(REPROVISION, hosts)
        await requests.instance(hosts[0].host_id, RELEASE_INSTANCE_UPDATE)
    if ok:
        ok = await run_rollout_demo(client, config, say, task_queue)
    counted = {h: await _generation(client, h) - before for h, before in generations.items()}
    operations = None if not ok else 1 if present else 2
    ok = await _report_power_cycles(site, hosts, say, operations, counted, logged) and ok
    if ok:  # last: its reprovisions and the injected failure come after the power logs above
        ok = await run_campaign_demo(
            client, config, site.sim_url, site_of(site.site_file), DEMO_POLICY, progress, task_queue
        )
    say(f"demo: {'done' if ok else 'FAILED'} in {time.monotonic() - began:.1f} s")
    return ok


async def _provisioned(site: DemoSite, hosts: list[DemoHost]) -> list[str]:
    """The hosts whose every DPU DPF has now (one list request to the site's Kubernetes API)."""
    url = f"{site.sim_url}/apis/{PROVISIONING_GROUP}/v1alpha1/namespaces/{DPF_NAMESPACE}/dpus"
    headers = {}
    if site.kubeconfig is not None:
        config = yaml.safe_load(site.kubeconfig.read_text()) or {}
        token = ((config.get("users") or [{}])[0].get("user") or {}).get("token")
        if token:
            headers["Authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(timeout=10) as http:
        response = await http.get(url, headers=headers)
        response.raise_for_status()
    nodes: dict[str, int] = {}
    for dpu in response.json().get("items", []):
        node = (dpu["metadata"].get("labels") or {}).get(DPUNODE_LABEL, "")
        nodes[node] = nodes.get(node, 0) + 1
    return [host.host_id for host in hosts if nodes.get(f"node-{host.host_id}", 0) >= len(host.models)]


@dataclass
class _Requests:
    client: Client
    operator: str
    task_queue: str
    progress: Progress

    def say(self, text: str) -> None:
        self.progress.note(text)

    async def round(self, kind: EntityRequest[OperationRequest], hosts: list[DemoHost]) -> bool:
        self.say(f"demo: {kind.operation} {plural(len(hosts), 'host')} at once")
        results = await asyncio.gather(*(self._one(kind, host) for host in hosts))
        return all(results)

    async def _one(self, kind: EntityRequest[OperationRequest], host: DemoHost) -> bool:
        key = f"demo: {kind.operation} {host.host_id}"
        prefix = f"{key}: "
        request = OperationRequest(requested_by=self.operator, reason=DEMO_REASON, policy=DEMO_POLICY)
        try:
            accepted = await send_update(
                self.client,
                self._entity(host.host_id),
                kind.update,
                request,
                OperationAccepted,
                self.task_queue,
            )
            self.say(f"{prefix}{accepted.message}")
            if accepted.awaiting_approval:
                approval = OperatorRequest(requested_by=self.operator, reason=DEMO_REASON)
                answer = await send_update(
                    self.client, self._entity(host.host_id), APPROVE_UPDATE, approval, OperatorAnswer,
                    self.task_queue,
                )  # fmt: skip
                self.say(f"{prefix}approved as {self.operator}: {answer.message}")
        except HostRequestError as err:
            self.say(f"{prefix}refused: {err}")
            return False
        ending, summary = await follow_operation(
            self.client, accepted.workflow_id, self.progress, key, host.host_id
        )
        status = await recorded_status(self.client, host.host_id, accepted.workflow_id)
        said = "FAILED: " + summary if ending == FAILED else summary  # an abort says "aborted by ..."
        self.progress.finish(key, f"{said}; boot generation {status.boot_generation}")
        return ending == COMPLETED

    async def instance(self, host_id: str, update: str) -> str:
        request = AssignInstanceRequest(instance=DEMO_INSTANCE, requested_by=self.operator)
        try:
            answer = await send_update(
                self.client, self._entity(host_id), update, request, OperatorAnswer, self.task_queue
            )
        except HostRequestError as err:
            return f"refused: {err}"
        return answer.message

    def _entity(self, host_id: str) -> HostWorkflowInput:
        return HostWorkflowInput(host_id=host_id, policy=DEMO_POLICY)


def power_cycles(entries: list[dict[str, Any]]) -> int:
    """Power cycles in a BMC power log: each one takes the host Off once."""
    return sum(1 for entry in entries if entry.get("to") == "Off")


async def _generation(client: Client, host_id: str) -> int:
    """The host's boot generation as its entity counts it (0 before it has one)."""
    try:
        return (await host_status(client, host_id)).boot_generation
    except HostRequestError:
        return 0


async def _power_logs(site: DemoSite, hosts: list[DemoHost]) -> dict[str, int]:
    """How many entries each host's BMC power log holds now (kept from before a restart too)."""
    async with httpx.AsyncClient(base_url=site.sim_url, timeout=10) as http:
        return {h.host_id: len((await http.get(f"/sim/hosts/{h.host_id}/power-log")).json()) for h in hosts}


async def _report_power_cycles(
    site: DemoSite,
    hosts: list[DemoHost],
    say: Callable[[str], None],
    operations: int | None,
    counted: dict[str, int],
    before: dict[str, int],
) -> bool:
    """Each host's BMC power log since the demo began (`before`: its entries then) against the
    reboots DPF asked for (when every operation completed) and against what the workflows
    counted (always, the failure path too: the boot generation moves once per reset that
    happened). False on a mismatch."""
    agree = True
    async with httpx.AsyncClient(base_url=site.sim_url, timeout=10) as http:
        for host in hosts:
            entries = (await http.get(f"/sim/hosts/{host.host_id}/power-log")).json()
            logged = power_cycles(entries[before[host.host_id] :])
            line = f"demo: {host.host_id} BMC power log: {plural(logged, 'power cycle')}"
            if operations is not None:
                line += f" (DPF asked for {operations * host.reboots_per_operation})"
            line += f"; the workflows counted {counted[host.host_id]}"
            if counted[host.host_id] != logged:
                line += " (MISMATCH)"
                agree = False
            say(line)
        violations = (await http.get("/sim/violations")).json()
    say(f"demo: the simulator recorded {plural(len(violations), 'protocol violation')}")
    for violation in violations[:10]:
        say(f"demo:   {violation['kind']} {violation['subject']}: {violation['detail']}")
    return agree
