"""Attack 40f's MEDIUM: a host reboot whose BMC does not answer was silent for minutes: `host
status HOST` said only `waiting for the power cycle ...`, only the worker's log `BMC unavailable
(... cannot reach ...)`, while the power cycle retried inside its attempt (up to 3 x its 300 s
per-transition timeout plus the power-down wait, and the attempts after it). Now the power
cycle's heartbeat details carry the BMC's problem and `host status` (and `--wait`) say it, with
since when and until about when it keeps trying, from the describe they already made; cleared,
the BMC answers and the reboot completes with one power cycle. Pure words:
tests/fast/test_power_cycle_trouble.py."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from cli_support import metalflow
from host_operation_support import reset_by_hand
from module_site_support import ModuleSite
from sim_support import RunningSim, sim_http
from temporalio.testing import WorkflowEnvironment

SITE = ModuleSite("silent", hosts=2, for_metalflow=True, timing={"power_transition_seconds": 0.5})
sim, queue = SITE.fixtures()
HOST = "silent-002"  # the rotation's no-powercycle profile: ForceOff, the power-down wait, On


def _fault(running: RunningSim, bmc: str, fault: str) -> None:
    sim_http().post(f"{running.url}/sim/faults/bmcs/{bmc}/{fault}").raise_for_status()


async def _operation(env: WorkflowEnvironment) -> dict[str, Any]:
    shown = await metalflow(env, "host", "status", HOST, "--json")
    if shown.status == 2:  # `host reboot` has not created the host's entity yet
        return {}
    assert shown.status == 0, shown.stdout + shown.stderr
    operation: dict[str, Any] = json.loads(shown.stdout)["operation"] or {}
    return operation


async def test_a_reboot_whose_bmc_does_not_answer_says_so_in_host_status_early(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    env = local_env
    _fault(sim, HOST, "unreachable")
    try:
        rebooting = asyncio.ensure_future(
            metalflow(env, "host", "reboot", HOST, "--power-down-wait", "1", "--wait", "--task-queue", queue)
        )
        operation: dict[str, Any] = {}
        for _ in range(120):  # generous: said within the attempt's first seconds, not its 15 minutes
            operation = await _operation(env)
            if "has not answered since" in str(operation.get("waiting_for")) or rebooting.done():
                break
            await asyncio.sleep(0.25)
        waiting = str(operation.get("waiting_for"))
        assert f"BMC {HOST} has not answered since " in waiting, operation  # before: only the log said it
        assert "(cannot reach http://" in waiting and "keeps trying until about " in waiting, waiting
        assert operation.get("phase") == "powering" and not rebooting.done(), operation  # still waiting
        assert "[redacted]" not in waiting  # nothing secret-shaped in these words to take out
        text = await metalflow(env, "host", "status", HOST)
        assert f"BMC {HOST} has not answered since " in text.stdout, text.stdout
        assert sim.power_log(HOST) == []  # nothing sent while it does not answer
        _fault(sim, HOST, "clear")  # it answers again: the same attempt goes on, cycles once
        done = await rebooting
        assert done.status == 0, done.stdout + done.stderr
        assert f"BMC {HOST} has not answered since " in done.stdout, done.stdout  # `--wait` said it too
        assert [(e["to"], e["reset_type"]) for e in sim.power_log(HOST)] == [
            ("Off", "ForceOff"),
            ("On", "On"),
        ]
        after = await metalflow(env, "host", "status", HOST)
        assert "has not answered" not in after.stdout, after.stdout
    finally:
        _fault(sim, HOST, "clear")
        await reset_by_hand(sim, HOST, "On")
