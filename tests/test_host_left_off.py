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
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from cli_support import metalflow, shown_state, use_site_file
from host_operation_support import worker_for
from sim_support import RunningSim, prefixed_sim
from temporalio.testing import WorkflowEnvironment

RESET_HOST = "off-001"  # profile powercycle: a reset's ForceOff is its own
REBOOT_HOST = "off-002"  # profile no-powercycle: a reboot is ForceOff, then On


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(
        tmp_path_factory.mktemp("sim"), "off", hosts=2, dpus_per_host=1, timing={"dpu_boot_seconds": 0.2}
    ) as running:
        use_site_file(running.site_file)
        yield running


def _fault(sim: RunningSim, bmc: str, fault: str) -> None:
    """`metalflow sim fault bmc BMC FAULT` (the endpoint it posts to)."""
    httpx.post(f"{sim.url}/sim/faults/bmcs/{bmc}/{fault}", timeout=10).raise_for_status()


def _power(sim: RunningSim, host: str) -> list[tuple[str, str]]:
    return [(e["to"], e["reset_type"]) for e in sim.power_log(host)]


async def _until(
    env: WorkflowEnvironment, host: str, done: Any, what: str, seconds: float = 30
) -> dict[str, Any]:
    shown: dict[str, Any] = {}
    for _ in range(int(seconds / 0.2)):
        shown = await shown_state(env, host)
        if done(shown):
            return shown
        await asyncio.sleep(0.2)
    raise AssertionError(f"{host} never {what}: {shown}")


def _waiting_words(shown: dict[str, Any]) -> str:
    operation = shown["operation"] or {}
    return f"{operation.get('phase')}: {operation.get('waiting_for')}"


def _handed_over(shown: dict[str, Any]) -> bool:
    return "is OFF" in _waiting_words(shown)


async def test_a_full_reset_whose_host_bmc_rotates_after_forceoff_hands_the_host_off_to_a_person(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
) -> None:
    """Case a: before, two power-on attempts ms apart, the run failed, the host idle and off with
    no warning and nothing to retry. Now: the On is tried again after a backoff, then the reset
    waits in manual-intervention-required saying the host is OFF; `host retry` once the password
    is fixed powers it on, and the reset ends saying what it did and that the host is on."""
    host = RESET_HOST
    _fault(sim, host, "rotate-after-forceoff")
    try:
        async with worker_for(local_env.client, task_queue, sim):
            started = await metalflow(
                local_env, "host", "reset", host, "--both", "--by", "alice@test", "--task-queue", task_queue
            )
            assert started.status == 0, started.stdout + started.stderr
            shown = await _until(local_env, host, _handed_over, "said the host is OFF")
            words = _waiting_words(shown)
            assert words.startswith("manual-intervention-required: "), words
            assert f"the host {host} is OFF: metalflow turned it off (ForceOff of {host}" in words, words
            assert "BMCAuthenticationFailed" in words and "after 3 attempts" in words, words
            assert f"`metalflow host retry {host}`" in words and f"`metalflow host abort {host}`" in words
            assert _power(sim, host)[-1][0] == "Off"  # as the status says
            status = await metalflow(local_env, "host", "status", host)
            assert "is OFF" in status.stdout and "metalflow host retry" in status.stdout, status.stdout

            _fault(sim, host, "clear")  # the secrets store caught up
            retried = await metalflow(
                local_env, "host", "retry", host, "--by", "bob@test", "--task-queue", task_queue
            )
            assert retried.status == 0, retried.stdout + retried.stderr
            shown = await _until(local_env, host, lambda s: s["host"]["current"] is None, "ended the reset")
        outcome = shown["host"]["recent"][-1]["outcome"]
        assert outcome.startswith("failed: BMC") and " 401 " in outcome, outcome  # the cause, in words
        assert outcome.endswith("Done: nothing was reset; the host is on"), outcome
        assert _power(sim, host)[-1] == ("On", "On")
    finally:
        _fault(sim, host, "clear")
