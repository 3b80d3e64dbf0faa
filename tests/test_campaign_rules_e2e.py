"""Issue 35, the campaign half: each case an operator found by trying, replayed end to end on the
simulated site (the real worker: every workflow and activity, the real CLI as a user runs it),
each failing on the code before the fix (cbe5650) and passing now.

The site: pairs of DPUDeployments, one per group as the simulated site makes them (a canary
group of one host, a fleet group), so each case has its own; one DPU per host; BFB campaigns
from the site's BFB to a second one. The rules these cases break are stated once, in the
campaign's decision code (workflows/campaign/admission.py, state.py), checked by a model of it
after every step (tests/fast/test_campaign_model.py), and listed in README ("Fleet campaigns").

1. A canary on `--canary-deployment` whose hosts cannot run (already at the target, an
   instance on the host) hung for ever; now the campaign stops and says why, putting the canary
   deployment back; `retry-failed` after a failed canary whose host was fixed meanwhile hung.
2. A canary whose hosts are left out (held by another campaign) was taken as passed and the
   fleet's deployment pointed at once; now it is refused before anything is pointed.
3. A skipped host (an instance in the inventory) still got the deployment change; now refused.
4. `campaign start` validated only the selection; now it runs `plan`'s checks, and a refusal
   leaves no run and the last campaign of the name its status.
5. `abort --cancel-running` left a host's DPUs Rebooting; now an operation whose DPUs install
   finishes its reboot round, and the status says so.
7. `plan` and `start` decided differently (a host DPF does not know in a BFB selection; an
   unknown host's exit status); now one decision, one exit status.
8. `status` of a failed or cancelled campaign hid its changes; now shown, `--json` too.
And the takeover: a campaign terminated with its canary deployment pointed; the next campaign
of the name puts it back first.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import metalflow
from dpf_activities_support import REBOOT, Api, annotation
from sim_support import RunningSim, running_sim
from takeover_support import takeover_seconds
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from contracts import names, workflow_api
from contracts.models.campaign import CampaignInput, CampaignTarget, HostSelection, Limits, TargetKind
from contracts.models.control import STATUS_QUERY
from contracts.models.host import HostOperationStatus, OperationPolicy
from contracts.with_start import execute_update
from drivers.settings import Settings
from metalflow.runtime.worker import build_worker
from simulators.dpf.objects import DEFAULT_BFB
from simulators.site import DPU, Host, Site, dump_site

P = f"r35{uuid.uuid4().hex[:3]}"
NEW_BFB = "bf-bundle-3-0-0"
FAST = OperationPolicy(power_down_wait_seconds=0.0, phase_timeout_seconds=60.0, max_dpu_error_reprovisions=0)
CLI_FAST = ["--power-down-wait", "0", "--dpu-error-reprovisions", "0"]
# Per case: (canary group, its hosts), (fleet group, its hosts). Groups name the deployments.
CELLS = {
    "at-target": (("a-canary", [f"{P}-a1"]), ("a-fleet", [f"{P}-a2", f"{P}-a3"])),
    "instance": (("i-canary", [f"{P}-i1"]), ("i-fleet", [f"{P}-i2"])),
    "retry": (("r-canary", [f"{P}-r1"]), ("r-fleet", [f"{P}-r2"])),
    "held": (("h-canary", [f"{P}-h1"]), ("h-fleet", [f"{P}-h2"])),
    "skipped": (("s-canary", [f"{P}-s1"]), ("s-fleet", [f"{P}-s2", f"{P}-s3"])),
    "start": (("t-fleet", [f"{P}-t1"]), ("t-rolling", [f"{P}-t2"])),
    "unknown": (("u-fleet", [f"{P}-u1"]), ("u-none", [f"{P}-u2"])),
    "cancel": (("c-canary", [f"{P}-c1"]), ("c-fleet", [f"{P}-c2"])),
    "takeover": (("k-canary", [f"{P}-k1"]), ("k-fleet", [f"{P}-k2"])),
}
ASSIGNED = f"{P}-s3"  # an instance in the inventory: the campaign skips it
UNKNOWN = f"{P}-u2"  # its DPUNode deleted: DPF does not know it


def _site(directory: Path) -> Path:
    hosts = [
        Host(
            id=host,
            groups=[group],
            instance="inst-35" if host == ASSIGNED else None,
            dpus=[DPU(id=f"{host}-dpu-0")],
        )
        for cell in CELLS.values()
        for group, members in cell
        for host in members
    ]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "site-in.yaml"
    path.write_text(dump_site(Site(name=f"{P}-site", hosts=hosts)))
    return path


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    state = tmp_path_factory.mktemp("sim")
    with running_sim(state, site_file=_site(state / "in"), timings="zero", initialised=True) as running:
        api = Api(running)
        try:
            spec = {"url": f"http://bfb.local/{NEW_BFB}.bfb", "fileName": f"{NEW_BFB}.bfb"}
            body = {"apiVersion": "provisioning.dpu.nvidia.com/v1alpha1", "kind": "BFB",
                    "metadata": {"name": NEW_BFB}, "spec": spec}  # fmt: skip
            api.create("BFB", body)
            rolling = {"spec": {"dpus": {"dpuSetStrategy": {"type": "RollingUpdate"}}}}
            api.patch("DPUDeployment", "t-rolling", rolling)
            api.http.delete(api.url("DPUNode", f"node-{UNKNOWN}")).raise_for_status()
        finally:
            api.close()
        yield running


@pytest.fixture(scope="module")
async def queue(local_env: WorkflowEnvironment, sim: RunningSim) -> AsyncIterator[str]:
    task_queue = f"test-campaign-rules-{uuid.uuid4()}"
    settings = Settings(
        site_file=sim.site_file, kubeconfig=sim.kubeconfig, worker_takeover_seconds=takeover_seconds()
    )
    async with build_worker(local_env.client, task_queue, settings):
        yield task_queue


# -- helpers -----------------------------------------------------------------------------------------


def _request(cell: str, *, canary: bool = True, **options: Any) -> CampaignInput:
    (canary_group, canary_hosts), (fleet_group, fleet_hosts) = CELLS[cell]
    target = CampaignTarget(
        kind=TargetKind.BFB,
        value=NEW_BFB,
        deployment=fleet_group,
        canary_deployment=canary_group if canary else "",
    )
    values: dict[str, Any] = {
        "name": f"{P}-{cell}-{uuid.uuid4().hex[:4]}",
        "target": target,
        "selection": HostSelection(hosts=tuple(canary_hosts + fleet_hosts)),
        "canary": 1 if canary else 0,
        "limits": Limits(batch_size=5, max_in_flight=5),
        "requested_by": "test",
        "host_policy": FAST,
    }
    values.update(options)
    return CampaignInput.model_validate(values)


async def _start(client: Client, queue: str, request: CampaignInput) -> WorkflowHandle[Any, Any]:
    return await client.start_workflow(
        workflow_api.CampaignWorkflow.run,
        request,
        id=names.campaign_workflow_id(request.name),
        task_queue=queue,
    )


async def _status(handle: WorkflowHandle[Any, Any]) -> dict[str, Any]:
    status: dict[str, Any] = await handle.query(STATUS_QUERY)
    return status


async def _ended(handle: WorkflowHandle[Any, Any], seconds: float = 90) -> dict[str, Any]:
    """The campaign's last status once it ended; fails naming where it stands if it never does."""
    deadline = time.monotonic() + seconds
    while (await handle.describe()).status == WorkflowExecutionStatus.RUNNING:
        if time.monotonic() > deadline:
            status = await _status(handle)
            raise AssertionError(
                f"{handle.id} never ended in {seconds:g} s: {status['phase']} {status['done']} done, "
                f"{status['already_at_target']} already at target, {len(status['in_flight'])} in flight; "
                f"batch {status['batch']}; canary passed {status['canary_passed']}"
            )
        await asyncio.sleep(0.2)
    return await _status(handle)


