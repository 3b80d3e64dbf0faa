"""Attack 41a HIGH-1: an abort while the power cycle rides out a BMC that does not answer said
"a power cycle in flight is cut short", yet sent no cancel to `power_cycle_host`: the activity kept
retrying and power-cycled the host (ForceOff, On) the moment the BMC answered again, after the
abort; the run then ended `aborted ... The host was power-cycled`. An operator's abort is
sovereign: now the stop asks the activity to cancel, and the activity, which alone knows its
step without a race, stops while it has sent no reset (`stopped_only_before_a_reset`): nothing
is sent after the abort, the run ends aborted saying the host's power was not touched, and the
entity's boot generation stays where it was. Through the real CLI against a real Temporal, the
product's worker and the simulated site (support: tests/test_bmc_silence_said.py)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from cli_support import metalflow
from host_operation_support import aborted_run, reset_by_hand
from module_site_support import ModuleSite
from sim_support import RunningSim, sim_http
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from workflows.parts.host_power import POWER_NOT_TOUCHED

SITE = ModuleSite("abrst", hosts=2, for_metalflow=True, timing={"power_transition_seconds": 0.5})
sim, queue = SITE.fixtures()
HOST = "abrst-002"  # the rotation's no-powercycle profile: ForceOff, the power-down wait, On


def _fault(running: RunningSim, bmc: str, fault: str) -> None:
    sim_http().post(f"{running.url}/sim/faults/bmcs/{bmc}/{fault}").raise_for_status()


async def _shown(env: WorkflowEnvironment) -> dict[str, Any]:
    shown = await metalflow(env, "host", "status", HOST, "--json")
    if shown.status == 2:  # `host reboot` has not created the host's entity yet
        return {}
    assert shown.status == 0, shown.stdout + shown.stderr
    return dict(json.loads(shown.stdout))


async def _stop_reads_the_bmc(reboot: WorkflowHandle[Any, Any]) -> bool:
    history = await reboot.fetch_history()
    return any(
        event.activity_task_scheduled_event_attributes.activity_type.name == "read_power_state"
        for event in history.events
        if event.HasField("activity_task_scheduled_event_attributes")
    )


async def test_an_abort_while_the_bmc_does_not_answer_sends_nothing_after_it(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    env = local_env
    _fault(sim, HOST, "unreachable")
    try:
        rebooting = asyncio.ensure_future(
            metalflow(env, "host", "reboot", HOST, "--power-down-wait", "0", "--wait", "--task-queue", queue)
        )
        shown: dict[str, Any] = {}
        for _ in range(240):  # the cycle rides out the silent BMC inside its first attempt
            shown = await _shown(env)
            if "has not answered since" in str((shown.get("operation") or {}).get("waiting_for")):
                break
            assert not rebooting.done(), rebooting.result()
            await asyncio.sleep(0.25)
        operation = shown.get("operation") or {}
        assert "has not answered since" in str(operation.get("waiting_for")), shown
        generation_before = shown["host"]["boot_generation"]

        aborted = await metalflow(env, "host", "abort", HOST, "--reason", "wrong host", "--task-queue", queue)
        assert aborted.status == 0, aborted.stdout + aborted.stderr
        assert "a power cycle that has sent no reset yet stops" in aborted.stdout, aborted.stdout
        assert "cut short" not in aborted.stdout, aborted.stdout  # before: said, and not done

        # The BMC answers again once the run ended (now: at once, the BMC still silent), or once
        # the stop reads the BMC (before: its read retried the silent BMC while the cycle went on;
        # the attacker's fault cleared 4 s after the abort): nothing may reach it after the abort.
        reboot = env.client.get_workflow_handle(f"reboot/{HOST}/generation-{generation_before + 1}")
        for _ in range(240):
            if rebooting.done() or await _stop_reads_the_bmc(reboot):
                break
            await asyncio.sleep(0.25)
        _fault(sim, HOST, "clear")
        done = await asyncio.wait_for(rebooting, 120)
        entity = await SITE.until_idle(env, HOST)
        await asyncio.sleep(1.0)  # a cycle still in flight would reach the answering BMC now
        assert sim.power_log(HOST) == [], sim.power_log(HOST)  # before: ForceOff, On after the abort
        last = entity["recent"][-1]
        words = await aborted_run(reboot)
        assert "stopped before sending any reset" in words and POWER_NOT_TOUCHED in words, words
        assert "not reached" in words and "power-cycled" not in words, words
        assert "not reached" in done.stdout and "power-cycled" not in done.stdout, done.stdout
        assert last["operation"] == "reboot" and POWER_NOT_TOUCHED in last["outcome"], last
        assert entity["boot_generation"] == generation_before, entity  # not reached: not counted
        assert sim.violations() == []
    finally:
        _fault(sim, HOST, "clear")
        await reset_by_hand(sim, HOST, "On")
