"""Crash safety of the server side: the test runs its OWN Temporal dev server (SQLite file on
disk), a worker process and the simulated site, SIGKILLs the dev server while a reprovision of a
2-DPU BF3 host is in flight, and starts it again on the same database and port: three times in
one run, at three points of the operation (while the DPUs install, while the power cycle waits to
send its reset, after the reset), each outage lasting until the site has done what that point
is about. One run, not three: the server, site and worker are started once, and each point is
reached in the operation's own order (none of them needs a fresh operation).

The operation must still end with exactly the one power cycle DPF asked for in the BMC's power
log, and no violation recorded by the simulated site. The worker is left alone: it must ride out
the outages and reconnect by itself (the test fails, naming its log, if it died)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from host_operation_support import FAST_POLICY, power_cycles, start_operation, status_of, wait_for_status
from ports_support import free_port
from sim_support import RunningSim, running_sim, sim_http
from temporalio.api.enums.v1 import PendingActivityState
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.service import RPCError
from worker_support import worker_env, worker_process

from contracts import names
from contracts.models.host import HostOperationKind, HostOperationResult, HostOperationStatus
from metalflow.binaries import temporal_cli
from metalflow.devstack.stack import start_failure_is_transient

SERVER_START_TIMEOUT = 60.0
SERVER_START_RETRIES = 2
OPERATION_TIMEOUT = 180.0
# DPF moves a DPU on from a phase after 0.5 s, not the demo profile's 1 s: about 8 such phases
# stand between the start and each kill point, and after it. What the test proves (one power
# cycle across the server's restart) does not depend on them; the install phases still last
# 1.5 s together, the window the first kill point is found in (status polled every 0.1 s).
SITE_TIMING = {"dpu_phase_seconds": 0.5, "dpu_registration_seconds": 0.5}


@dataclass
class DevServer:
    """One `temporal server start-dev` on a fixed port and database file, restartable."""

    state_dir: Path
    port: int
    ui_port: int
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def argv(self) -> list[str]:
        argv = [
            str(temporal_cli()), "server", "start-dev", "--headless",
            "--ip", "127.0.0.1", "--port", str(self.port), "--ui-port", str(self.ui_port),
            "--db-filename", str(self.state_dir / "temporal.db"),
            "--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal",
            "--log-level", "warn",
        ]  # fmt: skip
        for name, kind in names.search_attribute_types().items():
            argv += ["--search-attribute", f"{name}={kind}"]
        return argv

    def start(self) -> None:
        self.starts += 1
        with (self.state_dir / f"temporal-{self.starts}.log").open("wb") as out:
            # Its own process group, so a kill reaches anything it spawned too.
            self.process = subprocess.Popen(
                self.argv(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def kill(self) -> None:
        """SIGKILL, as a crashed host or an OOM kill would: no shutdown, no flush."""
        process = self.process
        if process is not None and process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

    async def connect(self) -> Client:
        """A client, once the (re)started server answers; fails if the server exits first."""
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        retries = 0
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                log = (self.state_dir / f"temporal-{self.starts}.log").read_text()
                # A port it picked itself taken under parallel tests: started again, as
                # `metalflow dev` does (the restart count in `starts` is not a test's figure).
                transient = start_failure_is_transient(self.process.returncode, log)
                if transient and retries < SERVER_START_RETRIES:
                    retries += 1
                    self.start()
                    await asyncio.sleep(0.2)
                    continue
                raise AssertionError(f"dev server exited with {self.process.returncode}:\n{log}")
            try:
                client = await Client.connect(self.address, data_converter=pydantic_data_converter)
                await client.count_workflows()  # the frontend is up and the namespace is served
                return client
            except Exception:  # noqa: BLE001 - not up yet: retried until the deadline
                if time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.2)


@contextmanager
def dev_server(state_dir: Path) -> Iterator[DevServer]:
    state_dir.mkdir(parents=True, exist_ok=True)
    server = DevServer(state_dir, free_port(), free_port())
    server.start()
    try:
        yield server
    finally:
        server.kill()


async def wait_until(
    client: Client, workflow_id: str, predicate: Callable[[HostOperationStatus], bool], what: str
) -> HostOperationStatus:
    # The handle comes from the current client: after the restart the old one's channel is gone.
    handle = client.get_workflow_handle(workflow_id, result_type=HostOperationResult)
    return await wait_for_status(handle, predicate, what, timeout=90)


async def deadline(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.1)


def dpu_phases(sim: RunningSim, host_id: str) -> list[str]:
    """The phases of the host's DPUs as DPF (the simulated cluster) has them, not as Temporal saw them."""
    response = sim_http().get(
        f"{sim.url}/apis/provisioning.dpu.nvidia.com/v1alpha1/namespaces/dpf-operator-system/dpus",
        params={"labelSelector": f"provisioning.dpu.nvidia.com/dpunode-name=node-{host_id}"},
        headers=sim.headers,
        timeout=10,
    )
    response.raise_for_status()
    return sorted(item.get("status", {}).get("phase", "") for item in response.json()["items"])


@dataclass
class KillPoint:
    """When to kill the server, and what the site must have done before it comes back.

    `in_flight` gets the client being connected (the server may just have been started again):
    a point read from the site alone is watched from the server's start on, not from its client's."""

    in_flight: Callable[[asyncio.Task[Client], str], Awaitable[bool]]
    outage_until: Callable[[RunningSim, float], bool]  # (the site, seconds the server is down)
    what: str