async def _until(
    handle: WorkflowHandle[Any, Any], what: str, check: Any, seconds: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + seconds
    while True:
        status = await _status(handle)
        if check(status):
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"{handle.id} never reached {what}; last: {status}")
        await asyncio.sleep(0.1)


def _bfb(sim: RunningSim, group: str) -> str:
    api = Api(sim)
    try:
        return str(api.must("DPUDeployment", group)["spec"]["dpus"]["bfb"])
    finally:
        api.close()


def _dpu(host: str) -> str:
    return f"node-{host}-device-{host}-dpu-0"


def _put_at(sim: RunningSim, host: str, bfb: str, *, ready: bool = False) -> None:
    """The host's DPU runs `bfb` (as after an upgrade someone else made; `ready`: and Ready)."""
    api = Api(sim)
    try:
        api.patch("DPU", _dpu(host), {"spec": {"bfb": bfb}})
        conditions = api.must("DPU", _dpu(host))["status"].get("conditions") or []
        status: dict[str, Any] = {
            "bfbFile": f"/bfb/dpf-operator-system-{bfb}.bfb",
            "conditions": [c for c in conditions if c.get("type") != "Outdated"],
        }
        if ready:
            status["phase"] = "Ready"
        api.patch("DPU", f"{_dpu(host)}/status", {"status": status})
    finally:
        api.close()


