"""Issue 38, an operator's first day, what was still open: against a real Temporal, a worker with
every real workflow and activity, and the simulated site, as a user runs the CLI.

1. While a reset (or a provision, a reprovision, a firmware run) waits on its reboot child's
   power-down wait, its own page in the Temporal UI (its current details) said only "power cycle
   of HOST to generation N"; `host status` said the wait. Now the reboot tells its caller as the
   wait begins (one signal), and the caller's details say the same words as `host status`. Cost,
   measured here: the reboot's signal (one Action), its history +5 events, the caller's +4.
2. An operator's update to a campaign or rollout that has ended (`campaign abort`, `pause`,
   `resume`, ...) exited 2 "no campaign campaign/NAME running", the status of a name that never
   existed. It exists; it ended: the world said no, exit 1, saying how it ended.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from cli_support import metalflow
from module_site_support import ModuleSite
from temporalio.api.enums.v1 import EventType
from temporalio.api.sdk.v1 import WorkflowMetadata
from temporalio.client import WorkflowHandle
from temporalio.testing import WorkflowEnvironment

from metalflow.cancelled import METADATA_QUERY

HOST = "fdm-002"  # the rotation's second profile: no-powercycle (ForceOff, the wait, On)
SITE = ModuleSite("fdm", hosts=2, for_metalflow=True)
sim, queue = SITE.fixtures()


async def _details(handle: WorkflowHandle[Any, Any]) -> str:
    metadata = await handle.query(METADATA_QUERY, result_type=WorkflowMetadata)
    return str(metadata.current_details)


async def _event_types(handle: WorkflowHandle[Any, Any]) -> list[int]:
    return [event.event_type async for event in handle.fetch_history_events()]


async def test_a_resets_own_page_says_its_reboots_power_down_wait_as_host_status_does(
    local_env: WorkflowEnvironment, queue: str
) -> None:
    client = local_env.client
    # 10 s: on a loaded machine one in-process `host status` took long enough that a 6 s wait was
    # over before it read, and its "now" line was gone (a full run saw it).
    reset = ("host", "reset", HOST, "--host", "--power-down-wait", "10", "--wait", "--task-queue", queue)
    began = time.monotonic()
    waited = asyncio.ensure_future(SITE.cli(local_env, *reset))
    parent = client.get_workflow_handle(f"reset/{HOST}")
    reboot = f"reboot/{HOST}/generation-1"
    details, now = "", ""
    for _ in range(300):  # the reset's own details during the wait, then `host status`'s "now"
        await asyncio.sleep(0.1)
        if waited.done():
            break
        try:
            details = await _details(parent)
        except Exception:  # noqa: BLE001 - not started yet
            continue
        if "power-down wait:" in details:
            status = await SITE.cli(local_env, "host", "status", HOST)
            now = next((line for line in status.stdout.splitlines() if line.startswith("    now ")), "")
            if now:
                break
    done = await waited
    assert done.status == 0, done.stdout + done.stderr
    assert time.monotonic() - began < 40
    said = f"power cycle of {HOST} to generation 1; its reboot {reboot}: powering: power-down wait: {HOST} is"
    assert said in details, details  # before: "**rebooting-host**: power cycle of HOST to generation 1"
    assert details.startswith("**rebooting-host**: "), details
    # The same words as `host status` (which may have read the wait once more since: "(read T)").
    shown = details.removeprefix("**rebooting-host**: ")
    assert now and shown.split(" (a durable timer")[0].split(" (read ")[0] in now, (now, shown)
    # What it costs: one signal, sent once by the reboot, received once by the reset.
    parent_events = await _event_types(parent)
    child_events = await _event_types(client.get_workflow_handle(reboot))
    sent = child_events.count(EventType.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED)
    heard = parent_events.count(EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED)
    print(f"history: reset {len(parent_events)} events, its reboot {len(child_events)} events")
    assert (sent, heard) == (1, 1), (sent, heard)


async def test_an_update_to_an_ended_campaign_says_it_ended_and_exits_1_an_unknown_one_2(
    local_env: WorkflowEnvironment,
) -> None:
    client = local_env.client
    ended = await client.start_workflow("CampaignWorkflow", id="campaign/fdm-ended", task_queue="fdm-none")
    await ended.terminate("the test ends it")
    paused = await metalflow(local_env, "campaign", "pause", "fdm-ended")
    said = "campaign/fdm-ended has ended (terminated): `pause` has nothing to act on; nothing was changed"
    assert (paused.status, said in paused.stderr) == (1, True), (
        paused.stderr
    )  # before: 2, "no campaign ... running"
    # The command's own words, never the update's name (before: "nothing to retry_failed").
    for argv, word in ((("retry-failed",), "retry-failed"), (("skip", "h1"), "skip")):
        refused = await metalflow(local_env, "campaign", argv[0], "fdm-ended", *argv[1:])
        assert f"has ended (terminated): `{word}` has nothing to act on;" in refused.stderr, refused.stderr
    unknown = await metalflow(local_env, "campaign", "abort", "fdm-never", "--reason", "typo")
    assert (unknown.status, "no campaign campaign/fdm-never running" in unknown.stderr) == (2, True), (
        unknown.stderr
    )