async def _dpus_installing(connected: asyncio.Task[Client], workflow_id: str) -> bool:
    client = await connected
    status = await status_of(client.get_workflow_handle(workflow_id))
    return status.phase == "waiting-for-reboot-request" and any(
        d.phase in ("Config FW Parameters", "Prepare BFB", "OS Installing") for d in status.dpus
    )


async def _power_cycle_started(connected: asyncio.Task[Client], workflow_id: str) -> bool:
    # A worker runs the reboot child's power_cycle_host and the server has recorded its first
    # heartbeat (step `started`); the step before the reset follows at the SDK's throttle (~3 s).
    # Killed now, a retry resumes from `started`: the reset must wait until its step is recorded.
    client = await connected
    try:
        child = await client.get_workflow_handle("reboot/host-001/generation-1").describe()
    except RPCError:
        return False
    pending = child.raw_description.pending_activities
    return any(
        a.activity_type.name == "power_cycle_host"
        and a.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        and a.heartbeat_details.payloads
        for a in pending
    )


def _reset_under_way(sim: RunningSim) -> bool:
    return any(e["to"] == "Off" for e in sim.power_log("host-001"))


async def _reset_sent(connected: asyncio.Task[Client], workflow_id: str) -> bool:
    # Read from the site, from the server's start on: the reset follows the worker's reconnection.
    return await asyncio.to_thread(_reset_under_way, sim_of[workflow_id])


sim_of: dict[str, RunningSim] = {}  # the site of each operation, for kill points that watch the BMC

INSTALLING = KillPoint(
    _dpus_installing,
    # While Temporal is down, DPF finishes the installs and asks for the reboot.
    lambda sim, _down: dpu_phases(sim, "host-001") == ["Rebooting", "Rebooting"],
    "every DPU Rebooting in the simulated cluster",
)
POWER_CYCLING = KillPoint(
    _power_cycle_started,
    # Longer than the activity waits before reading its step back: the reset must wait for the
    # server (sending it unrecorded is how a retry used to cycle the host a second time).
    lambda _sim, down: down >= 8.0,
    "8 s of outage while the power cycle waits to send its reset",
)
AFTER_THE_RESET = KillPoint(
    _reset_sent,
    # The reset was sent with its step recorded: the cycle completes while Temporal is down and
    # the attempt that resumes afterwards must see it done (LastResetTime moved), not cycle again.
    lambda sim, _down: [e["to"] for e in sim.power_log("host-001")][-2:] == ["Off", "On"],
    "the BMC's power cycle done (Off, then On)",
)
# In the operation's order: the installs, the reboot's power cycle before its reset, after it.
KILL_POINTS = {
    "while-dpus-install": INSTALLING,
    "while-power-cycling": POWER_CYCLING,
    "after-the-reset": AFTER_THE_RESET,
}


async def _kill_and_start_again(
    server: DevServer,
    sim: RunningSim,
    kill: KillPoint,
    name: str,
    connected: asyncio.Task[Client],
    workflow_id: str,
) -> tuple[asyncio.Task[Client], float, float]:
    """Kill the server at `kill`'s point, start it again once the site did what the point is
    about; returns the client being connected, when it was killed and how long it was down."""
    await deadline(
        lambda: kill.in_flight(connected, workflow_id), f"the moment to kill the server ({name})", 90
    )
    server.kill()
    down_at = time.monotonic()
    await deadline(
        lambda: asyncio.to_thread(kill.outage_until, sim, time.monotonic() - down_at), f"{kill.what} ({name})"
    )
    outage = time.monotonic() - down_at
    server.start()
    return asyncio.create_task(server.connect()), down_at, outage


async def test_reprovision_survives_a_dev_server_restart_at_each_point(tmp_path: Path, capsys: Any) -> None:
    task_queue = f"restart-{uuid.uuid4()}"
    worker_log = tmp_path / "worker.log"
    outages: list[str] = []
    with (
        dev_server(tmp_path / "temporal") as server,
        running_sim(
            tmp_path / "sim", hosts=1, dpus_per_host=2, timings="demo", timing=SITE_TIMING, initialised=True
        ) as sim,
        worker_process(task_queue, worker_env(server.address, sim), worker_log) as worker,
    ):
        connected = asyncio.create_task(server.connect())
        client = await connected
        handle = await start_operation(client, task_queue, "host-001", HostOperationKind.REPROVISION,
                                       policy=FAST_POLICY)  # fmt: skip
        workflow_id = handle.id
        sim_of[workflow_id] = sim
        for name, kill in KILL_POINTS.items():
            connected, down_at, outage = await _kill_and_start_again(
                server, sim, kill, name, connected, workflow_id
            )
            outages.append(f"{name}: server down {outage:.1f} s until {kill.what}")
            assert worker.returncode is None, f"the worker died with the server ({name}); see {worker_log}"
        client = await connected
        up_after = time.monotonic() - down_at

        handle = client.get_workflow_handle(workflow_id, result_type=HostOperationResult)
        result = await asyncio.wait_for(handle.result(), OPERATION_TIMEOUT)
        done_after = time.monotonic() - down_at
        worker_alive = worker.returncode is None
        final = await wait_until(client, workflow_id, lambda s: s.phase == "completed", "the status")
        power_log, violations = sim.power_log("host-001"), sim.violations()

    with capsys.disabled():
        print("\n" + "\n".join(outages))
        print(
            f"serving again {up_after:.1f} s after the last kill; operation done {done_after:.1f} s "
            f"after it; worker survived: {worker_alive}"
        )
    assert worker_alive, f"the worker died with the server; see {worker_log}"
    assert result.reboots == 1 and final.power_cycles_issued == 1
    assert power_cycles(power_log) == 1, power_log
    assert violations == []
