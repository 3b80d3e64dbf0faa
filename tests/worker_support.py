"""Worker processes, for the tests that kill a worker or run several: `python worker.py` as
deploy/ runs it, or one of the tests' special workers (`power_worker.py`, `lease_step_worker.py`),
which take the same arguments and read the same environment.

`worker_process(task_queue, env, log)` starts one, its output appended to `log`, and yields a
`WorkerProcess`: `await worker.polling(client)` waits until the server sees it poll its task
queue, `kill()` is SIGKILL (a crash: no shutdown, no last heartbeat), `stop()` is SIGTERM (a
deploy's stop); each reaps it and returns its exit status. A worker still running at the end of
the block is SIGKILLed and reaped. `worker_env(server, sim)` is the environment it needs: this
process's, less the developer's TEMPORAL_* and OTEL_* variables, pointed at a Temporal server and
the simulated site's files.

Every worker holds the session's lifeline (`sim_support.session_lifeline`), so a SIGKILLed test
session leaves none behind; each leads a process group of its own, so a kill reaches anything it
started too. A special worker reads its arguments with `special_worker_arguments()` and waits on
`until_lifeline_cut()` (at the end of this module: the other side of the same contract).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

from sim_support import RunningSim, session_lifeline
from temporalio.api.enums.v1 import TaskQueueKind, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client

from metalflow.runtime.lifeline import LIFELINE_ARG, watch_lifeline

REPO = Path(__file__).resolve().parent.parent
WORKER = REPO / "worker.py"
POWER_WORKER = Path(__file__).with_name("power_worker.py")  # the power activities only
LEASE_STEP_WORKER = Path(__file__).with_name("lease_step_worker.py")  # dies after a lease step
# A fresh interpreter importing the product takes seconds on a loaded machine (2 cores, several
# pytest workers): generous, as the tests' own waits for a new worker were.
POLL_TIMEOUT_SECONDS = 120.0
REAP_TIMEOUT_SECONDS = 30.0


def worker_env(server: Client | str, sim: RunningSim | None = None, **variables: str) -> dict[str, str]:
    """The environment of a worker process.

    Args:
        server: A client (its server's address and namespace), or an address (namespace `default`).
        sim: The simulated site whose site file and kubeconfig the worker reads, if any.
        **variables: More variables, as they are (`METALFLOW_BMC_MAX_IN_FLIGHT="1"`).
    """
    env = {key: value for key, value in os.environ.items() if not key.startswith(("TEMPORAL_", "OTEL_"))}
    if isinstance(server, Client):
        env["TEMPORAL_ADDRESS"] = server.service_client.config.target_host
        env["TEMPORAL_NAMESPACE"] = server.namespace
    else:
        env["TEMPORAL_ADDRESS"] = server
    if sim is not None:
        env |= {"METALFLOW_SITE_FILE": str(sim.site_file), "KUBECONFIG": str(sim.kubeconfig)}
    env["PYTHONUNBUFFERED"] = "1"  # its log is up to date when a test reads it, or fails
    return env | variables


@dataclass
class WorkerProcess:
    """One worker process started by `worker_process`."""

    process: subprocess.Popen[bytes]
    task_queue: str
    log: Path

    @property
    def pid(self) -> int:
        """Its pid, as the server shows it in the worker's identity (`<pid>@<host>`)."""
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """Its exit status, or None while it runs."""
        return self.process.poll()

    def output(self) -> str:
        """What it wrote so far (stdout and stderr)."""
        return self.log.read_text(errors="replace")

    async def polling(
        self, client: Client, *, workflows: bool = True, timeout: float = POLL_TIMEOUT_SECONDS
    ) -> None:
        """Wait until the server sees this process poll its task queue: the activity side, and the
        workflow side unless `workflows` is False (a worker of activities only).

        Raises:
            AssertionError: It exited first, or did not poll within `timeout` seconds (with its log).
        """
        sides = [TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY]
        if workflows:
            sides.append(TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW)
        deadline = time.monotonic() + timeout
        while not await self._polls(client, sides):
            if self.returncode is not None:
                raise AssertionError(f"the worker exited with {self.returncode}:\n{self.output()}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the worker did not poll {self.task_queue!r} within {timeout} s:\n{self.output()}"
                )
            await asyncio.sleep(0.2)

    async def _polls(self, client: Client, sides: list[TaskQueueType.ValueType]) -> bool:
        # By identity: a worker of an earlier run, which the server remembers for minutes, does not count.
        for side in sides:
            described = await client.workflow_service.describe_task_queue(
                DescribeTaskQueueRequest(
                    namespace=client.namespace,
                    task_queue=TaskQueue(name=self.task_queue, kind=TaskQueueKind.TASK_QUEUE_KIND_NORMAL),
                    task_queue_type=side,
                )
            )
            if not any(poller.identity.startswith(f"{self.pid}@") for poller in described.pollers):
                return False
        return True

    def kill(self) -> int:
        """SIGKILL, as a crash or an OOM kill would (no shutdown, no last heartbeat); reaped.

        Returns:
            Its exit status: `-signal.SIGKILL` if it was still running.
        """
        self._signal(signal.SIGKILL)
        return self.process.wait(timeout=REAP_TIMEOUT_SECONDS)

    def stop(self, timeout: float = REAP_TIMEOUT_SECONDS) -> int:
        """SIGTERM, as a deploy stops it, and SIGKILL if it has not exited `timeout` s later; reaped.

        Returns:
            Its exit status.
        """
        self._signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return self.kill()

    async def exited(self, timeout: float) -> int:
        """Wait, without holding up the event loop, until it exits by itself; its exit status.

        Raises:
            subprocess.TimeoutExpired: It still runs after `timeout` seconds.
        """
        return await asyncio.to_thread(self.process.wait, timeout)

    def _signal(self, signum: int) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # it exited since
                os.killpg(self.process.pid, signum)


@contextlib.contextmanager
def worker_process(
    task_queue: str, env: dict[str, str], log: Path, *, script: Path = WORKER
) -> Iterator[WorkerProcess]:
    """`python <script> --task-queue <task_queue>` from the repository's root, for the block.

    Args:
        task_queue: The task queue it polls.
        env: Its whole environment (`worker_env`).
        log: The file its stdout and stderr are appended to (a restarted worker's follow on).
        script: `worker.py`, or a special worker of the tests (`POWER_WORKER`, `LEASE_STEP_WORKER`).
    """
    lifeline = session_lifeline()
    argv = [sys.executable, str(script), "--task-queue", task_queue, LIFELINE_ARG, str(lifeline.read_fd)]
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        process = subprocess.Popen(
            argv,
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            pass_fds=(lifeline.read_fd,),
            start_new_session=True,
        )
    worker = WorkerProcess(process, task_queue, log)
    try:
        yield worker
    finally:
        worker.kill()


@contextlib.contextmanager
def worker_processes(
    task_queue: str, env: dict[str, str], log_dir: Path, count: int
) -> Iterator[list[WorkerProcess]]:
    """`count` of `worker.py` on one task queue (a scaled-out deployment), for the block; the
    i-th logs to `log_dir/worker-<i>.log`."""
    with contextlib.ExitStack() as stack:
        yield [
            stack.enter_context(worker_process(task_queue, env, log_dir / f"worker-{i}.log"))
            for i in range(count)
        ]


@contextlib.asynccontextmanager
async def power_worker(client: Client, task_queue: str, log: Path) -> AsyncIterator[WorkerProcess]:
    """`power_worker.py` (the power activities only) on `task_queue`, from the moment it polls, for
    the block: the worker a power cycle's crash tests SIGKILL mid-cycle."""
    with worker_process(task_queue, worker_env(client), log, script=POWER_WORKER) as worker:
        await worker.polling(client, workflows=False)
        yield worker


def special_worker_arguments() -> tuple[str, int | None]:
    """In a special worker: the task queue and the lifeline's file descriptor `worker_process` gave it."""
    parser = argparse.ArgumentParser(description="a special worker of the tests (tests/worker_support.py)")
    parser.add_argument("--task-queue", required=True)
    parser.add_argument(LIFELINE_ARG, dest="lifeline_fd", type=int, default=None)
    args = parser.parse_args()
    return args.task_queue, args.lifeline_fd


async def until_lifeline_cut(lifeline_fd: int | None) -> None:
    """In a special worker: return once the test session that started it has exited (never without
    a lifeline); a signal ends the process as it always did."""
    cut = asyncio.Event()
    if lifeline_fd is not None:
        watch_lifeline(lifeline_fd, cut.set, hard_exit_after=10)
    await cut.wait()
