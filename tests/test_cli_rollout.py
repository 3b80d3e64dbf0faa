"""`metalflow rollout ...` as a user runs it: subprocesses against a real Temporal, a worker with
every real workflow and activity, and the simulated site's Grove."""

from __future__ import annotations

import asyncio
import json
import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from cli_support import METALFLOW, metalflow, metalflow_env, use_site_file
from host_operation_support import worker_for
from rollout_support import INFERENCE, gangs, grove_site, pcs_object, pod_hashes, wait_for
from sim_support import RunningSim
from takeover_support import takeover_seconds
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from contracts.models.grove import ROLLOUT_ANNOTATION, RolloutResult
from drivers.settings import Settings
from metalflow.cli import exits
from metalflow.runtime.worker import build_worker

ROLLING = {**INFERENCE, "name": "rolling", "update_strategy": "RollingRecreate"}


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with grove_site(tmp_path_factory.mktemp("grove"), INFERENCE, ROLLING) as running:
        use_site_file(running.site_file)  # `metalflow()` gives the CLI this site's kubeconfig
        yield running


@pytest.fixture
async def queue(local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str) -> AsyncIterator[str]:
    async with worker_for(local_env.client, task_queue, sim):
        yield task_queue


@pytest.fixture(scope="module")
async def refusing_queue(local_env: WorkflowEnvironment, sim: RunningSim) -> AsyncIterator[str]:
    """One worker for all the refused requests (~2 s to start and up to 3 s to stop per test, six
    times over): they start nothing, so nothing of one case is left for the next to meet."""
    settings = Settings(
        site_file=sim.site_file, kubeconfig=sim.kubeconfig, worker_takeover_seconds=takeover_seconds()
    )
    async with build_worker(local_env.client, f"refusals-{uuid.uuid4()}", settings) as worker:
        yield worker.task_queue


