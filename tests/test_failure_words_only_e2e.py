"""Issue 38: the Temporal UI's failure of an expected credentials error carried the Python
traceback (the worker's log already said it in one line). A reboot of a host whose BMC rejects
the credentials (the named fault `wrong-credentials`), run by `python worker.py` (the product's
data converter, `contracts.converter.WordsOnlyFailureConverter`): every failure in the reboot's
history says its type and words, and no stack (the UI and `temporal workflow show` print a
failure's `stack_trace`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import metalflow, use_site_file
from sim_support import RunningSim, prefixed_sim
from temporalio.api.failure.v1 import Failure
from temporalio.testing import WorkflowEnvironment
from worker_support import worker_env, worker_process

HOST = "words-001"


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    with prefixed_sim(tmp_path_factory.mktemp("sim"), "words", hosts=1, dpus_per_host=1) as running:
        use_site_file(running.site_file)
        yield running


def _failures(message: object) -> Iterator[Failure]:
    """Every `Failure` anywhere in a history event, causes included."""
    for field, value in message.ListFields():  # type: ignore[attr-defined]
        values = value if getattr(field, "is_repeated", False) else [value]
        for item in values:
            if isinstance(item, Failure):
                yield item
            if hasattr(item, "ListFields"):
                yield from _failures(item)


async def test_a_rejected_credentials_failure_has_words_and_no_traceback(
    local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str, tmp_path: Path
) -> None:
    sim.inject(f"bmcs/{HOST}/wrong-credentials")
    with worker_process(task_queue, worker_env(local_env.client, sim), tmp_path / "worker.log") as worker:
        await worker.polling(local_env.client)
        started = await metalflow(local_env, "host", "reboot", HOST, "--task-queue", task_queue)
        assert started.status == 0, started.stdout + started.stderr
        handle = local_env.client.get_workflow_handle(f"reboot/{HOST}/generation-1")
        deadline, failures = time.monotonic() + 60, []
        while not failures and time.monotonic() < deadline:
            history = await handle.fetch_history()
            failures = [f for event in history.events for f in _failures(event)]
            if not failures:
                time.sleep(0.3)
        assert failures, "no failure in the reboot's history"
        said = [f"{f.application_failure_info.type}: {f.message}" for f in failures]
        assert any("BMCAuthenticationFailed" in s and "401" in s for s in said), said
        stacks = [f.stack_trace for f in failures if f.stack_trace]
        assert stacks == [], stacks
        aborted = await metalflow(
            local_env, "host", "abort", HOST, "--by", "alice@test", "--task-queue", task_queue
        )
        assert aborted.status in (0, 1), aborted.stdout + aborted.stderr
