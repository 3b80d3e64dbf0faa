"""`metalflow approve` judges the request awaiting approval by the kept site check (issue 36, a
re-attack's item 1): as maintenance is judged again at approval, so is the check kept since the
request was held. A request held on an assigned host, then a check that blocks it, then
`approve`: refused (exit 1, the finding named), nothing changed, the request still awaits; a
check that degrades it: approved, saying "degraded".

Cost: one simulator of two hosts, the session's Temporal dev server, nine `metalflow` commands in
the tests' command servers.
"""

from __future__ import annotations

import json
from pathlib import Path

from host_operation_support import worker_for
from sim_support import running_sim, sim_http
from temporalio.testing import WorkflowEnvironment
from test_site_check import check, metalflow, rollout_env, site_file


async def test_approve_is_judged_by_the_kept_site_check(
    local_env: WorkflowEnvironment, task_queue: str, tmp_path: Path
) -> None:
    hosts = {"sa-001": ("", "powercycle", "BF3"), "sa-002": ("", "no-powercycle", "BF3")}
    with running_sim(tmp_path / "sim", site_file=site_file(tmp_path / "in", hosts)) as sim:
        env = rollout_env(sim, local_env)
        queue = ["--task-queue", task_queue]
        async with worker_for(local_env.client, task_queue, sim):
            for host in hosts:
                assigned = await metalflow(env, "host", "assign", host, f"inst-{host}", *queue)
                assert assigned.returncode == 0, assigned.stderr
            assert (await check(sim, "site", "check")).returncode == 0  # sa-002's reboot: degraded
            for host in hosts:
                held = await metalflow(env, "host", "reboot", host, *queue)
                assert held.returncode == 0 and "awaits approval" in held.stdout, held.stdout + held.stderr
            fault = f"{sim.url}/sim/faults/bmcs/sa-001/wrong-credentials"
            sim_http().post(fault).raise_for_status()
            assert (await check(sim, "site", "check", "--timeout", "5")).returncode == 1
            refused = await metalflow(env, "approve", "sa-001", *queue)
            assert refused.returncode == 1, refused.stdout + refused.stderr
            assert "sa-001: not approved: reboot is blocked on sa-001" in refused.stderr
            assert "[redfish F1]" in refused.stderr and "metalflow site check" in refused.stderr
            status = json.loads((await metalflow(env, "host", "status", "sa-001", "--json")).stdout)["host"]
            assert status["phase"] == "awaiting-approval", status  # nothing changed
            assert status["awaiting"]["operation"] == "reboot", status
            approved = await metalflow(env, "approve", "sa-002", *queue)
            assert approved.returncode == 0, approved.stdout + approved.stderr
            assert "reboot is degraded on sa-002 by the site check of" in approved.stderr
