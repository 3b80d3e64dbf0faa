"""Events exact for rollouts and campaigns (issue 38 item 3): each run tells one start and one end
Event, the end's reason matching how the run ended (`rollout status` / `campaign status` say the
same), the end's words in its note; a campaign writes no Event per host of its own. Through the
real CLI, a worker with its Event emitter, and the Events the simulated site's API keeps."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from cli_support import metalflow, use_site_file
from events_support import api, emitting_worker
from rollout_support import PLAIN, wait_serving
from sim_support import RunningSim, running_sim, site_file_with_prefix
from temporalio.testing import WorkflowEnvironment

PREFIX = f"evrc{uuid.uuid4().hex[:5]}"
PCS = f"{PREFIX}-plain"  # a name of this module's own: rollout ids are per PodCliqueSet
HOST = f"{PREFIX}-001"
FAST = ["--power-down-wait", "0", "--dpu-error-reprovisions", "0"]


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    """One host (for a campaign) and one Grove workload (for rollouts) on one simulated site."""
    directory = tmp_path_factory.mktemp("site")
    site_file = site_file_with_prefix(directory / "in", PREFIX, hosts=1, dpus_per_host=1)
    site = yaml.safe_load(site_file.read_text())
    site["workloads"] = [{**PLAIN, "name": PCS}]
    site_file.write_text(yaml.safe_dump(site))
    with running_sim(directory / "sim", site_file=site_file, timings="zero", initialised=True) as running:
        wait_serving(running, PCS)
        use_site_file(running.site_file)
        yield running


@pytest.fixture
async def queue(local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str) -> Any:
    async with emitting_worker(local_env.client, task_queue, sim):
        yield task_queue


def events_of(sim: RunningSim, workflow_id: str) -> list[dict[str, Any]]:
    """metalflow's Events in `default` (a rollout's PodCliqueSet is there; a campaign's Events too)
    whose note names `workflow_id` (every note ends with its workflow id)."""
    response = api(sim, "GET", "/apis/events.k8s.io/v1/namespaces/default/events")
    response.raise_for_status()
    return [
        event
        for event in response.json()["items"]
        if event.get("reportingController") == "metalflow" and event["note"].endswith(f"({workflow_id})")
    ]


async def told(sim: RunningSim, workflow_id: str, ending: str) -> tuple[Counter[str], list[dict[str, Any]]]:
    """The reasons of `workflow_id`'s Events (a series counted), once `ending` is written (the
    emitter writes in the background), and a moment more for a duplicate to show."""
    for _ in range(100):
        if any(e["reason"] == ending for e in events_of(sim, workflow_id)):
            await asyncio.sleep(0.5)
            break
        await asyncio.sleep(0.1)
    found = events_of(sim, workflow_id)
    counted: Counter[str] = Counter()
    for event in found:
        counted[event["reason"]] += (event.get("series") or {}).get("count", 1)
    return counted, found


async def test_a_rollout_tells_its_start_and_its_end_on_its_podcliqueset(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    workflow_id = f"rollout/default/{PCS}"
    rolled = await metalflow(
        local_env, "rollout", "start", f"default/{PCS}", "--set", "frontend=registry.local/f:2",
        "--allow-replica-outage",
        "--wait", "--task-queue", queue,
    )  # fmt: skip
    assert rolled.status == 0, rolled.stdout + rolled.stderr
    status = json.loads((await metalflow(local_env, "rollout", "status", f"default/{PCS}", "--json")).stdout)
    assert status["phase"] == "completed", status
    seen, found = await told(sim, workflow_id, "RolloutSucceeded")
    assert seen == Counter({"RolloutStarted": 1, "RolloutSucceeded": 1}), seen
    for event in found:
        assert event["regarding"]["kind"] == "PodCliqueSet" and event["regarding"]["name"] == PCS, event
        assert event["action"] == "Rollout"

    # An operator's abort: the second run of the same PodCliqueSet tells its own start and an abort.
    started = await metalflow(
        local_env, "rollout", "start", f"default/{PCS}", "--set", "frontend=registry.local/f:3",
        "--allow-replica-outage",
        "--task-queue", queue,
    )  # fmt: skip
    assert started.status == 0, started.stderr
    aborted = await metalflow(local_env, "rollout", "abort", f"default/{PCS}", "--reason", "wrong image")
    assert aborted.status == 0, aborted.stderr
    handle = local_env.client.get_workflow_handle(workflow_id)
    await asyncio.wait_for(handle.result(), 60)
    status = json.loads((await metalflow(local_env, "rollout", "status", f"default/{PCS}", "--json")).stdout)
    assert status["phase"] == "aborted", status
    seen, found = await told(sim, workflow_id, "RolloutAborted")
    assert seen == Counter({"RolloutStarted": 2, "RolloutSucceeded": 1, "RolloutAborted": 1}), seen
    [ended] = [e for e in found if e["reason"] == "RolloutAborted"]
    assert ended["type"] == "Warning" and "wrong image" in ended["note"], ended


async def test_a_campaign_tells_its_start_and_its_end_and_nothing_per_host(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    name = f"{PREFIX}-fleet"
    done = await metalflow(
        local_env, "campaign", "start", name, "--hosts", HOST, "--reprovision", "--canary", "0", *FAST,
        "--wait", "--task-queue", queue,
    )  # fmt: skip
    assert done.status == 0, done.stdout + done.stderr
    status = json.loads((await metalflow(local_env, "campaign", "status", name, "--json")).stdout)
    assert status["phase"] == "completed", status
    seen, found = await told(sim, f"campaign/{name}", "CampaignCompleted")
    assert seen == Counter({"CampaignStarted": 1, "CampaignCompleted": 1}), seen
    assert all(not event.get("regarding") and event["action"] == "Campaign" for event in found), found
    # The host's own operation told its DPUNode (not `default`): the campaign added nothing per host.
    assert [e for e in events_of(sim, f"reprovision/{HOST}")] == []
    # `metalflow events` reads the DPF namespace; it says where a campaign's and a rollout's are.
    listed = await metalflow(local_env, "events")
    assert listed.status == 0, listed.stderr
    assert "campaign Events (CampaignStarted" in listed.stdout and "namespace default" in listed.stdout
