"""Issue 40, "What broke" 1: a host metalflow powered off is never left off in silence.

The named fault `rotate-after-forceoff` (simulators/redfish/BEHAVIOUR.md F2: the host's BMC
rotates its password right after it accepts metalflow's ForceOff, as a secrets store rotating
credentials does) against each host operation that turns a host off, as a user runs the CLI:
a real Temporal, the product's worker, the simulated site. README, "A host metalflow turned off":
the host is powered back on, or the run hands it to a person in manual-intervention-required
whose status says "the host ... is OFF" and offers `metalflow host retry` and a way out.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from cli_support import Result, metalflow, shown_state
from host_operation_support import reset_by_hand, worker_for
from module_site_support import ModuleSite
from sim_support import RunningSim, sim_http
from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import WorkflowFailureError, WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from contracts.models.host import HostWorkflowInput, OperationPolicy
from metalflow.cli.host_status import reboot_waiting
from metalflow.cli.inventory_check import rebooting_words
from metalflow.hosts import ensure_entity
from metalflow.operation_progress import operation_progress

RESET_HOST = "off-001"  # profile powercycle: a reset's ForceOff is its own
CANCELLED_RESET = "off-003"
# Profile no-powercycle (the site's rotation gives it to hosts 2, 7, 12, ..., 42): a reboot is ForceOff,
# then On. One host per reboot test: each test starts from an entity of its own.
REBOOT_HOST, ABORTED_HOST, FIRMWARE_HOST, HOST_ONLY = "off-002", "off-007", "off-012", "off-017"
FIRMWARE_ABORTED, REPROVISION_HOST, CANCELLED_HOST = "off-022", "off-027", "off-032"
CANCELLED_HOST_RESET, CANCELLED_STILL_OFF = "off-037", "off-042"
REPROVISION_ABORTED, REPROVISION_CANCELLED, FIRMWARE_CANCELLED = "off-047", "off-052", "off-057"
FIRMWARE_CUT = "off-062"
TARGET = "32.45.1020"
IMAGE = f"http://firmware.example.test/bf-fw-{TARGET}.bfb"


SITE = ModuleSite("off", hosts=62, for_metalflow=True, timing={"dpu_boot_seconds": 0.2})
sim = SITE.fixtures()[0]  # each test runs the worker itself, around what it asks


def _fault(sim: RunningSim, bmc: str, fault: str) -> None:
    """`metalflow sim fault bmc BMC FAULT` (the endpoint it posts to)."""
    sim_http().post(f"{sim.url}/sim/faults/bmcs/{bmc}/{fault}").raise_for_status()


@asynccontextmanager
async def _password_rotates_after_forceoff(
    sim: RunningSim, host: str, power_on_after: bool = False
) -> AsyncIterator[None]:
    """The fault `rotate-after-forceoff` on the host's BMC for the block, cleared at its end, and
    then (`power_on_after`: a test that may leave the host Off) the host powered On by hand."""
    _fault(sim, host, "rotate-after-forceoff")
    try:
        yield
    finally:
        _fault(sim, host, "clear")
        if power_on_after:
            await _power_on_by_hand(sim, host)


# The hosts' entities wait 1 s between Off and On and try a refused On again after 0.5 s and 1 s
# (the policy's `power_on_retry_seconds`; 2 s and 4 s by default): these tests are about what
# the runs do once the attempts are spent, not about the backoff's length
# (tests/fast/test_host_power_model.py holds the attempts and their waits).
POLICY = OperationPolicy(power_down_wait_seconds=1.0, power_on_retry_seconds=(0.5, 1.0))
_STARTS = ("reboot", "reset", "reprovision", "firmware", "provision")


async def _asked(env: WorkflowEnvironment, task_queue: str, by: str, *args: str) -> Result:
    """`metalflow ARGS --by BY --task-queue TASK_QUEUE`, which must succeed; an operation asked
    of a host whose entity is not running yet starts it first with `POLICY`."""
    if args[0] == "host" and args[1] in _STARTS:
        await ensure_entity(env.client, HostWorkflowInput(host_id=args[2], policy=POLICY), task_queue)
    done = await metalflow(env, *args, "--by", by, "--task-queue", task_queue)
    assert done.status == 0, done.stdout + done.stderr
    return done


def _power(sim: RunningSim, host: str) -> list[tuple[str, str]]:
    return [(e["to"], e["reset_type"]) for e in sim.power_log(host)]


async def _until(
    env: WorkflowEnvironment, host: str, done: Any, what: str, seconds: float = 30
) -> dict[str, Any]:
    """Poll what `host status --json` shows (the operation's phase and details under `words`,
    a reboot's from its Phase and current details as the command reads them) until `done`."""
    shown: dict[str, Any] = {}
    for _ in range(int(seconds / 0.2)):
        shown = await shown_state(env, host)
        operation, current = shown["operation"], shown["host"]["current"]
        shown["words"] = ""
        if operation:
            shown["words"] = f"{operation.get('phase')}: {operation.get('waiting_for')}"
        elif current is not None and current["outcome"] == "running":
            seen = await operation_progress(env.client, current["workflow_id"], host)
            shown["words"] = "" if seen is None else f"{seen.phase}: {seen.details}"
        if done(shown):
            return shown
        await asyncio.sleep(0.2)
    raise AssertionError(f"{host} never {what}: {shown}")


async def _firmware_until_its_reboot_says_off(
    env: WorkflowEnvironment, host: str, reboot: str, task_queue: str
) -> None:
    """`host firmware HOST` (the fault set), then until its reboot says the host is OFF."""
    firmware = ("--version", TARGET, "--image", IMAGE)
    await _asked(env, task_queue, "alice@test", "host", "firmware", host, *firmware)
    for _ in range(150):
        seen = await operation_progress(env.client, reboot, host)
        if seen is not None and "is OFF" in seen.details:
            return
        await asyncio.sleep(0.2)


def _handed_over(shown: dict[str, Any]) -> bool:
    """The run (or the reboot it waits on) says the host is OFF, and a reboot has left `powering`:
    a poll once read a reboot's hand-over words while its phase still said `powering`."""
    words = shown["words"]
    return "is OFF" in words and not words.startswith("powering: ")


def _ended(shown: dict[str, Any]) -> bool:
    return shown["host"]["current"] is None


async def test_a_full_reset_whose_host_bmc_rotates_after_forceoff_hands_the_host_off_to_a_person(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """Case a: before, two power-on attempts ms apart, the run failed, the host idle and off with
    no warning and nothing to retry. Now: the On is tried again after a backoff, then the reset
    waits in manual-intervention-required saying the host is OFF; `host retry` once the password
    is fixed powers it on, and the reset ends saying what it did and that the host is on."""
    host = RESET_HOST
    async with _password_rotates_after_forceoff(sim, host):
        async with worker_for(local_env.client, task_queue, sim):
            await _asked(local_env, task_queue, "alice@test", "host", "reset", host, "--both")
            words = (await _until(local_env, host, _handed_over, "said the host is OFF"))["words"]
            assert words.startswith("manual-intervention-required: "), words
            assert f"the host {host} is OFF: metalflow turned it off (ForceOff of {host}" in words, words
            assert "BMCAuthenticationFailed" in words and "after 3 attempts" in words, words
            assert f"`metalflow host retry {host}`" in words and f"`metalflow host abort {host}`" in words
            assert _power(sim, host)[-1][0] == "Off"  # as the status says
            status = await metalflow(local_env, "host", "status", host)
            assert "is OFF" in status.stdout and "metalflow host retry" in status.stdout, status.stdout
            # B6: a reset has no mark-rebooted; before, Temporal's words named internal updates.
            marked = await metalflow(
                local_env, "host", "mark-rebooted", host, "--by", "carol@test", "--task-queue", task_queue
            )
            assert marked.status == 1, marked.stdout + marked.stderr
            assert f"does not take `metalflow host mark-rebooted {host}`: it takes " in marked.stderr
            assert f"`metalflow host retry {host}`" in marked.stderr and "handler" not in marked.stderr

            _fault(sim, host, "clear")  # the secrets store caught up
            await _asked(local_env, task_queue, "bob@test", "host", "retry", host)
            shown = await _until(local_env, host, _ended, "ended the reset")
        outcome = shown["host"]["recent"][-1]["outcome"]
        assert outcome.startswith("failed: BMC") and " 401 " in outcome, outcome  # the cause, in words
        # Issue 40 (attack M2): before, `Done: nothing was reset; the host is on` after the host's
        # ForceOff and On (a power cycle, its generation reached): now the words say so, and what
        # it did to the DPUs (their Arm rebooted with it, none reset).
        cycled = f"Done: host {host} power-cycled (this run's ForceOff, then On): generation 1 reached"
        assert cycled in outcome and "rebooted each DPU's Arm" in outcome, outcome
        assert f"not reset: {host}-dpu-0 (not reached: the reset ended first)" in outcome, outcome
        assert outcome.endswith("; the host is on") and "nothing was reset" not in outcome, outcome
        assert shown["host"]["boot_generation"] == 1, shown["host"]
        assert _power(sim, host)[-1] == ("On", "On")


async def test_a_host_reset_whose_reboot_left_the_host_off_waits_for_a_person_and_retry_powers_it_on(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """`host reset --host`: its reboot (which escalates a BMC failure to its caller) tried On
    after its backoff and failed with the host OFF. Before, the reset then ended failed (its
    status said OFF, nothing to retry). Now it waits, as `host reboot` does, in
    manual-intervention-required saying the host is OFF with `retry` and `abort`; `retry` once
    the BMC is fixed reboots it again for the generation it did not reach, and the reset
    completes with the host on."""
    host = HOST_ONLY
    async with _password_rotates_after_forceoff(sim, host, power_on_after=True):
        async with worker_for(local_env.client, task_queue, sim):
            await _asked(local_env, task_queue, "alice@test", "host", "reset", host, "--host")
            words = (await _until(local_env, host, _handed_over, "said the host is OFF"))["words"]
            assert words.startswith("manual-intervention-required: "), words
            assert f"the host {host} is OFF: metalflow turned it off (the ForceOff of its reboot" in words
            assert "rejected the credentials" in words, words
            assert f"`metalflow host retry {host}`" in words and f"`metalflow host abort {host}`" in words
            assert _power(sim, host)[-1][0] == "Off"  # as the status says

            _fault(sim, host, "clear")
            await _asked(local_env, task_queue, "bob@test", "host", "retry", host)
            shown = await _until(local_env, host, _ended, "ended the reset")
        assert shown["host"]["recent"][-1]["outcome"] == "completed", shown["host"]["recent"][-1]
        assert _power(sim, host)[-1] == ("On", "On")


async def test_a_full_reset_cancelled_in_its_power_on_backoff_tries_on_afresh_and_says_the_host_is_off(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """An attack found it: a reset (`--all-dpus --full`) whose On was refused (the password
    rotated after its ForceOff), cancelled (`temporal workflow cancel`) in its backoff before
    the next On, made one of its three On attempts and ended with the host OFF. Now the cancel
    makes the three On attempts afresh (with the backoff), and, all refused, the reset's end
    says the host is OFF, which the entity records: `host list` marks the host."""
    host = CANCELLED_RESET
    async with _password_rotates_after_forceoff(sim, host, power_on_after=True):
        async with worker_for(local_env.client, task_queue, sim):
            await _asked(local_env, task_queue, "alice@test", "host", "reset", host, "--all-dpus", "--full")
            shown = await _until(local_env, host, lambda s: s["host"]["current"] is not None, "started")
            reset = local_env.client.get_workflow_handle(shown["host"]["current"]["workflow_id"])
            await _until_in_history(reset, EventType.EVENT_TYPE_TIMER_STARTED, "began its backoff")
            await reset.cancel()
            shown = await _until(local_env, host, _ended, "ended the reset")
            events = [event async for event in reset.fetch_history_events()]
            listed = await metalflow(local_env, "host", "list")
        cancel = next(
            i for i, e in enumerate(events)
            if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CANCEL_REQUESTED
        )  # fmt: skip
        assert len([e for e in events[cancel:] if _power_on_scheduled(e, host)]) == 3, "On afresh"
        outcome = shown["host"]["recent"][-1]["outcome"]
        assert outcome.startswith("failed: "), outcome  # the failure the On backoff followed
        assert f"the host {host} is OFF: metalflow turned it off (ForceOff of {host}" in outcome, outcome
        assert _power(sim, host)[-1][0] == "Off"  # as the outcome says
        row = next(line for line in listed.stdout.splitlines() if line.startswith(f"{host} "))
        assert " idle (host OFF) " in row, listed.stdout
        assert "(host OFF) left OFF by the last run" in listed.stderr, listed.stderr


async def test_a_host_reset_cancelled_while_its_host_is_off_reboots_it_again_and_says_it_is_off(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """`host reset --host` waiting for a person with the host OFF, then cancelled (`temporal
    workflow cancel`): nobody is left to ask, so its reboot runs again once for the generation
    it did not reach; refused again, the reset ends failed `HostLeftOff` (a cancel carries no
    words), so its entity's outcome says the host is OFF, not "aborted"."""
    host = CANCELLED_HOST_RESET
    reboot = f"reboot/{host}/generation-1"
    async with _password_rotates_after_forceoff(sim, host, power_on_after=True):
        async with worker_for(local_env.client, task_queue, sim):
            await _asked(local_env, task_queue, "alice@test", "host", "reset", host, "--host")
            shown = await _until(local_env, host, _handed_over, "said the host is OFF")
            await local_env.client.get_workflow_handle(shown["host"]["current"]["workflow_id"]).cancel()
            shown = await _until(local_env, host, _ended, "ended the reset")
        runs = [run async for run in local_env.client.list_workflows(f'WorkflowId = "{reboot}"')]
        assert len(runs) == 2, runs  # the reboot, and again after the cancel
        outcome = shown["host"]["recent"][-1]["outcome"]
        assert outcome.startswith("failed: HostLeftOff: cancelled (the workflow was cancelled). "), outcome
        assert f"the host {host} is OFF: metalflow turned it off (the ForceOff of its reboot" in outcome
        assert _power(sim, host)[-1][0] == "Off"  # as the outcome says


async def _until_in_history(handle: WorkflowHandle[Any, Any], kind: EventType.ValueType, what: str) -> None:
    for _ in range(150):
        if kind in [event.event_type async for event in handle.fetch_history_events()]:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id} never {what}")


def _power_on_scheduled(event: HistoryEvent, host: str) -> bool:
    """An On of the host's BMC scheduled (the activity's summary, as the UI shows it)."""
    if event.event_type != EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
        return False
    return event.user_metadata.summary.data == json.dumps(f"On {host}").encode()


async def test_a_reboot_with_the_host_off_takes_host_rebooted_only_once_it_is_on_and_retry_powers_it_on(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """Case c: before, the reboot waited for a manual reboot with the host off, `host retry` was
    refused (the reboot had no retry) and `host-rebooted` completed it with the host still off.
    Now `host-rebooted` is refused while the BMC shows Off, and `retry` powers it on."""
    host = REBOOT_HOST
    async with _password_rotates_after_forceoff(sim, host):
        async with worker_for(local_env.client, task_queue, sim):
            await _asked(local_env, task_queue, "alice@test", "host", "reboot", host)
            await _until(local_env, host, _handed_over, "said the host is OFF")
            _fault(sim, host, "clear")  # the password is fixed; the host is still off
            said = await metalflow(
                local_env, "host-rebooted", host, "--by", "bob@test", "--task-queue", task_queue
            )
            assert said.status == 1, said.stdout + said.stderr
            assert "is still OFF" in said.stderr and "PowerState Off" in said.stderr, said.stderr
            await _asked(local_env, task_queue, "bob@test", "host", "retry", host)
            shown = await _until(local_env, host, _ended, "ended the reboot")
        outcome = shown["host"]["recent"][-1]["outcome"]
        assert outcome == "completed", outcome
        assert _power(sim, host)[-1] == ("On", "On")


async def test_a_reboot_aborted_with_the_host_off_says_the_host_is_off(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """Case b: before, the abort said "the host was not rebooted by metalflow" although metalflow
    had sent the ForceOff, and the host stayed off with no warning. Now the reboot's status says
    the host is OFF and offers retry, and the abort ends it saying the host is OFF."""
    host = ABORTED_HOST
    async with _password_rotates_after_forceoff(sim, host, power_on_after=True):
        async with worker_for(local_env.client, task_queue, sim):
            await _asked(local_env, task_queue, "alice@test", "host", "reboot", host)
            words = (await _until(local_env, host, _handed_over, "said the host is OFF"))["words"]
            assert words.startswith("manual-intervention-required: "), words
            assert f"the host {host} is OFF: metalflow turned it off (" in words, words
            assert f"`metalflow host retry {host}`" in words and f"`metalflow host-rebooted {host}`" in words
            await _asked(local_env, task_queue, "bob@test", "host", "abort", host)
            shown = await _until(local_env, host, _ended, "ended the reboot")
            status = await metalflow(local_env, "host", "status", host)
            listed = await metalflow(local_env, "host", "list")
            # A later run that never touches the host's power (a reset of one DPU's Arm), aborted
            # at once or completed first: before, it said "the host is on" (aborted) or simply
            # ended (completed), and the host's mark and WARNING were gone, the BMC still Off.
            await _asked(local_env, task_queue, "alice@test", "host", "reset", host, "--dpu", f"{host}-dpu-0")
            await metalflow(local_env, "host", "abort", host, "--by", "bob@test", "--task-queue", task_queue)
            later = await _until(local_env, host, _ended, "ended the DPU reset")
            status_after = await metalflow(local_env, "host", "status", host)
            listed_after = await metalflow(local_env, "host", "list")
        outcome = shown["host"]["recent"][-1]["outcome"]
        assert "not rebooted by metalflow" not in outcome, outcome
        assert f"the host {host} is OFF: metalflow turned it off" in outcome, outcome
        # said once (issue 40): the abort's words and the end's both said it, the cause twice
        assert outcome.count(f"the host {host} is OFF") == 1, outcome
        said = "aborted by bob@test: no reason given. Boot generation 1 not reached; "
        assert outcome.startswith(said), outcome
        assert _power(sim, host)[-1][0] == "Off"  # as the outcome says
        # ... and said where an idle host is looked at first: a WARNING line of `host status`.
        assert f"WARNING          the host is OFF as far as reboot/{host}/" in status.stdout, status.stdout
        assert f"`metalflow bmc power {host} on`" in status.stdout, status.stdout
        # ... and in `host list`, from the same words (the entity's memo; no BMC read).
        row = next(line for line in listed.stdout.splitlines() if line.startswith(f"{host} "))
        assert " idle (host OFF) " in row, listed.stdout
        # ... and no later run's end wipes it unless that run powered the host on or saw it On.
        dpu_reset = later["host"]["recent"][-1]
        assert dpu_reset["workflow_id"].startswith("reset/"), dpu_reset
        assert "the host is on" not in dpu_reset["outcome"], dpu_reset
        if dpu_reset["outcome"] != "completed":
            assert "host power not touched by this run" in dpu_reset["outcome"], dpu_reset
        warned = f"WARNING          the host is OFF as far as reboot/{host}/"
        assert warned in status_after.stdout, status_after.stdout
        row = next(line for line in listed_after.stdout.splitlines() if line.startswith(f"{host} "))
        assert " idle (host OFF) " in row, listed_after.stdout


async def test_a_firmware_run_whose_power_cycle_left_the_host_off_says_so_and_takes_retry(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """Case d: before, the firmware run showed "power-cycling" with no cause, and `retry` (and
    abort) were refused. Now `host status` shows what its reboot waits for (the host is OFF),
    and `host retry` reaches that reboot: On, and the firmware run completes."""
    host = FIRMWARE_HOST
    reboot = f"reboot/{host}/generation-1"
    async with _password_rotates_after_forceoff(sim, host):
        async with worker_for(local_env.client, task_queue, sim):
            await _firmware_until_its_reboot_says_off(local_env, host, reboot, task_queue)
            status = await metalflow(local_env, "host", "status", host)
            assert "power-cycling" in status.stdout, status.stdout
            assert (
                f"its reboot {reboot}: manual-intervention-required: the host {host} is OFF" in status.stdout
            )
            assert f"metalflow host retry {host}" in status.stdout, status.stdout
            # `host list` (visibility only) says it as a reboot's or a reset's own wait: it showed
            # `power-cycling` alone (issue 40, L2 of its last attack)
            row = await _listed_until(local_env, host, f" firmware/{host} manual-intervention-required")

            _fault(sim, host, "clear")
            retried = await _asked(local_env, task_queue, "bob@test", "host", "retry", host)
            assert reboot in retried.stdout, retried.stdout
            shown = await _until(local_env, host, _ended, "ended the firmware run")
        assert shown["host"]["recent"][-1]["outcome"] == "completed", shown["host"]["recent"][-1]
        assert _power(sim, host)[-1] == ("On", "On")
        assert row.split()[2:4] == ["running", "firmware"], row  # the entity: its operation runs


async def _listed_until(env: WorkflowEnvironment, host: str, shows: str, seconds: float = 30) -> str:
    """`metalflow host list`'s row of `host`, polled until it shows `shows` (the operation's
    Phase is upserted in its own workflow task, after what its reboot said)."""
    row = ""
    for _ in range(int(seconds / 0.5)):
        listed = await metalflow(env, "host", "list")
        row = next((line for line in listed.stdout.splitlines() if line.startswith(f"{host} ")), "")
        if shows in " ".join(row.split()):
            return row
        await asyncio.sleep(0.5)
    raise AssertionError(f"host list never showed {shows!r} for {host}: {row!r}")


async def test_a_firmware_run_whose_reboot_waits_with_the_host_off_can_be_aborted(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """Case d, the way out: before, `host abort` was refused once the power cycle had started,
    with the host off. Now it reaches the reboot that waits for a person: the reboot ends saying
    the host is OFF, and so does the firmware run's end."""
    host = FIRMWARE_ABORTED
    reboot = f"reboot/{host}/generation-1"
    async with _password_rotates_after_forceoff(sim, host, power_on_after=True):
        async with worker_for(local_env.client, task_queue, sim):
            await _firmware_until_its_reboot_says_off(local_env, host, reboot, task_queue)
            aborted = await _asked(local_env, task_queue, "bob@test", "host", "abort", host)
            assert reboot in aborted.stdout, aborted.stdout
            shown = await _until(local_env, host, _ended, "ended the firmware run")
        outcome = shown["host"]["recent"][-1]["outcome"]
        assert outcome.startswith("aborted by bob@test: "), outcome
        assert f"the host {host} is OFF: metalflow turned it off" in outcome, outcome
        assert "ended with the host OFF" in outcome and "completes on its own" not in outcome, outcome
        assert _power(sim, host)[-1][0] == "Off"  # as the outcome says


async def _power_on_by_hand(sim: RunningSim, host_id: str) -> None:
    """What the person the status spoke to does: On at the BMC (the next test starts with it On)."""
    await reset_by_hand(sim, host_id, "On")


async def test_a_firmware_run_cancelled_while_its_reboot_waits_with_the_host_off_cancels_that_reboot(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """An attack found it: `temporal workflow cancel` of a firmware run whose reboot waited in
    manual-intervention-required with the host OFF left that reboot running, unreachable by
    `host retry`/`abort` ("no operation in flight"), the entity saying `aborted`, no warning.
    Now the cancel reaches the reboot (it tries On afresh, refused) and waits for it; the
    firmware run ends failed `HostLeftOff` saying the host is OFF, and the entity marks it."""
    host = FIRMWARE_CANCELLED
    reboot = f"reboot/{host}/generation-1"
    async with _password_rotates_after_forceoff(sim, host, power_on_after=True):
        async with worker_for(local_env.client, task_queue, sim):
            await _firmware_until_its_reboot_says_off(local_env, host, reboot, task_queue)
            await local_env.client.get_workflow_handle(f"firmware/{host}").cancel()
            shown = await _until(local_env, host, _ended, "ended the firmware run")
            described = await local_env.client.get_workflow_handle(reboot).describe()
            listed = await metalflow(local_env, "host", "list")
        assert described.status is not None and described.status.name != "RUNNING", described.status
        outcome = shown["host"]["recent"][-1]["outcome"]
        assert outcome.startswith("failed: HostLeftOff: cancelled (the workflow was cancelled). "), outcome
        assert f"ended, and the host {host} is OFF: metalflow turned it off" in outcome, outcome
        assert _power(sim, host)[-1][0] == "Off"  # as the outcome says
        row = next(line for line in listed.stdout.splitlines() if line.startswith(f"{host} "))
        assert " idle (host OFF) " in row, listed.stdout


async def test_a_reboot_asked_behind_a_terminated_firmware_runs_waiting_reboot_is_refused_naming_it(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """The re-attack (B3): a firmware run terminated by hand abandons its reboot, waiting for a
    person with the host OFF; `host reboot` then started generation 2, which waited for it
    (`PreviousRebootRunning`, said only in the worker's log), and `host abort` of it waited too.
    Now the request is refused, naming the waiting reboot and how to end it; nothing starts."""
    host = FIRMWARE_CUT
    reboot, after = f"reboot/{host}/generation-1", f"reboot/{host}/generation-2"
    async with _password_rotates_after_forceoff(sim, host, power_on_after=True):
        async with worker_for(local_env.client, task_queue, sim):
            await _firmware_until_its_reboot_says_off(local_env, host, reboot, task_queue)
            await local_env.client.get_workflow_handle(f"firmware/{host}").terminate("as an operator might")
            shown = await _until(local_env, host, _ended, "recorded the firmware run's end")
            refused = await metalflow(
                local_env, "host", "reboot", host, "--by", "bob@test", "--task-queue", task_queue
            )
            # Every other operation that will reboot the host is refused the same way, before it
            # changes anything (item 1 of the re-attack: a reprovision was accepted, deleted both
            # DPUs, then failed `HostBusy` at its own reboot, the DPUs left `Rebooting`).
            others = {}
            for words in (
                ("reprovision",),
                ("firmware", "--version", TARGET, "--image", IMAGE),
                ("reset", "--host"),
                ("reset", "--both"),
            ):
                others[words[0] + (words[1] if words[0] == "reset" else "")] = await metalflow(
                    local_env, "host", words[0], host, *words[1:], "--by", "bob@test",
                    "--task-queue", task_queue,
                )  # fmt: skip
            status = await metalflow(local_env, "host", "status", host)
            # What `host status` reads for its idle DPU WARNING (a DPU Rebooting would be advised
            # to end this run first, not `host reboot`, refused behind it): the waiting reboot.
            held = await reboot_waiting(local_env.client, host, 0)
            waiting = local_env.client.get_workflow_handle(reboot)
            still = (await waiting.describe()).status
            started: Any = None
            for run in (after, f"reprovision/{host}", f"reset/{host}"):
                try:
                    started = await local_env.client.get_workflow_handle(run).describe()
                except Exception:  # noqa: BLE001 - no such workflow: nothing started
                    continue
                break
            firmware_runs = [
                r.run_id async for r in local_env.client.list_workflows(f"WorkflowId = 'firmware/{host}'")
            ]
            await waiting.cancel()  # the way out the refusal names (its On is refused again: OFF)
            with pytest.raises(WorkflowFailureError):  # it ends failed saying the host is OFF
                await waiting.result()
        assert refused.status != 0, refused.stdout + refused.stderr
        assert f"{reboot} still runs and waits for a person (manual-intervention-required" in refused.stderr
        assert f"`temporal workflow cancel --workflow-id {reboot}`" in refused.stderr, refused.stderr
        assert started is None and still is not None and still.name == "RUNNING", (started, still)
        assert len(firmware_runs) == 1, firmware_runs  # the one terminated; no second
        for what, other in others.items():
            assert other.status != 0, (what, other.stdout + other.stderr)
            said = other.stdout + other.stderr
            waits = f"{reboot} still runs and waits for a person (manual-intervention-required"
            assert waits in said, (what, said)
            assert f"`temporal workflow cancel --workflow-id {reboot}`" in said, (what, said)
        outcome = shown["host"]["recent"][-1]["outcome"]
        assert f"{reboot} still waits for a person: `temporal workflow cancel" in outcome, outcome
        assert "idle" in status.stdout and "bob@test" not in status.stdout, status.stdout  # no record kept
        assert held.startswith(f"{reboot} still runs and waits for a person"), held
        advice = rebooting_words(f"{host}-dpu-0", host, held)
        assert f"`metalflow host reboot {host}` and `reprovision` are refused while {reboot}" in advice
        assert f"`temporal workflow cancel --workflow-id {reboot}`" in advice, advice


async def test_a_reprovision_whose_reboot_left_the_host_off_takes_no_host_rebooted_only_retry(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """An attack found it: the reprovision's reboot left the host OFF (the password rotated after
    its ForceOff) and the reprovision, waiting for a person, took `host-rebooted`, told DPF the
    host was rebooted and completed with the host off. Now it offers `retry` only (the reboot
    again, which powers it on), refuses `host-rebooted`, and ends with the host on."""
    host = REPROVISION_HOST
    async with _password_rotates_after_forceoff(sim, host):
        async with worker_for(local_env.client, task_queue, sim):
            await _asked(local_env, task_queue, "alice@test", "host", "reprovision", host)
            words = (await _until(local_env, host, _handed_over, "said the host is OFF", seconds=60))["words"]
            assert words.startswith("manual-intervention-required: "), words
            assert f"`metalflow host retry {host}`" in words and "mark_rebooted" not in words, words
            said = await metalflow(
                local_env, "host-rebooted", host, "--by", "carol@test", "--task-queue", task_queue
            )
            # The host is off: no reboot to confirm. (Sent to no worker's queue, as it once was, it
            # was refused after 5 s for want of a worker, whatever the reprovision would answer.)
            assert said.status == 1, said.stdout + said.stderr
            assert "refused `host-rebooted`" in said.stderr and f"the host {host} is OFF" in said.stderr, said
            assert _power(sim, host)[-1][0] == "Off"
            _fault(sim, host, "clear")
            await _asked(local_env, task_queue, "bob@test", "host", "retry", host)
            shown = await _until(local_env, host, _ended, "ended the reprovision", seconds=60)
        assert shown["host"]["recent"][-1]["outcome"] == "completed", shown["host"]["recent"][-1]
        assert _power(sim, host)[-1][0] == "On"


@pytest.mark.parametrize("how", ["abort", "cancel"])
async def test_a_reprovision_ended_while_its_reboot_left_the_host_off_says_the_host_is_off(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str, how: str
) -> None:
    """An attack found it: a reprovision waiting for a person with the host OFF, then aborted
    (`host abort`) or cancelled (`temporal workflow cancel`), ended saying `Generation reached N.
    Changed by this run: ...` and nothing about power: `host list` showed plain `idle`. Now its
    end says the host is OFF (a cancel ends failed `HostLeftOff`), and the entity marks it."""
    host = REPROVISION_ABORTED if how == "abort" else REPROVISION_CANCELLED
    async with _password_rotates_after_forceoff(sim, host, power_on_after=True):
        async with worker_for(local_env.client, task_queue, sim):
            await _asked(local_env, task_queue, "alice@test", "host", "reprovision", host)
            shown = await _until(local_env, host, _handed_over, "said the host is OFF", seconds=60)
            if how == "abort":
                await _asked(local_env, task_queue, "bob@test", "host", "abort", host)
            else:
                await local_env.client.get_workflow_handle(shown["host"]["current"]["workflow_id"]).cancel()
            shown = await _until(local_env, host, _ended, "ended the reprovision")
            listed = await metalflow(local_env, "host", "list")
        outcome = shown["host"]["recent"][-1]["outcome"]
        begins = "aborted by bob@test: " if how == "abort" else "failed: HostLeftOff: cancelled "
        assert outcome.startswith(begins), outcome
        assert "Changed by this run: " in outcome, outcome
        assert f"its reboot ended, and the host {host} is OFF: metalflow turned it off" in outcome, outcome
        assert _power(sim, host)[-1][0] == "Off"  # as the outcome says
        row = next(line for line in listed.stdout.splitlines() if line.startswith(f"{host} "))
        assert " idle (host OFF) " in row, listed.stdout


async def test_a_reboot_cancelled_with_the_host_off_powers_it_on_once_the_bmc_takes_it(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """An attack found it: a reboot waiting for a person with the host OFF, its BMC fixed, then
    cancelled (`temporal workflow cancel`, or its operation's abort, or its entity gone), ended with
    the host off and sent no On. A cancel asks nobody: the On is tried afresh before it ends."""
    host = CANCELLED_HOST
    async with _password_rotates_after_forceoff(sim, host, power_on_after=True):
        async with worker_for(local_env.client, task_queue, sim):
            await _asked(local_env, task_queue, "alice@test", "host", "reboot", host)
            shown = await _until(local_env, host, _handed_over, "said the host is OFF")
            _fault(sim, host, "clear")  # the BMC takes the credentials again; nobody says retry
            reboot = local_env.client.get_workflow_handle(shown["host"]["current"]["workflow_id"])
            await reboot.cancel()
            shown = await _until(local_env, host, _ended, "ended the reboot")
            ended = await reboot.result()  # completes: the BMC took our ForceOff, then its cancel's On
        assert _power(sim, host)[-1] == ("On", "On"), _power(sim, host)
        # That was a power cycle: generation 1 is reached and counted (issue 40, i40p item 4:
        # before, the run ended cancelled, the entity stayed at 0 and the next reboot reused
        # generation 1's number).
        assert ended["boot_generation"] == 1 and ended["method"] == "bmc:ForceOff+On (On sent by its cancel)"
        assert shown["host"]["boot_generation"] == 1, shown["host"]
        # Attack L6: before, the host's record read `completed`, the cancel unsaid.
        assert shown["host"]["recent"][-1]["outcome"] == (
            "completed (cancelled in Temporal after its ForceOff; its cancel sent On: power-cycled to "
            "generation 1)"
        ), shown["host"]["recent"][-1]


async def test_a_reboot_cancelled_with_the_host_off_and_the_bmc_still_refusing_says_the_host_is_off(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """The same cancel with the BMC still refusing: the reboot's fresh On attempts are refused,
    and before, it ended cancelled, its entity recording only "aborted" (a cancel carries no
    words) with the host OFF. Now it ends failed `HostLeftOff`, so the entity's outcome, `host
    status` and `host list` say the host is OFF."""
    host = CANCELLED_STILL_OFF
    async with _password_rotates_after_forceoff(sim, host, power_on_after=True):
        async with worker_for(local_env.client, task_queue, sim):
            await _asked(local_env, task_queue, "alice@test", "host", "reboot", host)
            shown = await _until(local_env, host, _handed_over, "said the host is OFF")
            await local_env.client.get_workflow_handle(shown["host"]["current"]["workflow_id"]).cancel()
            shown = await _until(local_env, host, _ended, "ended the reboot")
        outcome = shown["host"]["recent"][-1]["outcome"]
        assert outcome.startswith("failed: HostLeftOff: cancelled (the workflow was cancelled). "), outcome
        assert f"the host {host} is OFF: metalflow turned it off" in outcome, outcome
        assert _power(sim, host)[-1][0] == "Off"  # as the outcome says
