"""Bad numbers and strings never get past the CLI (contracts/validation.py), and the CLI never
dies with a traceback: every row runs the `metalflow` command's `main` in a fresh interpreter and
checks the exit status, the one line it prints, and that nothing changed (no entity workflow, no
state directory of a simulator). The rows share one interpreter (importing the CLI costs about a
second of CPU, 50 times over otherwise); a sample of them also goes through the installed console
script, so the wiring from `metalflow` to `main` is exercised too."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cli_support import (
    METALFLOW,
    command_env,
    entity_exists,
    run_console_script,
    run_in_few_processes,
    write_unreachable_site,
)
from host_entity_support import StandInOperation, StandInReboot, no_predecessor
from host_operation_support import eventually
from sim_support import start_dev_server
from takeover_support import sticky_timeout
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from contracts import names
from contracts.models.host import HostWorkflowInput
from workflows.host.workflow import HostWorkflow

HOST = f"bounds-{uuid.uuid4().hex[:8]}"  # no other test, and no row, may create this entity
ESC = "\x1b"

# (arguments, exit status, what the one line on stderr says after "<prog>: error: argument ...")
ROWS: list[tuple[list[str], int, str]] = [
    # durations and counts: negative, zero where meaningless, NaN, infinity, absurd
    (["host", "provision", HOST, "--power-down-wait", "1e12"], 2, "less than or equal to 3600"),
    (["host", "provision", HOST, "--power-down-wait", "-1"], 2, "greater than or equal to 0"),
    (["host", "provision", HOST, "--power-down-wait", "nan"], 2, "finite number"),
    (["host", "reprovision", HOST, "--power-down-wait", "inf"], 2, "finite number"),
    (["host", "reprovision", HOST, "--power-down-wait", "3601"], 2, "less than or equal to 3600"),
    (["host", "reboot", HOST, "--power-down-wait", "soon"], 2, "'soon' is not a number"),
    (["host", "monitor", HOST, "--reprovision-after", "0"], 2, "greater than 0"),
    (["host", "monitor", HOST, "--reprovision-after", "-5"], 2, "greater than 0"),
    (["host", "monitor", HOST, "--reprovision-after", "NaN"], 2, "finite number"),
    (["host", "monitor", HOST, "--reprovision-after", "1e9"], 2, "less than or equal to 2592000"),
    (["bmc", "power", HOST, "cycle", "--timeout", "0"], 2, "greater than 0"),
    (["bmc", "power", HOST, "cycle", "--timeout", "inf"], 2, "finite number"),
    (["bmc", "power", HOST, "cycle", "--power-down-wait", "1e12"], 2, "less than or equal to 3600"),
    (["bmc", "power", HOST, "off", "--graceful", "--grace", "-1"], 2, "greater than 0"),
    (["bmc", "power", HOST, "off", "--graceful", "--grace", "1e12"], 2, "less than or equal to 3600"),
    (["bmc", "power", HOST, "on", "--settle", "-1"], 2, "greater than or equal to 0"),
    (["bmc", "power", HOST, "on", "--settle", "nan"], 2, "finite number"),
    (["bmc", "check", HOST, "--request-timeout", "0"], 2, "greater than 0"),
    (["bmc", "check", HOST, "--request-timeout", "nan"], 2, "finite number"),
    (["sim", "up", "--hosts", "0"], 2, "greater than or equal to 1"),
    (["sim", "up", "--hosts", "-3"], 2, "greater than or equal to 1"),
    (["sim", "up", "--hosts", "1e6"], 2, "'1e6' is not a whole number"),
    (["sim", "up", "--hosts", "100001"], 2, "less than or equal to 100000"),
    (["sim", "up", "--dpus-per-host", "17"], 2, "less than or equal to 16"),
    (["sim", "up", "--seed", "-1"], 2, "greater than or equal to 0"),
    (["sim", "up", "--seed", "99999999999"], 2, "less than or equal to 4294967295"),
    (["sim", "up", "--sim-port", "70000"], 2, "less than or equal to 65535"),
    (["dev", "--hosts", "0"], 2, "greater than or equal to 1"),
    # ids, --by and --reason: length, character set, no control characters or ANSI escapes
    (["host", "provision", f"host-0{ESC}[31m"], 2, "host id contains the control character"),
    (["host", "provision", "h" * 5000], 2, "at most 63 characters"),
    (["host", "provision", "../etc"], 2, "invalid host id"),
    (["host", "status", "h\u202e1"], 2, "host id contains the control character"),
    (["host", "assign", HOST, "i" * 5000], 2, "at most 128 characters"),
    (["host", "assign", HOST, "inst\x07"], 2, "instance id contains the control character"),
    (["host", "assign", HOST, "inst/1"], 2, "invalid instance id"),
    (["host", "provision", HOST, "--by", ""], 2, "at least 1 character"),
    (["host", "provision", HOST, "--by", f"x{ESC}[2J"], 2, "--by contains the control character"),
    (["host", "provision", HOST, "--by", "b" * 200], 2, "at most 128 characters"),
    (["host", "provision", HOST, "--reason", "r" * 600], 2, "at most 500 characters"),
    (["host", "provision", HOST, "--reason", "line1\nline2"], 2, "--reason contains the control character"),
    (["approve", HOST, "--reason", f"{ESC}]0;pwned\x07"], 2, "--reason contains the control character"),
    (["host-rebooted", HOST, "--by", "\t"], 2, "--by contains the control character"),
    (["host", "provision", HOST, "--dpus", f"{HOST}-dpu-0,{ESC}"], 2, "invalid DPU list"),
    (["host", "remove", HOST, "--dpus", ",".join(f"d{i}" for i in range(17))], 2, "at most 16 DPU ids"),
    (["bmc", "check", "host 1"], 2, "invalid host id"),
    (["sim", "power-log", ESC], 2, "host id contains the control character"),
    (
        ["rollout", "pause", "default/inference", "--by", f"x{ESC}[2J"],
        2,
        "--by contains the control character",
    ),
    (
        ["rollout", "abort", "default/inference", "--reason", "a\nb"],
        2,
        "--reason contains the control character",
    ),
    (["campaign", "pause", "fw", "--reason", f"{ESC}]0;x\x07"], 2, "--reason contains the control character"),
    (["campaign", "abort", "fw", "--by", "b" * 200], 2, "at most 128 characters"),
    (
        ["campaign", "schedule", "nightly", "--every", "1h", "--all", "--reprovision", "--by", "\t"],
        2,
        "--by contains the control character",
    ),
]


async def test_bad_input_is_a_one_line_usage_error_and_changes_nothing(
    client: Client, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    env = command_env(client, state)

    def argv(args: list[str]) -> list[str]:
        if args[:2] in (["sim", "up"], ["dev", "--hosts"]):
            return [*args, "--state-dir", str(state)]
        return args

    # One command server runs the table (tests/cli_support.py): `main` as the console script runs it.
    results = await run_in_few_processes(
        [(argv(args), {}) for args, _, _ in ROWS], env, per_process=len(ROWS)
    )
    # A sample through the installed console script: the same answers as `main` gives.
    sample = [0, len(ROWS) // 2, len(ROWS) - 1]
    for index in sample:
        assert await run_console_script(argv(ROWS[index][0]), env) == results[index], ROWS[index][0]
    problems = []
    for (args, status, words), (code, out, err) in zip(ROWS, results, strict=True):
        lines = err.splitlines()
        shown = [a[:30] for a in args]
        if code != status or len(lines) != 1 or words not in lines[0] or out:
            problems.append(f"{shown}: exit {code}, stdout {out[:80]!r}, stderr {err[:300]!r}")
        elif not lines[0].startswith(f"metalflow {args[0]}") or "argument" not in lines[0]:
            problems.append(f"{shown}: not an argument error: {lines[0]!r}")
        elif ESC in lines[0] or "\x07" in lines[0]:
            problems.append(f"{shown}: echoed a control character: {lines[0]!r}")
    assert problems == [], "\n".join(problems)
    assert not await entity_exists(client, HOST), "a rejected command created the host's entity"
    assert not state.exists(), "a rejected `sim up`/`dev` wrote its state directory"


Outcome = tuple[int, str, str]


async def _no_worker(client: Client, directory: Path) -> tuple[str, str, Outcome]:
    """`host reboot` on a task queue no worker polls (the CLI's 5 s grace for a starting worker)."""
    host, queue = f"noworker-{uuid.uuid4().hex[:8]}", f"nobody-{uuid.uuid4()}"
    # The CLI checks the host against the inventory first.
    write_unreachable_site(directory / "site.yaml", host)
    outcome = await run_console_script(
        ["host", "reboot", host, "--task-queue", queue], command_env(client, directory)
    )
    return host, queue, outcome


async def _nobody_serves(client: Client, directory: Path) -> tuple[str, str, Outcome]:
    """`host status` of an entity whose task queue no worker ever polled (the 10 s query timeout)."""
    host, queue = f"orphan-{uuid.uuid4().hex[:8]}", f"nobody-{uuid.uuid4()}"
    entity = await client.start_workflow(
        "HostWorkflow", HostWorkflowInput(host_id=host), id=names.host_workflow_id(host), task_queue=queue
    )
    try:
        outcome = await run_console_script(["host", "status", host], command_env(client, directory))
    finally:
        await entity.terminate("test done")
    return host, queue, outcome


@pytest.fixture(scope="module", autouse=True)
async def waiting(
    local_env: WorkflowEnvironment, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[dict[str, asyncio.Task[Any]]]:
    """Two scenarios below whose commands wait out a real timeout of the CLI (its 5 s grace for a
    worker, its 10 s query timeout), started together when the module starts: the waits overlap
    each other and the table's rows, and each test awaits and checks its own. (A worker that just
    died stays in its test: started beside these, the server said no poller was seen lately.)"""
    client = local_env.client
    tasks: dict[str, asyncio.Task[Any]] = {
        name: asyncio.create_task(scenario(client, tmp_path_factory.mktemp(name)))
        for name, scenario in (
            ("no_worker", _no_worker),
            ("nobody_serves", _nobody_serves),
        )
    }
    yield tasks
    for task in tasks.values():
        task.cancel()
    await asyncio.gather(*tasks.values(), return_exceptions=True)


async def test_no_worker_on_the_task_queue_is_reported_and_starts_nothing(
    client: Client, waiting: dict[str, asyncio.Task[Any]]
) -> None:
    host, queue, (code, out, err) = await waiting["no_worker"]
    assert (code, out) == (3, "")  # metalflow could not ask (README's exit statuses)
    assert err.splitlines() == [
        f"metalflow: no worker polls task queue {queue!r}, so nothing would act on the request: start one "
        f"(python worker.py --task-queue {queue}) and try again"
    ]
    assert not await entity_exists(client, host)


async def test_status_of_an_entity_nobody_serves_says_so(waiting: dict[str, asyncio.Task[Any]]) -> None:
    host, queue, (code, out, err) = await waiting["nobody_serves"]
    assert (code, out) == (3, "")  # metalflow could not ask (README's exit statuses)
    assert err.splitlines() == [
        f"metalflow: host/{host} does not answer: no worker serves its task queue {queue!r}. "
        "Nothing was changed: send the command again once a worker runs"
    ]


async def test_a_host_whose_worker_just_died_is_could_not_ask_not_refused(
    client: Client, tmp_path: Path
) -> None:
    """`host abort HOST` right after a `kill -9` of the worker printed "host/HOST did not answer
    within 10 s: ... busy or stuck" and exited 1, which README's table keeps for the world's
    refusals: metalflow could not ask (3), and the words say nothing was changed."""
    host, queue = f"gone-{uuid.uuid4().hex[:8]}", f"gone-{uuid.uuid4()}"
    write_unreachable_site(tmp_path / "site.yaml", host)
    async with Worker(
        client,
        task_queue=queue,
        workflows=[HostWorkflow],
        max_cached_workflows=0,
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        entity = await client.start_workflow(
            "HostWorkflow", HostWorkflowInput(host_id=host), id=names.host_workflow_id(host), task_queue=queue
        )
        await entity.query("status")  # served once: the server has seen this queue's poller
    # The worker is gone; the server still lists its poller for minutes, as after a `kill -9`.
    env = command_env(client, tmp_path)
    abort = ["host", "abort", host, "--by", "t", "--reason", "test", "--task-queue", queue]
    results = await asyncio.gather(
        run_console_script(["host", "status", host], env), run_console_script(abort, env)
    )
    for code, out, err in results:
        assert (code, out) == (3, ""), (code, out, err)
        lines = err.splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"metalflow: host/{host} d"), err
        assert "answer" in lines[0], err
        assert lines[0].endswith("Nothing was changed: send the command again once a worker runs"), err
    await entity.terminate("test done")


@pytest.mark.parametrize("text", ["1e12", "nan", "-1", "inf"])
def test_policy_fields_refuse_what_the_cli_refuses(text: str) -> None:
    from pydantic import ValidationError

    from contracts.models.host import MonitorPolicy, OperationPolicy

    with pytest.raises(ValidationError):
        OperationPolicy(power_down_wait_seconds=float(text))
    with pytest.raises(ValidationError):
        MonitorPolicy(reprovision_after_seconds=float(text))


async def test_temporal_lost_during_wait_is_one_line_and_exit_2(tmp_path: Path, lifeline_bin: Path) -> None:
    """The server goes away while `--wait` follows an operation: one line, exit 2, no traceback."""
    env = await start_dev_server(lifeline_bin)
    client, host, queue = env.client, f"lost-{uuid.uuid4().hex[:8]}", f"lost-{uuid.uuid4()}"
    write_unreachable_site(tmp_path / "site.yaml", host)
    address = client.service_client.config.target_host
    process = None
    try:
        async with Worker(
            client,
            task_queue=queue,
            workflows=[HostWorkflow, StandInOperation, StandInReboot],
            activities=[no_predecessor],
            sticky_queue_schedule_to_start_timeout=sticky_timeout(),
        ):
            process = await asyncio.create_subprocess_exec(
                METALFLOW, "host", "provision", host, "--wait", "--task-queue", queue,
                # its retry of the lost server: half a second, not the default 10 s (README)
                env=command_env(client, tmp_path) | {"METALFLOW_CONNECT_TIMEOUT": "0.5"},
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            operation = client.get_workflow_handle(names.host_operation_workflow_id(names.PROVISION, host))

            async def running() -> bool:
                try:
                    await operation.describe()
                except RPCError:
                    return False
                return True

            await eventually(running, timeout=120, what="the CLI's operation to start")
    finally:
        await env.shutdown()  # Temporal goes away while the CLI follows the operation
    assert process is not None
    out, err = await asyncio.wait_for(process.communicate(), timeout=180)
    assert process.returncode == 3, (out, err)  # Temporal lost: README's exit-status table
    assert err.decode().splitlines()[0].startswith(f"metalflow: lost Temporal at {address} ("), err
    assert len(err.decode().splitlines()) == 1, err
    assert "Traceback" not in err.decode() + out.decode()
