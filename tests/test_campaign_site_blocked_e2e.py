"""A campaign that runs is held to a newer `metalflow site check` (issue 36, the attack): started
after a clean check, then `sim fault bmc sb-003 wrong-credentials` and `site check` again (kept:
reprovision blocked on sb-003); the check tells the running campaign, which skips sb-003 naming
the finding, so `reprovision/sb-003` never starts; and gives up its claim, so README's remedy (fix
it, check again, run it in a new campaign) finds it free, while a new campaign of only a host the
first still holds is refused (exit 1), not "completed" on no host.

Cost: one simulator of three hosts, the session's Temporal dev server, the real worker, six
`metalflow` commands in the tests' command servers.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from events_support import emitting_worker, events_v1
from host_operation_support import worker_for
from sim_support import running_sim, sim_http
from temporalio.client import WorkflowExecutionStatus
from temporalio.testing import WorkflowEnvironment
from test_site_check import metalflow, rollout_env, site_file


async def until_settled(env: WorkflowEnvironment, name: str, *, ended: bool) -> None:
    """The aborted campaign's run has ended (`ended`), or at least runs no activity, so the worker
    block exits at once: a worker stopping while the abort still told its hosts or released its
    claims (activities that update workflows this worker no longer runs) sat out the worker's
    10 s graceful shutdown. Clean-up only: it asserts nothing."""
    handle = env.client.get_workflow_handle(f"campaign/{name}")
    for _ in range(600):
        described = await handle.describe()
        if described.status != WorkflowExecutionStatus.RUNNING:
            return
        if not ended and not described.raw_description.pending_activities:
            return
        await asyncio.sleep(0.1)
    # Not settled in a minute (a loaded machine): leave anyway, the shutdown then waits as before.


HOSTS = {f"sb-00{i}": ("", "powercycle", "BF3") for i in (1, 2, 3)}


async def test_a_running_campaign_skips_a_host_a_newer_check_blocks(
    local_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    with running_sim(tmp_path / "sim", site_file=site_file(tmp_path / "in", HOSTS), initialised=True) as sim:
        env = rollout_env(sim, local_env)
        queue = ["--task-queue", task_queue]
        async with worker_for(local_env.client, task_queue, sim):
            clean = await metalflow(env, "site", "check")
            assert clean.returncode == 0, clean.stdout + clean.stderr
            name = f"sb-{task_queue[-8:]}"
            paced = ["--canary", "1", "--soak", "10m"]  # sb-003 waits: the canary, then a soak
            hosts_arg = ["--hosts", ",".join(HOSTS)]
            started = await metalflow(
                env, "campaign", "start", name, "--reprovision", *hosts_arg, *paced, *queue
            )
            assert started.returncode == 0, started.stdout + started.stderr
            fault = f"{sim.url}/sim/faults/bmcs/sb-003/wrong-credentials"
            sim_http().post(fault).raise_for_status()
            checked = await metalflow(env, "site", "check", "--timeout", "5")
            assert checked.returncode == 1, checked.stdout + checked.stderr  # the check's own status
            told = f"told campaign campaign/{name}: sb-003 skipped: reprovision is blocked on it"
            assert told in checked.stderr, checked.stderr
            hosts = json.loads((await metalflow(env, "campaign", "hosts", name, "--json")).stdout)
            sb003 = next(h for h in hosts if h["host_id"] == "sb-003")
            assert sb003["outcome"] == "skipped", sb003
            assert (
                "by the site check of" in sb003["reason"]
                and "refuses the stored credentials" in sb003["reason"]
            ), sb003
            assert not sb003["workflow_id"], sb003  # reprovision/sb-003 never started
            # README's remedy: fixed, checked again, run in a new campaign. The campaign gave up
            # sb-003's claim as it skipped it (it still runs, in its soak), so the new one takes it.
            sim_http().post(f"{sim.url}/sim/faults/bmcs/sb-003/clear").raise_for_status()
            again = await metalflow(env, "site", "check", "--timeout", "5")
            assert again.returncode == 0, again.stdout + again.stderr
            planned = await metalflow(
                env, "campaign", "plan", f"{name}-b", "--reprovision", "--hosts", "sb-003", *queue
            )
            assert planned.returncode == 0, planned.stdout + planned.stderr
            assert "claimed by running campaign" not in planned.stdout, planned.stdout
            # A host it still holds (sb-002 waits for the soak): every host refused, nothing runs:
            # refused, exit 1, never "started ... (completed)" on 0 hosts.
            held = await metalflow(
                env, "campaign", "start", f"{name}-c", "--reprovision", "--hosts", "sb-002", *queue
            )
            assert held.returncode == 1, held.stdout + held.stderr
            assert (
                "campaign refused, nothing started: every selected host is claimed by another running "
                f"campaign, so nothing would run: sb-002 claimed by running campaign campaign/{name}"
            ) in held.stderr, held.stdout + held.stderr
            aborted = await metalflow(env, "campaign", "abort", name, "--cancel-running")
            # Clean-up only: a campaign that already ended (its canary's run ended early under a
            # loaded full run) has nothing to abort; the claims above are what this test is about.
            ended = aborted.returncode == 1 and "has ended" in aborted.stdout + aborted.stderr
            assert aborted.returncode == 0 or ended, aborted.stdout + aborted.stderr
            await until_settled(local_env, name, ended=True)


async def test_a_campaign_host_the_check_degrades_runs_and_says_so_as_a_direct_operation_does(
    local_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    """Issue 36 attack item 2: a host whose BMC has no PowerCycle (reprovision degraded, redfish
    P1) run by a campaign said nothing of it (`plan`, `host status --json`'s `site_check: []`, the
    `OperationStarted` Event), where `metalflow host reprovision` says all three. Now `plan` lists
    it degraded with the reason, and the campaign's request to its entity carries the words."""
    one = {"sd-001": ("", "no-powercycle", "BF3")}
    with running_sim(tmp_path / "sim", site_file=site_file(tmp_path / "in", one), initialised=True) as sim:
        env = rollout_env(sim, local_env)
        queue = ["--task-queue", task_queue]
        async with emitting_worker(local_env.client, task_queue, sim):
            checked = await metalflow(env, "site", "check")
            assert checked.returncode == 0, checked.stdout + checked.stderr  # degraded, nothing blocked
            name = f"sd-{task_queue[-8:]}"
            args = ["--reprovision", "--hosts", "sd-001", "--canary", "0", *queue]
            planned = await metalflow(env, "campaign", "plan", name, *args)
            assert planned.returncode == 0, planned.stdout + planned.stderr
            assert "degraded (1): reprovision is degraded on <host> by the site check of" in planned.stdout
            assert "PowerCycle" in planned.stdout and ": sd-001" in planned.stdout, planned.stdout
            started = await metalflow(env, "campaign", "start", name, *args)
            assert started.returncode == 0, started.stdout + started.stderr
            said = "reprovision is degraded on sd-001 by the site check of"
            operation: dict[str, Any] = {}
            deadline = time.monotonic() + 15
            while not operation.get("site_check"):
                assert time.monotonic() < deadline, operation
                shown = await metalflow(env, "host", "status", "sd-001", "--json")
                operation = (json.loads(shown.stdout or "{}") if shown.returncode == 0 else {}).get(
                    "operation"
                ) or {}
                await asyncio.sleep(0.2)
            assert any(w.startswith(said) for w in operation["site_check"]), operation
            while not (events := [e for e in events_v1(sim) if f"site check: {said}" in e.get("note", "")]):
                assert time.monotonic() < deadline, [(e.get("reason"), e.get("note")) for e in events_v1(sim)]
                await asyncio.sleep(0.2)
            assert [e["reason"] for e in events] == ["OperationStarted"], events
            aborted = await metalflow(env, "campaign", "abort", name, "--cancel-running")
            ended = aborted.returncode == 1 and "has ended" in aborted.stdout + aborted.stderr
            assert aborted.returncode == 0 or ended, aborted.stdout + aborted.stderr
            await until_settled(local_env, name, ended=False)  # it finishes its reprovision
