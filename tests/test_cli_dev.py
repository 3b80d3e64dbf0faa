"""`metalflow dev` for real, as a user runs it: a subprocess on free ports and a temporary state dir."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import stat
import subprocess
import threading
from pathlib import Path

from cli_support import METALFLOW, clean_env, run_metalflow
from dev_support import (
    alive,
    kept_power_log_lengths,
    listening,
    power_cycles,
    read_until,
    ready,
    run_console,
    three_ports,
)
from ports_support import free_port
from readme_sample import demo_sample, matches
from temporalio.client import Client

from metalflow.devstack.stack import reset_state


def _assert_demo_output(output: str) -> None:
    for host in ("host-001", "host-002", "host-003"):
        assert f"demo: provision {host}: started provision as provision/{host}" in output or (
            f"demo: provision {host}: approved as" in output
        ), output
    # BF3 hosts: one reboot per operation; the BF4 host (host-003): two.
    assert re.search(r"demo: provision host-001: completed \(reboots 1, boot_generation \d+\)", output)
    assert re.search(r"demo: provision host-003: completed \(reboots 2, boot_generation \d+\)", output)
    assert re.search(r"demo: reprovision host-003: completed \(reboots 2, boot_generation \d+\)", output)
    # The approval rule: host-001 has an instance, so its reprovision waited for the approval.
    assert "demo: reprovision host-001: reprovision of host-001 awaits approval" in output
    assert "demo: reprovision host-001: approved as" in output
    assert "demo: reprovision host-001: rebooting-host" in output  # progress as it happens
    assert "demo: host-001 BMC power log: 2 power cycles (DPF asked for 2); the workflows counted 2" in output
    assert "demo: host-003 BMC power log: 4 power cycles (DPF asked for 4); the workflows counted 4" in output
    assert "demo: the simulator recorded 0 protocol violations" in output
    # The coherent rollout of default/inference: 2 replicas x (2 MPGs + 1 TPG step).
    assert "demo:   default/inference rolling [" in output
    assert "demo: rollout completed: 6 steps" in output
    _assert_campaign_output(output)


def _assert_campaign_output(output: str) -> None:
    """The demo's campaign: the canary, then two batches of one, host-003's injected DPU failure
    absorbed by the budget, progress as it happens, and the UI query that lists it."""
    assert "query=Campaign%3D%22demo-fleet%22" in output
    shown = re.findall(
        r"demo:   (canary|running), batch (\d): \d/3 finished: \d done, 1 in flight \((host-\d+)\)", output
    )
    assert list(dict.fromkeys(shown)) == [
        ("canary", "0", "host-001"),
        ("running", "1", "host-002"),
        ("running", "2", "host-003"),
    ]
    assert "demo:   injected: host-003-dpu-0 in Error while installing" in output
    assert (
        "demo: campaign demo-fleet completed: 2 done, 1 failed (host-003) of 3, within the failure budget"
        in output
    )
    assert "demo:   failed host-003: DPUFailed: DPU node-host-003-device-host-003-dpu-0 in Error" in output


async def _ended_with_pending_activities(port: int) -> list[str]:
    """Every ended workflow of the dev server that still shows a pending activity (the UI's
    "Pending Activities" on a completed run: issue 10 item 6), as `id: activity, ...`."""
    client = await Client.connect(f"127.0.0.1:{port}")
    left: list[str] = []
    ended = 0
    async for execution in client.list_workflows("ExecutionStatus != 'Running'"):
        ended += 1
        described = await client.get_workflow_handle(execution.id, run_id=execution.run_id).describe()
        pending = described.raw_description.pending_activities
        if pending:
            left.append(f"{execution.id}: " + ", ".join(p.activity_type.name for p in pending))
    assert ended >= 9, ended  # provisions, reprovisions, reboots, the campaign's runs: all looked at
    return left


def assert_private(state_dir: Path) -> None:
    """The state directory and every directory in it 0700, every file 0600 (database, logs,
    kubeconfig, site file, credentials, the Temporal client config)."""
    loose = [
        f"{path.relative_to(state_dir.parent)} {stat.S_IMODE(path.stat().st_mode):o}"
        for path in [state_dir, *state_dir.rglob("*")]
        if stat.S_IMODE(path.stat().st_mode) != (0o700 if path.is_dir() else 0o600)
    ]
    assert loose == []
    assert {"temporal.db", "temporal.log", "worker.log", "simulator.log", "kubeconfig", "site.yaml"} <= {
        p.name for p in state_dir.iterdir()
    }


def test_dev_exit_runs_the_demo_leaves_nothing_running_and_a_second_run_reuses_the_entities(
    tmp_path: Path,
) -> None:
    """`dev --exit` provisions then reprovisions the simulated hosts and leaves nothing running.
    A second run on the same state dir finds the hosts' entities of the first (same database) and
    the site as the first left it (sim-store.json): the demo does not provision again, and the
    reprovision completes; the BMC power logs, read with `metalflow sim power-log` while the stack
    runs, show exactly one power cycle per reboot DPF asked for; Ctrl-C (SIGINT) then stops
    everything the second run started. Durability, shown by `dev` itself: the second run's worker
    is SIGKILLed in the middle of host-001's reprovision (once the power cycle DPF asked for has
    begun); `dev` restarts it, saying so, and the reprovision finishes on the new worker with that
    one power cycle, not two. (One test, so the suite starts the demo twice, not four times; a
    SIGKILL at each step of a power cycle, with the BMC's log read after each, is
    tests/test_power_crash.py's.)"""
    port, ui_port, sim_port = three_ports()
    state_dir = tmp_path / "state"
    ports = ["--port", str(port), "--ui-port", str(ui_port), "--sim-port", str(sim_port)]
    first = run_console("dev", "--exit", *ports, "--state-dir", str(state_dir), cwd=tmp_path, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f"Temporal UI:      http://127.0.0.1:{ui_port}" in first.stdout
    assert "query=Operation%3D%22host%22" in first.stdout  # where to look in the UI
    _assert_demo_output(first.stdout)
    # README's sample of the demo's output is in the format this run printed, line by line.
    assert [line for line in demo_sample() if not matches(line, first.stdout)] == [], first.stdout
    assert (state_dir / "temporal.db").exists() and (state_dir / "worker.log").exists()
    assert_private(state_dir)
    # Normal is quiet: a successful demo leaves no WARNING, traceback or per-request line.
    worker_log = (state_dir / "worker.log").read_text()
    noisy = [line for line in worker_log.splitlines() if " WARNING " in line or "Traceback" in line]
    assert noisy == [], "\n".join(noisy[:10])
    assert "HTTP Request:" not in worker_log
    # ... and reads as a story at INFO: one line per step, tagged with its workflow, not the
    # SDK's dict of run id, namespace and task queue; a power cycle's inner steps are DEBUG.
    assert "'run_id'" not in worker_log and "cycle_requested" not in worker_log
    story = r"INFO temporalio\.workflow: rebooting-host: .*\[reprovision/\S+\]$"
    assert re.search(story, worker_log, re.M)
    # Each host's entity says once that it runs its provision (it once said so twice: issue 10).
    # Not every line is once: a workflow task that completes the workflow while a signal arrives
    # is failed by the server (UnhandledCommand) and runs again for real, so its last line (e.g.
    # "completed: every DPU Ready ...") can repeat; starting an operation completes nothing.
    for host in ("host-001", "host-002", "host-003"):
        starts = rf"running provision: provision \(provision/{host}\) .*\[host/{host}\]$"
        assert len(re.findall(starts, worker_log, re.M)) == 1, host
    started_first = [int(pid) for pid in re.findall(r"starting .* \(pid (\d+),", first.stdout)]
    assert len(started_first) == 3  # Temporal dev server, simulated site, worker
    assert not any(alive(pid) for pid in started_first)
    assert not any(listening(p) for p in (port, ui_port, sim_port))

    # The second run's site phases take no time (`--timings zero`): the first showed the demo's
    # own timings; this one is about what the state dir remembers. It ends with Ctrl-C (SIGINT),
    # tracing asked of metalflow, which must not stop the Temporal server (issue 29): the
    # signal's half of SIGTERM's (tests/test_prometheus_e2e.py's `--no-demo` stack), without a
    # stack of its own.
    env = clean_env() | {"OTEL_TRACES_EXPORTER": "console"}
    worker_log = state_dir / "worker.log"
    second_run_from = worker_log.stat().st_size
    kept = kept_power_log_lengths(state_dir)  # the first run's power logs, kept across the restart
    assert kept["host-001"] > 0, kept
    process = subprocess.Popen(
        [METALFLOW, "dev", *ports, "--state-dir", str(state_dir), "--timings", "zero"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    lines: list[str] = []
    # The worker is killed (SIGKILL: no goodbye) when its own log says the reprovision's power
    # cycle of host-001 began: the moment is the worker's, not a guess of the test's.
    killer = _WorkerKiller(worker_log, second_run_from, REPROVISION_CYCLE_BEGAN, lines)
    killer.start()
    try:
        read_until(process, lines, lambda line: ready(line) or "FAILED" in line, timeout=300)
        killer.stop()
        output = "".join(lines)
        killed = killer.killed
        assert killed is not None, output
        assert f"metalflow worker (pid {killed}) exited with status -9; restarting it" in output, output
        assert len(re.findall(r"starting metalflow worker \(pid (\d+),", output)) == 2, output
        assert not alive(killed)
        # The reprovision was in flight when its worker died: it completed on the restarted one.
        second_log = worker_log.read_bytes()[second_run_from:].decode()
        restarted_at = [m.start() for m in re.finditer(r"metalflow\.worker: worker polling", second_log)][1]
        assert second_log.index(REPROVISION_COMPLETED) > restarted_at, second_log[restarted_at - 2000 :]
        assert "press Ctrl-C to stop" in output, output
        assert "registered search attributes" not in output
        assert re.search(r"restored \d+ objects", (state_dir / "simulator.log").read_text())
        assert "DPF has the DPUs of host-001, host-002, host-003 already (site restored)" in output
        assert "demo: provision host-" not in output
        # The entities remember the first run: boot generations continue from 4 (BF4; the campaign's
        # reprovision of host-003 failed before a reboot) and 3 (BF3: provision, reprovision, campaign).
        assert "demo: reprovision host-003: completed (reboots 2, boot_generation 6)" in output, output
        assert "demo: reprovision host-001: completed (reboots 1, boot_generation 4)" in output, output
        assert "demo: the simulator recorded 0 protocol violations" in output
        assert (
            "demo: campaign demo-fleet ran already in this state dir (the restored site): not again" in output
        )
        assert "demo: campaign demo-fleet completed: 2 done, 1 failed (host-003) of 3" in output
        cycles = {h: power_cycles(h, state_dir, kept[h]) for h in ("host-001", "host-002", "host-003")}
        assert cycles == {"host-001": 1, "host-002": 1, "host-003": 2}
        # Every way the demo's workflows ended (completed, the campaign's failed host) left no
        # activity pending.
        assert asyncio.run(_ended_with_pending_activities(port)) == []
        assert listening(port) and listening(ui_port), output
        process.send_signal(signal.SIGINT)
        rest, _ = process.communicate(timeout=60)
    finally:
        killer.stop()
        if process.poll() is None:
            process.terminate()
            process.communicate(timeout=60)
    assert process.returncode == 0, output + rest
    assert "everything stopped" in rest, rest
    started = [int(pid) for pid in re.findall(r"starting .* \(pid (\d+),", output)]
    assert len(started) == 4 and not any(alive(pid) for pid in started)  # the worker twice
    assert not any(listening(p) for p in (port, ui_port, sim_port))


REPROVISION_CYCLE_BEGAN = re.compile(
    r"temporalio\.activity: power cycle of host-001 for boot generation \d+ \(attempt 1,.*\[reboot/host-001/"
)
REPROVISION_COMPLETED = "completed: every DPU Ready after 1 power cycle [reprovision/host-001]"


class _WorkerKiller(threading.Thread):
    """SIGKILLs the dev stack's worker once its log, from `offset` on, has a line matching
    `pattern`: the worker whose `starting metalflow worker (pid N, ...)` came last in `lines`."""

    def __init__(self, log: Path, offset: int, pattern: re.Pattern[str], lines: list[str]) -> None:
        super().__init__(daemon=True)
        self.log, self.offset, self.pattern, self.lines = log, offset, pattern, lines
        self.killed: int | None = None
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()
        self.join(timeout=10)

    def run(self) -> None:
        seen = ""
        while not self._stopped.wait(0.01):
            with self.log.open("rb") as log:
                log.seek(self.offset)
                chunk = log.read()
            self.offset += len(chunk)
            seen = seen[seen.rfind("\n") + 1 :] + chunk.decode(errors="replace")  # whole lines only
            if self.pattern.search(seen):
                break
        while not self._stopped.is_set():
            pids = re.findall(r"starting metalflow worker \(pid (\d+),", "".join(self.lines))
            if pids:
                self.killed = int(pids[-1])
                os.kill(self.killed, signal.SIGKILL)
                return
            self._stopped.wait(0.01)


def test_old_history_without_a_saved_site_is_refused_and_reset_names_what_it_deletes(tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    state_dir.mkdir()
    (state_dir / "temporal.db").write_bytes(b"")
    port, ui_port, sim_port = three_ports()
    ports = ["--port", str(port), "--ui-port", str(ui_port), "--sim-port", str(sim_port)]
    refused = run_console("dev", "--exit", *ports, "--state-dir", str(state_dir), cwd=tmp_path, timeout=60)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "no saved simulated site (sim-store.json)" in refused.stderr
    assert "metalflow dev --reset" in refused.stderr
    assert (state_dir / "temporal.db").exists()  # a refusal changes nothing
    (state_dir / "sim-store.json").write_text("{}")
    (state_dir / "site.yaml").write_text("kept")
    assert reset_state(state_dir) == ["temporal.db", "sim-store.json"]
    # The lock file stays (deleting a lock file races whoever opens it next); it holds no state.
    assert sorted(p.name for p in state_dir.iterdir()) == ["site.yaml", "stack.lock"]


def test_busy_port_is_a_clear_error_naming_the_flag(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        completed = run_console(
            "dev", "--exit", "--port", str(port), "--state-dir", str(tmp_path), cwd=tmp_path, timeout=30
        )
        ui = run_console(
            "dev",
            "--exit",
            "--port",
            str(free_port()),
            "--ui-port",
            str(port),
            "--state-dir",
            str(tmp_path),
            cwd=tmp_path,
            timeout=30,
        )
    assert completed.returncode == 2
    assert f"port {port} on 127.0.0.1 (Temporal gRPC) is already in use" in completed.stderr
    assert "--port" in completed.stderr
    assert ui.returncode == 2 and "--ui-port" in ui.stderr
    assert not (tmp_path / "temporal.db").exists()  # nothing was started


def test_help_and_usage_errors() -> None:
    assert run_console("--help", cwd=Path.cwd()).returncode == 0  # the console script itself
    # The rest in this process (argparse's answers; the process is what the line above tests).
    dev_help = run_metalflow("dev", "--help")
    assert dev_help.returncode == 0 and "--no-demo" in dev_help.stdout and "--state-dir" in dev_help.stdout
    assert "--hosts" in dev_help.stdout and "--faults" in dev_help.stdout and "--sim-port" in dev_help.stdout
    assert run_metalflow().returncode == 2
    assert run_metalflow("dev", "--exit", "--no-demo").returncode == 2
    assert run_metalflow("dev", "--port", "70000").returncode == 2
