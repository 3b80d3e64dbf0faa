"""The worker's code cache (metalflow/runtime/code_cache.py): a workflow module is compiled once per
process, however many sandboxed runs import it, and a changed file is compiled again."""

from __future__ import annotations

import asyncio
import importlib
import importlib.machinery
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from takeover_support import sticky_timeout
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from metalflow.runtime import code_cache
from metalflow.runtime.code_cache import CachingSourceLoader, SnippetCachingRunner

WORKFLOW_SOURCE = """
from temporalio import workflow


@workflow.defn(name="{name}")
class Answer:
    @workflow.run
    async def run(self, value: int) -> int:
        return value * {factor}
"""


@pytest.fixture
def module_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path where no bytecode file is ever written (as under
    PYTHONDONTWRITEBYTECODE), so every import without the cache compiles from source."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.syspath_prepend(str(tmp_path))
    code_cache.install()
    yield tmp_path


def write_module(directory: Path, name: str, factor: int, workflow_name: str = "Answer") -> None:
    source = WORKFLOW_SOURCE.format(name=workflow_name, factor=factor)
    (directory / f"{name}.py").write_text(textwrap.dedent(source))
    importlib.invalidate_caches()


def fresh_import(name: str) -> object:
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def test_a_module_imported_again_reuses_its_code_until_the_file_changes(module_dir: Path) -> None:
    name = f"cached_{uuid.uuid4().hex}"
    write_module(module_dir, name, factor=2)
    before = CachingSourceLoader.compiled
    first, second = fresh_import(name), fresh_import(name)
    assert first is not second  # two modules, as two sandboxes get
    assert isinstance(first.__loader__, CachingSourceLoader)  # type: ignore[attr-defined]
    assert first.Answer.run.__code__ is second.Answer.run.__code__  # type: ignore[attr-defined]
    assert CachingSourceLoader.compiled == before + 1
    write_module(module_dir, name, factor=3)  # a changed file is compiled again
    third = fresh_import(name)
    assert third.Answer.run.__code__ is not first.Answer.run.__code__  # type: ignore[attr-defined]
    assert CachingSourceLoader.compiled == before + 2


def test_install_is_idempotent() -> None:
    code_cache.install()
    code_cache.install()
    assert sum(isinstance(f, code_cache.CodeCacheFinder) for f in sys.meta_path) == 1


async def test_sandboxed_runs_compile_their_workflow_module_once(
    module_dir: Path, client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five runs, each on a fresh sandbox (no sticky cache): the module is compiled once."""
    name = f"sandboxed_{uuid.uuid4().hex}"
    workflow_name = f"Answer-{uuid.uuid4().hex[:8]}"
    write_module(module_dir, name, factor=7, workflow_name=workflow_name)
    compiled: list[str] = []  # every compilation from source of this module, cached or not
    compile_source = importlib.machinery.SourceFileLoader.source_to_code

    def counting(loader: object, data: bytes, path: str, **kwargs: object) -> object:
        if str(path).endswith(f"{name}.py"):
            compiled.append(str(path))
        return compile_source(loader, data, path, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.machinery.SourceFileLoader, "source_to_code", counting)
    answer = importlib.import_module(name).Answer
    assert len(compiled) == 1
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[answer],
        max_cached_workflows=0,
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        results = [
            await client.execute_workflow(workflow_name, n, id=f"cache-{uuid.uuid4()}", task_queue=task_queue)
            for n in range(5)
        ]
    assert results == [0, 7, 14, 21, 28]
    assert len(compiled) == 1  # every sandbox took the code of the first import


async def test_the_sandbox_entry_snippets_compile_once_per_process(
    module_dir: Path, client: Client, task_queue: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five runs of a workflow that schedules a timer, each in a fresh sandbox (no sticky cache),
    on the worker's runner: the right results, the sandbox's restrictions still in force, and
    the snippets compiled by the first run only."""
    name = f"snippets_{uuid.uuid4().hex}"
    workflow_name = f"Answer-{uuid.uuid4().hex[:8]}"
    (module_dir / f"{name}.py").write_text(
        textwrap.dedent(
            f"""
            from datetime import timedelta
            from temporalio import workflow

            @workflow.defn(name="{workflow_name}")
            class Answer:
                @workflow.run
                async def run(self, value: int) -> int:
                    await workflow.sleep(timedelta(milliseconds=1))
                    if value < 0:
                        open("/dev/null")  # a restricted call: the sandbox must still refuse it
                    return value * 3
            """
        )
    )
    importlib.invalidate_caches()
    compiled: list[str] = []
    real_compile = compile

    def counting(source: str, filename: str, mode: str) -> object:
        compiled.append(source)
        return real_compile(source, filename, mode)

    monkeypatch.setattr(code_cache, "compile", counting, raising=False)
    answer = importlib.import_module(name).Answer
    runner = SnippetCachingRunner()
    async with Worker(
        client,
        task_queue=task_queue,
        workflows=[answer],
        max_cached_workflows=0,
        workflow_runner=runner,
        sticky_queue_schedule_to_start_timeout=sticky_timeout(),
    ):
        first = await client.execute_workflow(
            workflow_name, 1, id=f"snip-{uuid.uuid4()}", task_queue=task_queue
        )
        after_first = len(compiled)
        rest = [
            await client.execute_workflow(workflow_name, n, id=f"snip-{uuid.uuid4()}", task_queue=task_queue)
            for n in range(2, 6)
        ]
        refused = await client.start_workflow(
            workflow_name, -1, id=f"snip-{uuid.uuid4()}", task_queue=task_queue
        )
        failure = await first_task_failure(refused)
        await refused.terminate("test done")
    assert [first, *rest] == [3, 6, 9, 12, 15]
    assert any("import Answer as" in source for source in compiled)  # this workflow's own entry
    assert after_first >= 1 and len(compiled) == after_first  # later runs compiled nothing
    assert "open" in failure  # the restriction that names the call


async def first_task_failure(handle: WorkflowHandle[Any, Any]) -> str:
    """The message of the run's first failed workflow task (waits for one, 120 s at most)."""
    for _ in range(1200):
        async for event in handle.fetch_history_events():
            if event.HasField("workflow_task_failed_event_attributes"):
                return str(event.workflow_task_failed_event_attributes.failure.message)
        await asyncio.sleep(0.1)
    raise AssertionError(f"{handle.id}: no workflow task failed within 120 s")


def test_the_worker_uses_the_snippet_cache_and_falls_back_when_the_sdk_moved_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Pins the SDK's private `_Instance._run_code` (this SDK has it: the worker's runner caches
    snippets); an SDK without it gets its own runner, not a worker that cannot start."""
    from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

    assert type(code_cache.workflow_runner()) is SnippetCachingRunner

    def moved() -> type:
        raise ImportError("cannot import name '_Instance'")

    monkeypatch.setattr(code_cache, "_snippet_caching_instance", moved)
    assert type(code_cache.workflow_runner()) is SandboxedWorkflowRunner
