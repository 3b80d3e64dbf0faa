"""A test module's own simulated site, a worker on it, and `metalflow` against both: the set-up the
end-to-end modules of the CLI (boot generation, Events, aborts, a host left off, ...) each wrote
again, made here once and called with the module's own parameters.

    SITE = ModuleSite(PREFIX, hosts=7, worker=emitting_worker)
    sim, queue = SITE.fixtures()  # module attributes: pytest finds the fixtures by these names
    cli, until_idle = SITE.cli, SITE.until_idle

- `sim` (module scope): `prefixed_sim` of the module's prefix, host count and options (one DPU per
  host unless told), in a directory of its own; `ModuleSite.cli` checks hosts against its site
  file (and so does `metalflow()`, with `for_metalflow=True`, for modules that call it themselves).
- `cli`, `until_idle`: `metalflow ARGS` against the site, and the entity once it is idle.
- `queue` (per test): `worker` (the product's worker, `worker_for`, unless told: `emitting_worker`
  adds the Event emitter) on the test's own task queue, for the test; the queue's name.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from cli_support import Result, metalflow, use_site_file
from host_operation_support import worker_for
from sim_support import RunningSim, prefixed_sim
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

WorkerFor = Callable[[Client, str, RunningSim], AbstractAsyncContextManager[Any]]


class ModuleSite:
    """One module's site: its prefix, host count, `prefixed_sim` options and worker."""

    def __init__(
        self,
        prefix: str,
        hosts: int,
        *,
        worker: WorkerFor = worker_for,
        dpus_per_host: int = 1,
        for_metalflow: bool = False,
        **sim_options: Any,
    ) -> None:
        self.prefix, self.hosts, self.dpus_per_host = prefix, hosts, dpus_per_host
        self.worker, self.for_metalflow, self.sim_options = worker, for_metalflow, sim_options
        self.site_file: Path | None = None  # once `sim` started it

    def fixtures(self) -> tuple[Any, Any]:
        """The module's `sim` and `queue` fixtures (assign both to module attributes of those names)."""
        site = self

        @pytest.fixture(scope="module", name="sim")
        def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
            with prefixed_sim(
                tmp_path_factory.mktemp("sim"), site.prefix, hosts=site.hosts,
                dpus_per_host=site.dpus_per_host, **site.sim_options,
            ) as running:  # fmt: skip
                site.site_file = running.site_file
                if site.for_metalflow:
                    use_site_file(running.site_file)
                yield running

        @pytest.fixture(name="queue")
        async def queue(
            local_env: WorkflowEnvironment, sim: RunningSim, task_queue: str
        ) -> AsyncIterator[str]:
            async with site.worker(local_env.client, task_queue, sim):
                yield task_queue

        return sim, queue

    async def cli(self, env: WorkflowEnvironment, *args: str) -> Result:
        """`metalflow ARGS` against `env`'s Temporal, checking hosts against this module's site."""
        assert self.site_file is not None, "the module's `sim` fixture has not started its site"
        return await metalflow(env, *args, site_file=self.site_file)

    async def until_idle(self, env: WorkflowEnvironment, host: str) -> dict[str, Any]:
        """The host's entity as `host status HOST --json` shows it once no operation is in flight
        (generous: the machine is shared)."""
        for _ in range(600):
            shown = await self.cli(env, "host", "status", host, "--json")
            assert shown.status == 0, shown.stderr
            entity: dict[str, Any] = json.loads(shown.stdout)["host"]
            if entity["current"] is None:
                return entity
            await asyncio.sleep(0.2)
        raise AssertionError(f"{host} never finished its operation: {entity}")