async def test_start_wait_completes_and_status_reports_it(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    done = await metalflow(
        local_env,
        "rollout",
        "start",
        "default/inference",
        "--set",
        "prefill=registry.local/prefill:2",
        "--set",
        "decode/main=registry.local/decode:2",
        "--wait",
        "--task-queue",
        queue,
    )
    assert done.status == 0, done.stderr
    assert "rollout rollout/default/inference completed" in done.stdout
    # Issue 36, item 10: the scaling group's scale-out stays gated after it (BEHAVIOUR.md G5).
    gated = "warning: a scale-out of the scaling groups of default/inference stays gated in replica(s) 0, 1"
    assert gated in done.stdout, done.stdout
    assert "[" in done.stdout and "/6" in done.stdout  # progress lines
    # Not a terminal: stamped lines (UTC, elapsed), and what each step waits for since when.
    assert re.search(r"Z \+\d+:\d\d rollout/default/inference: default/inference rolling \[", done.stdout)
    waits = r"rollout/default/inference:   waiting for inference-0-\d+ whole and Ready at the new version \("
    assert re.search(waits, done.stdout), done.stdout
    shown = await metalflow(local_env, "rollout", "status", "default/inference", "--json")
    assert shown.status == 0, shown.stderr
    status = json.loads(shown.stdout)
    assert status["phase"] == "completed" and status["done"] == status["total"] == 6
    assert len(status["steps"]) == status["steps_done"] == 6
    assert len(pod_hashes(sim, "inference", "decode")) == 1
    plain = await metalflow(local_env, "rollout", "status", "default/inference")
    assert "completed [##############################] 6/6" in plain.stdout
    assert gated in plain.stdout, plain.stdout
    assert sim.violations() == []


# Exit statuses (README's table): 2 bad input or an unknown object, 1 what is set up now refuses it.
@pytest.mark.parametrize(
    ("args", "message", "status"),
    [
        (["default/nope", "--set", "router=registry.local/r:2"], "no PodCliqueSet default/nope", 2),
        (["default/inference", "--set", "gpu=registry.local/g:2"], "has no clique gpu", 2),
        (["default/rolling", "--set", "router=registry.local/r:2"], "needs OnDelete", 1),
        (["default/inference", "--set", "decode/side=registry.local/r:2"], "has no container 'side'", 2),
        (["default/inference", "--set", "router=registry.local/r:2"], "--allow-replica-outage", 1),
        (["default/inference", "--set", "router="], "the image is empty", 2),
        (["default/inference", "--set", "router=Not An Image"], "is not a container image reference", 2),
        (["inference", "--set", "router=registry.local/r:2"], "give NAMESPACE/PCS", 2),
    ],
)
async def test_bad_requests_are_refused_and_change_nothing(
    local_env: WorkflowEnvironment,
    sim: RunningSim,
    refusing_queue: str,
    args: list[str],
    message: str,
    status: int,
) -> None:
    before = {n: pcs_object(sim, n)["metadata"]["generation"] for n in ("inference", "rolling")}
    runs = {n: await _latest_run(local_env, n) for n in ("inference", "rolling", "nope")}
    refused = await metalflow(local_env, "rollout", "start", *args, "--task-queue", refusing_queue)
    assert refused.status == status, refused
    planned = await metalflow(local_env, "rollout", "plan", *args)
    assert planned.status == status, planned  # plan refuses the same with the same status
    assert message in refused.stderr
    assert {n: pcs_object(sim, n)["metadata"]["generation"] for n in ("inference", "rolling")} == before
    # Refused before anything started (issue 29 item 3): no failed run is left behind, and the last
    # real rollout of the PodCliqueSet stays the one `rollout status` shows.
    assert {n: await _latest_run(local_env, n) for n in runs} == runs


async def _latest_run(local_env: WorkflowEnvironment, name: str) -> str | None:
    """The run id of `rollout/default/<name>`'s latest run, None when it never ran."""
    try:
        described = await local_env.client.get_workflow_handle(f"rollout/default/{name}").describe()
    except RPCError as err:
        assert err.status == RPCStatusCode.NOT_FOUND, err
        return None
    return described.run_id


async def test_second_start_is_refused_and_operator_commands_answer(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    previous = decode_image(sim)
    # The rollout cannot finish while the commands below run, however slow the machine: replica
    # 1's anchor never becomes Ready until the fault is cleared (and the step's deadline passed),
    # so every answer is the one for a rollout in flight.
    anchor = anchor_of_replica_1(sim)
    sim.inject(f"podgangs/{anchor}/never-available")
    started = await metalflow(
        local_env,
        "rollout",
        "start",
        "default/inference",
        "--set",
        "decode=registry.local/decode:3",
        "--step-deadline",
        "45",
        "--task-queue",
        queue,
    )
    assert started.status == 0, started.stderr
    again = await metalflow(
        local_env,
        "rollout",
        "start",
        "default/inference",
        "--set",
        "decode=registry.local/decode:4",
        "--task-queue",
        queue,
    )
    assert again.status == 1  # refused by the rollout in flight, as plan's
    assert "already in flight: workflow rollout/default/inference" in again.stderr
    paused = await metalflow(local_env, "rollout", "pause", "default/inference", "--reason", "lunch")
    assert paused.status == 0 and "pausing" in paused.stdout
    twice = await metalflow(local_env, "rollout", "pause", "default/inference")
    assert twice.status == 1 and "already paused" in twice.stderr
    resumed = await metalflow(local_env, "rollout", "resume", "default/inference")
    assert resumed.status == 0, resumed.stderr
    rollback = await metalflow(local_env, "rollout", "rollback", "default/inference")
    assert rollback.status == 0, rollback.stderr
    assert "rolling back" in rollback.stdout
    sim.inject(f"podgangs/{anchor}/clear")  # its pods' replacements come up
    handle = local_env.client.get_workflow_handle("rollout/default/inference", result_type=RolloutResult)
    result = await handle.result()  # the rollback finishes: no rollout is left running
    assert result.outcome == "rolled-back"
    assert decode_image(sim) == previous
    assert len(pod_hashes(sim, "inference", "decode")) == 1
    assert sim.violations() == []


def anchor_of_replica_1(sim: RunningSim) -> str:
    return next(
        n for n, g in sorted(gangs(sim, "inference").items())
        if g["metadata"]["labels"]["grove.io/podcliqueset-replica-index"] == "1"
        and g["metadata"]["labels"]["grove.io/podgang-role"] == "Anchor"
    )  # fmt: skip


async def test_status_of_a_terminated_then_an_aborted_rollout_says_how_each_ended(
    local_env: WorkflowEnvironment, sim: RunningSim, queue: str
) -> None:
    """Found by an independent reviewer's attack: a terminated run (no workflow code runs on
    terminate) still read `rolling`, and an aborted one `failed: ...`. Each shows what it last
    showed and how it ended, exit 1; the annotation a terminated run left is the next rollout's
    to replace (its first step) and take off (its end)."""
    anchor = anchor_of_replica_1(sim)
    sim.inject(f"podgangs/{anchor}/never-available")  # replica 1 stays in flight
    start = ["rollout", "start", "default/inference", "--set", "decode=registry.local/decode:5"]
    started = await metalflow(local_env, *start, "--step-deadline", "45", "--task-queue", queue)
    assert started.status == 0, started.stderr
    handle = local_env.client.get_workflow_handle("rollout/default/inference", result_type=RolloutResult)
    await wait_for(handle, lambda s: s.steps_done >= 1, "a step done")
    await handle.terminate(reason="the reviewer's attack")
    shown = await metalflow(local_env, "rollout", "status", "default/inference")
    assert shown.status == 1, shown
    assert "default/inference rolling [" in shown.stdout  # what it last showed
    terminated = "rollout/default/inference was terminated: the reviewer's attack"
    assert terminated in shown.stdout and f"metalflow: {terminated}" in shown.stderr  # said once (issue 38)
    as_json = await metalflow(local_env, "rollout", "status", "default/inference", "--json")
    assert as_json.status == 1, as_json
    status = json.loads(as_json.stdout)
    assert (status["phase"], status["doing"]) == ("rolling", "ended")
    assert status["ended"] == terminated
    left = json.loads(pcs_object(sim, "inference")["metadata"]["annotations"][ROLLOUT_ANNOTATION])
    assert left["phase"] == "rolling"  # nothing ran to take it off

    # The next rollout finishes the one cut short; aborted, it says so (who, why), not `failed`.
    assert (await metalflow(local_env, *start, "--task-queue", queue)).status == 0
    by = ["--by", "alice", "--reason", "lunch"]
    assert (await metalflow(local_env, "rollout", "abort", "default/inference", *by)).status == 0
    sim.inject(f"podgangs/{anchor}/clear")  # the take-back can finish
    assert (await handle.result()).outcome == "aborted"  # completed, not failed: an abort is asked for
    shown = await metalflow(local_env, "rollout", "status", "default/inference")
    assert shown.status == exits.ABORTED, shown  # an abort is asked for: its own status, not 1
    assert shown.stdout.startswith("default/inference aborted")
    aborted = "rollout/default/inference aborted by alice: lunch"
    assert aborted in shown.stderr and "failed" not in shown.stderr and "was aborted" not in shown.stderr
    as_json = await metalflow(local_env, "rollout", "status", "default/inference", "--json")
    assert as_json.status == exits.ABORTED, as_json
    assert json.loads(as_json.stdout)["ended"].startswith(aborted)  # one document, saying how it ended
    assert ROLLOUT_ANNOTATION not in (pcs_object(sim, "inference")["metadata"].get("annotations") or {})
    assert sim.violations() == []


def decode_image(sim: RunningSim) -> str:
    cliques = pcs_object(sim, "inference")["spec"]["template"]["cliques"]
    return str(next(c for c in cliques if c["name"] == "decode")["spec"]["podSpec"]["containers"][0]["image"])


async def test_plan_shows_the_steps_in_order_and_what_start_would_refuse(
    local_env: WorkflowEnvironment, sim: RunningSim
) -> None:
    """`rollout plan` reads and decides with `start`'s code (`metalflow.rollouts.plan`) and
    changes nothing: the router is standalone, so each replica's anchor is an outage."""
    generation = pcs_object(sim, "inference")["metadata"]["generation"]
    refused = await metalflow(
        local_env, "rollout", "plan", "default/inference", "--set", "router=registry.local/r:9"
    )
    assert refused.status == 1, refused  # start's refusal (an outage not allowed), start's status
    assert refused.stdout.startswith("start would refuse it: rolling router of default/inference coherently")
    assert "OUTAGE: PodClique inference-0-router would keep 0 Ready pods" in refused.stdout
    assert "start would refuse it: rolling router of default/inference coherently" in refused.stdout
    shown = await metalflow(
        local_env, "rollout", "plan", "default/inference", "--set", "router=registry.local/r:9",
        "--allow-replica-outage", "--json",
    )  # fmt: skip
    assert shown.status == 0, shown.stderr
    planned = json.loads(shown.stdout)
    assert planned["refusal"] is None and planned["changed"] == ["router"]
    # Grove puts a replica's router pods (two) in its anchor: a step replaces both
    assert [(s["replica"], s["role"], s["pods"]) for s in planned["steps"]] == [
        (0, "Anchor", 2),
        (1, "Anchor", 2),
    ]
    assert all(s["outage"] for s in planned["steps"])
    unknown = await metalflow(
        local_env, "rollout", "plan", "default/inference", "--set", "gpu=registry.local/g:2"
    )
    assert unknown.status == 2 and "has no clique gpu" in unknown.stdout
    sidecar = await metalflow(
        local_env, "rollout", "plan", "default/inference", "--set", "prefill/sidecar=registry.local/s:1"
    )
    assert sidecar.status == 2  # the refusal alone, no plan before it
    assert sidecar.stdout.startswith("start would refuse it:") and len(sidecar.stdout.splitlines()) == 1
    assert "has no container 'sidecar'" in sidecar.stdout
    assert pcs_object(sim, "inference")["metadata"]["generation"] == generation  # nothing written


async def test_a_reader_gone_ends_the_command_quietly(
    local_env: WorkflowEnvironment, sim: RunningSim
) -> None:
    """`metalflow rollout plan ... | head -1`: a reader gone before the command writes ends it
    with no traceback, exit 141 (128 + SIGPIPE, as `cat` or `grep` in a pipe; found by an
    independent reviewer). The console script itself: `runner` ends the process with `os._exit`."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone: every write to the pipe fails
    try:
        process = await asyncio.create_subprocess_exec(
            METALFLOW, "rollout", "plan", "default/inference", "--set", "decode=registry.local/decode:9",
            env=metalflow_env(local_env), stdout=write_end, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    finally:
        os.close(write_end)
    _, err = await asyncio.wait_for(process.communicate(), timeout=120)
    assert (process.returncode, err.decode()) == (141, "")