def _outdated(sim: RunningSim, host: str) -> bool:
    api = Api(sim)
    try:
        dpu = api.must("DPU", _dpu(host))
    finally:
        api.close()
    return any(
        c.get("type") == "Outdated" and c.get("status") == "True" for c in dpu["status"].get("conditions", [])
    )


async def _cli(env: WorkflowEnvironment, sim: RunningSim, *args: str) -> Any:
    return await metalflow(env, *args, site_file=sim.site_file)


async def _never_started(client: Client, name: str) -> bool:
    try:
        await client.get_workflow_handle(names.campaign_workflow_id(name)).describe()
    except RPCError as err:
        return err.status == RPCStatusCode.NOT_FOUND
    return False


# -- 1. a canary that cannot run stops, says why, and points nothing of the fleet --------------------


async def test_a_canary_already_at_the_target_stops_the_campaign_and_start_refuses_it(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Item 1: it read `canary ... 0 done, 1 already at target, 0 in flight; batch 0` for ever."""
    (canary_group, [canary]), (fleet_group, fleet) = CELLS["at-target"]
    _put_at(sim, canary, NEW_BFB)
    request = _request("at-target")
    handle = await _start(local_env.client, queue, request.model_copy(update={"name": f"{request.name}-wf"}))
    status = await _ended(handle)
    assert status["phase"] == "stopped", status
    assert (
        "the canary cannot run" in status["stopped_reason"]
        and f"{canary}: already at the target" in status["stopped_reason"]
    )
    assert not status["canary_passed"] and status["already_at_target"] == 1
    changes = {c["role"]: c for c in status["changes"]}
    assert changes["fleet"]["pointed_at"] is None, "the fleet's deployment is never pointed"
    assert changes["canary"]["restored_at"] is not None, "the canary's is put back"
    assert (_bfb(sim, canary_group), _bfb(sim, fleet_group)) == (DEFAULT_BFB, DEFAULT_BFB)
    assert not any(_outdated(sim, h) for h in fleet)
    # `plan` and `start` say the same, with the same exit status, and start nothing.
    _put_at(sim, canary, NEW_BFB)  # as it was (the stop put its deployment back: Outdated again)
    args = ["--hosts", ",".join([canary, *fleet]), "--bfb", NEW_BFB, "--deployment", fleet_group,
            "--canary-deployment", canary_group, *CLI_FAST, "--task-queue", queue]  # fmt: skip
    planned = await _cli(local_env, sim, "campaign", "plan", request.name, *args)
    started = await _cli(local_env, sim, "campaign", "start", request.name, *args)
    assert (planned.status, started.status) == (1, 1), (planned.stderr, started.stderr)
    assert "start would refuse it: the canary cannot run" in planned.stderr
    assert "campaign refused, nothing started: the canary cannot run" in started.stderr
    assert await _never_started(local_env.client, request.name)


async def test_a_canary_host_with_an_instance_stops_the_campaign_saying_why(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Item 1: its entity refused the ask (an instance assigned since the inventory was read)."""
    (canary_group, [canary]), (fleet_group, _) = CELLS["instance"]
    assigned = await _cli(local_env, sim, "host", "assign", canary, "inst-35", "--task-queue", queue)
    assert assigned.status == 0, assigned.stderr
    try:
        handle = await _start(local_env.client, queue, _request("instance"))
        status = await _ended(handle)
        shown = await _cli(local_env, sim, "campaign", "status", handle.id.removeprefix("campaign/"))
    finally:
        await _cli(local_env, sim, "host", "release", canary, "inst-35", "--task-queue", queue)
    assert status["phase"] == "stopped" and status["skipped"] == 2, status
    assert f"{canary}: skipped (instance assigned" in status["stopped_reason"]
    assert "stopped: the canary cannot run" in shown.stdout, shown
    assert (_bfb(sim, canary_group), _bfb(sim, fleet_group)) == (DEFAULT_BFB, DEFAULT_BFB)


async def test_retry_failed_after_a_failed_canary_whose_host_was_fixed_goes_on(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Item 1: `retry-failed` after a failed canary hung once the canary host read at the target."""
    (canary_group, [canary]), (fleet_group, [fleet]) = CELLS["retry"]
    handle = await _start(local_env.client, queue, _request("retry", budget={"max_failures": 5}))
    await _inject_error_when_installing(local_env.client, sim, canary)
    halted = await _until(handle, "the canary's halt", lambda s: s["phase"] == "halted")
    assert halted["halted_reason"] == f"the canary failed on {canary}", halted
    assert _bfb(sim, fleet_group) == DEFAULT_BFB
    _put_at(sim, canary, NEW_BFB, ready=True)  # an operator fixed the host by hand
    retried = await _cli(local_env, sim, "campaign", "retry-failed", handle.id.removeprefix("campaign/"))
    assert retried.status == 0, retried.stderr
    status = await _ended(handle)
    assert (status["phase"], status["done"], status["failed"]) == ("completed", 2, 0), status
    assert status["canary_passed"] and _bfb(sim, fleet_group) == NEW_BFB
    changes = {c["role"]: c for c in status["changes"]}
    assert changes["canary"]["pointed_at"] <= changes["fleet"]["pointed_at"]


# -- 2. a canary left out is refused, never skipped ------------------------------------------------------


async def test_a_canary_held_by_another_campaign_is_refused_and_nothing_is_pointed(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Item 2: the canary and the fleet deployment were pointed in the same second."""
    (canary_group, [canary]), (fleet_group, fleet) = CELLS["held"]
    closed = ["--window", "mon 00:00-00:01 Pacific/Kiritimati"]  # claims its host, starts nothing
    other = await _cli(local_env, sim, "campaign", "start", f"{P}-holder", "--hosts", canary, "--reprovision",
                       "--canary", "0", *closed, "--task-queue", queue)  # fmt: skip
    assert other.status == 0, other.stderr
    try:
        handle = await _start(local_env.client, queue, _request("held"))
        with pytest.raises(WorkflowFailureError) as refused:
            await asyncio.wait_for(handle.result(), 60)
        status = await _status(handle)
    finally:
        await _cli(local_env, sim, "campaign", "abort", f"{P}-holder")
    assert "the canary cannot run" in str(refused.value.cause) or "also selects 1 host" in str(
        refused.value.cause
    )
    assert f"campaign/{P}-holder" in str(refused.value.cause)
    assert status["canary_passed"] is False and all(c["pointed_at"] is None for c in status["changes"])
    assert (_bfb(sim, canary_group), _bfb(sim, fleet_group)) == (DEFAULT_BFB, DEFAULT_BFB)


# -- 3. a host the campaign skips never gets its deployment change ---------------------------------------


async def test_a_deployment_that_selects_a_skipped_host_is_refused_and_the_host_never_outdated(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Item 3: the workflow checked the deployment against its whole roster, skipped hosts too."""
    (canary_group, _), (fleet_group, fleet) = CELLS["skipped"]
    handle = await _start(local_env.client, queue, _request("skipped"))
    with pytest.raises(WorkflowFailureError) as refused:
        await asyncio.wait_for(handle.result(), 90)
    assert f"DPUDeployment {canary_group}" not in str(refused.value.cause)
    assert f"{ASSIGNED} (left out: instance assigned in the inventory" in str(refused.value.cause)
    assert (_bfb(sim, canary_group), _bfb(sim, fleet_group)) == (DEFAULT_BFB, DEFAULT_BFB)
    assert not _outdated(sim, ASSIGNED), "the skipped host would take the new BFB at its next reprovision"


# -- 4 and 7. start runs plan's checks; one decision, one exit status --------------------------------------


async def test_start_refuses_what_plan_refuses_with_its_exit_status_and_keeps_the_last_status(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Item 4: a refusal inside the workflow left a FAILED run and replaced the last real one's
    status. Item 7: an unknown host exited 1 in `plan`, 2 in `start`."""
    (fleet_group, [host]), (rolling_group, [rolling]) = CELLS["start"]
    name = f"{P}-start"
    real = await _cli(local_env, sim, "campaign", "start", name, "--hosts", host, "--reprovision",
                      "--canary", "0", *CLI_FAST, "--wait", "--task-queue", queue)  # fmt: skip
    assert real.status == 0, real.stdout + real.stderr
    cases = [
        (["--hosts", rolling, "--bfb", NEW_BFB, "--deployment", rolling_group, "--canary", "0"], 1,
         "dpuSetStrategy RollingUpdate"),
        (["--hosts", host, "--bfb", NEW_BFB, "--deployment", CELLS["skipped"][1][0], "--canary", "0"], 1,
         "also selects"),
        (["--hosts", f"{host},{P}-ghost", "--reprovision"], 2, f"unknown hosts {P}-ghost"),
    ]  # fmt: skip
    for args, code, words in cases:
        planned = await _cli(local_env, sim, "campaign", "plan", name, *args, "--task-queue", queue)
        started = await _cli(local_env, sim, "campaign", "start", name, *args, "--task-queue", queue)
        assert (planned.status, started.status) == (code, code), (args, planned.stderr, started.stderr)
        assert words in planned.stderr and words in started.stderr, (planned.stderr, started.stderr)
    shown = await _cli(local_env, sim, "campaign", "status", name, "--json")
    assert shown.status == 0, shown.stderr
    assert json.loads(shown.stdout)["phase"] == "completed", "the last real campaign keeps its status"
    assert _bfb(sim, rolling_group) == DEFAULT_BFB


async def test_plan_and_start_agree_on_a_host_dpf_does_not_know_in_a_bfb_selection(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Item 7: `plan` left it out; the workflow refused the deployment over it."""
    (fleet_group, [known]), _ = CELLS["unknown"]
    args = ["--hosts", f"{known},{UNKNOWN}", "--bfb", NEW_BFB, "--deployment", fleet_group, "--canary", "0",
            *CLI_FAST, "--task-queue", queue]  # fmt: skip
    planned = await _cli(local_env, sim, "campaign", "plan", f"{P}-unknown", *args, "--json")
    assert planned.status == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert [g["host_ids"] for g in plan["left_out"]] == [[UNKNOWN]] and plan["batches"] == [[known]]
    started = await _cli(local_env, sim, "campaign", "start", f"{P}-unknown", *args, "--wait")
    assert "completed: 1 done, 0 already at target, 0 failed, 1 skipped of 2" in started.stdout, (
        started.stdout + started.stderr
    )
    assert f"skipped {UNKNOWN}: no DPF objects" in started.stdout
    assert _bfb(sim, fleet_group) == NEW_BFB


# -- 8. the status of a campaign that did not end by itself shows its changes --------------------------------


async def test_status_of_a_cancelled_campaign_shows_its_changes_put_back(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Item 8: `status` printed only `campaign ... was cancelled`; `--json` nothing at all."""
    (canary_group, _), _ = CELLS["cancel"]
    handle = await _start(local_env.client, queue, _request("cancel"))
    await _until(
        handle, "the canary deployment pointed", lambda s: any(c["pointed_at"] for c in s["changes"])
    )
    await handle.cancel()
    with pytest.raises(WorkflowFailureError):
        await handle.result()
    name = handle.id.removeprefix("campaign/")
    shown = await _cli(local_env, sim, "campaign", "status", name)
    as_json = await _cli(local_env, sim, "campaign", "status", name, "--json")
    assert shown.status == 1 and "was cancelled" in shown.stderr, shown
    assert (
        f"changed canary DPUDeployment {canary_group} bfb {DEFAULT_BFB} -> {NEW_BFB}: restored"
        in shown.stdout
    )
    assert as_json.status == 1, as_json
    document = json.loads(as_json.stdout)
    assert "was cancelled" in document["ended"]
    assert [(c["role"], c["restored_at"] is not None) for c in document["changes"]] == [
        ("canary", True),
        ("fleet", False),
    ]
    assert _bfb(sim, canary_group) == DEFAULT_BFB


# -- terminate, then a campaign of the name takes over -----------------------------------------------------


async def test_a_campaign_of_the_name_puts_back_what_a_terminated_one_left_pointed(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """A terminated campaign runs no clean-up: its canary deployment stays pointed. The next one of
    that name takes its record over and puts it back before anything else (it recorded the new
    value as the one to restore to)."""
    (canary_group, _), (fleet_group, _) = CELLS["takeover"]
    request = _request("takeover")
    handle = await _start(local_env.client, queue, request)
    await _until(
        handle, "the canary deployment pointed", lambda s: any(c["pointed_at"] for c in s["changes"])
    )
    await handle.terminate(reason="by the takeover test")
    assert _bfb(sim, canary_group) == NEW_BFB, "left pointed"
    hosts = ",".join(CELLS["takeover"][0][1] + CELLS["takeover"][1][1])
    args = ["--hosts", hosts, "--bfb", NEW_BFB, "--deployment", fleet_group,
            "--canary-deployment", canary_group, "--task-queue", queue]  # fmt: skip
    planned = await _cli(local_env, sim, "campaign", "plan", request.name, *args)
    assert planned.status == 0, planned.stderr
    assert (
        f"would restore: leftover DPUDeployment {canary_group} bfb {NEW_BFB} -> {DEFAULT_BFB}"
        in planned.stdout
    )
    again = await _start(local_env.client, queue, request)  # same name: the next run of campaign/NAME
    await execute_update(again, "abort", {"requested_by": "test", "reason": "rehearsal"})
    status = await _ended(again)
    assert status["phase"] == "aborted", status
    assert (_bfb(sim, canary_group), _bfb(sim, fleet_group)) == (DEFAULT_BFB, DEFAULT_BFB)


# -- 5. abort --cancel-running while DPUs install ---------------------------------------------------

SLOW = f"{P}-slow"


@pytest.fixture
def slow_sim(tmp_path: Path) -> Iterator[RunningSim]:
    """A site whose DPUs take a while in each phase, so an abort lands while they install."""
    site = tmp_path / "in" / "site-in.yaml"
    site.parent.mkdir(parents=True)
    hosts = [Host(id=f"{SLOW}-1", dpus=[DPU(id=f"{SLOW}-1-dpu-{k}") for k in range(2)])]
    site.write_text(dump_site(Site(name=f"{SLOW}-site", hosts=hosts)))
    with running_sim(
        tmp_path / "sim", site_file=site, initialised=True, timing={"dpu_phase_seconds": 1.5}
    ) as running:
        yield running


async def test_abort_cancel_running_while_dpus_install_lets_the_reboot_round_finish(
    local_env: WorkflowEnvironment, slow_sim: RunningSim, task_queue: str
) -> None:
    """Item 5: aborted while its DPUs installed, the operation ended; DPF then asked for the host
    reboot and nothing gave it: both DPUs sat in Rebooting, the annotation set, no operation."""
    host, client, sim = f"{SLOW}-1", local_env.client, slow_sim
    settings = Settings(
        site_file=sim.site_file, kubeconfig=sim.kubeconfig, worker_takeover_seconds=takeover_seconds()
    )
    request = CampaignInput(
        name=f"{SLOW}-abort", target=CampaignTarget(kind=TargetKind.REPROVISION),
        selection=HostSelection(hosts=(host,)), canary=0, requested_by="test", host_policy=FAST,
    )  # fmt: skip
    async with build_worker(client, task_queue, settings):
        handle = await _start(client, task_queue, request)
        operation = client.get_workflow_handle(names.reprovision_workflow_id(host))
        for _ in range(600):  # the hold released: its DPUs install
            try:
                phase = (await operation.query(STATUS_QUERY, result_type=HostOperationStatus)).phase
            except RPCError:
                phase = ""
            if phase == "waiting-for-reboot-request":
                break
            await asyncio.sleep(0.1)
        aborted = await _cli(local_env, sim, "campaign", "abort", request.name, "--cancel-running")
        assert aborted.status == 0, aborted.stderr
        status = await _ended(handle, 120)
        shown = await _cli(local_env, sim, "campaign", "status", request.name)
    node, dpus = await _settled(sim, host)
    assert annotation(node, REBOOT) is None, f"the DPUs wait for a reboot nobody gives: {dpus}"
    assert set(dpus.values()) == {"Ready"}, dpus
    assert [e["to"] for e in sim.power_log(host)] == ["Off", "On"], "one reboot, the round's"
    assert (status["phase"], status["done"], status["aborted"]) == ("aborted", 1, 0), status
    assert "aborted" in shown.stdout and "1 done" in shown.stdout, shown.stdout


async def _settled(sim: RunningSim, host: str) -> tuple[dict[str, Any], dict[str, str]]:
    """The host's DPUNode and its DPUs' phases once they stop moving: all Ready, or waiting in
    Rebooting with the reboot annotation (for a reboot that nobody may give)."""
    api = Api(sim)
    try:
        for _ in range(120):
            node = api.must("DPUNode", f"node-{host}")
            dpus = {d["metadata"]["name"]: str(d.get("status", {}).get("phase")) for d in api.list("DPU")}
            if set(dpus.values()) == {"Ready"} or (
                annotation(node, REBOOT) and set(dpus.values()) == {"Rebooting"}
            ):
                await asyncio.sleep(3)  # a reboot in flight would have moved them on by now
                node = api.must("DPUNode", f"node-{host}")
                dpus = {d["metadata"]["name"]: str(d.get("status", {}).get("phase")) for d in api.list("DPU")}
                return node, dpus
            await asyncio.sleep(0.25)
        return node, dpus
    finally:
        api.close()


async def _inject_error_when_installing(client: Client, sim: RunningSim, host: str) -> None:
    """Once the host's reprovision recreated its DPU, put it in Error (its policy allows no retry)."""
    handle = client.get_workflow_handle(names.reprovision_workflow_id(host))
    for _ in range(1200):
        try:
            status = await handle.query(STATUS_QUERY, result_type=HostOperationStatus)
        except RPCError:  # not started yet
            await asyncio.sleep(0.1)
            continue
        if status.phase not in ("resolving-inventory", "deleting-dpus", "starting"):
            try:
                sim.inject(f"dpus/{_dpu(host)}/error", {"message": "injected by the rules test"})
                return
            except Exception as err:  # noqa: BLE001 - 404/409: the new DPU is not there yet
                if "404" not in str(err) and "409" not in str(err):
                    raise
        await asyncio.sleep(0.05)
    raise AssertionError(f"the reprovision of {host} never got past deleting its DPUs")
