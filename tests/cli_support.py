"""`metalflow ...` without an interpreter per command, for tests about what a command does rather
than about the process that runs it (exit status, stdout and stderr are the same as a subprocess's).

Why: a `python -m metalflow` subprocess spends about 1.5 s of CPU importing before it does anything;
on the 2-core machine that runs four pytest workers, that CPU is most of such a test's cost. Tests
about the process itself (signals, a killed parent, `python -m`) keep a real subprocess.

- `run_metalflow`: in the test's own process, in a thread of its own (its `asyncio.run` gets a
  fresh event loop there and leaves the test session's loop alone). Its stdout and stderr are
  redirected while it runs, so use it from synchronous tests (an async test's concurrent prints
  would land in the captured output), one command at a time, with the test process's environment.
- `run_in_command_server`: in a process of its own that imported metalflow once, with exactly the
  environment the test gives it; for async tests and commands with variables of their own.
- `run_in_few_processes`: many such commands, each with variables of its own (a Temporal address,
  a site file), a few servers side by side.
- `run_console_script`: the installed `metalflow` (`METALFLOW`) as a subprocess, for the tests of
  the console script itself; `clean_env` and `command_env` are the environments commands get.
- `write_unreachable_site` and `entity_exists`: a site file whose BMCs no command may reach, and
  whether a (refused) command created a host's entity anyway.
- `metalflow`: a command against a test's Temporal and a simulated site (its own, or the running
  module's, recorded with `use_site_file`), in a command server; `Result` is what it returns.
- `shown_state`, `until_shown`, `rebooting`, `ended`: what `metalflow host status --json` shows,
  read in this process, and waits on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode
from temporalio.testing import WorkflowEnvironment

from contracts import names
from metalflow.cli import main
from metalflow.hosts import host_status
from metalflow.operation_progress import operation_status

TIMEOUT_SECONDS = 120
# The console script of this venv, as a user who activated it runs it.
METALFLOW = shutil.which("metalflow", path=str(Path(sys.executable).parent)) or "metalflow"
_SITE_FILE: dict[str, Path] = {}  # the running module's simulated site, for `metalflow()`


def clean_env() -> dict[str, str]:
    """This process's environment less the developer's Temporal and OpenTelemetry settings, which
    would point a command at their own server or exporter."""
    return {key: value for key, value in os.environ.items() if not key.startswith(("TEMPORAL_", "OTEL_"))}


def command_env(client: Client, state: Path) -> dict[str, str]:
    """A command's environment for `client`'s server (address, namespace) and `state/site.yaml`,
    with none of the developer's TEMPORAL_* or METALFLOW_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TEMPORAL_", "METALFLOW_"))}
    return env | {
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": client.namespace,
        "METALFLOW_SITE_FILE": str(state / "site.yaml"),
    }


async def run_console_script(args: list[str], env: dict[str, str]) -> tuple[int, str, str]:
    """The installed `metalflow ARGS` as a subprocess with environment `env`: (exit status, stdout,
    stderr), for the tests of the console script itself."""
    process = await asyncio.create_subprocess_exec(
        METALFLOW, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=TIMEOUT_SECONDS)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def write_unreachable_site(path: Path, *hosts: str) -> Path:
    """A valid site file naming `hosts` (no DPUs; their BMCs are never reached: nothing listens there)."""
    bmc = {"endpoint": "http://127.0.0.1:9", "credentials": {"file": "/nonexistent/creds.json"}}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"name": "bounds", "hosts": [{"id": h, "bmc": bmc} for h in hosts]}))
    return path


async def entity_exists(client: Client, host_id: str, since: datetime | None = None) -> bool:
    """Whether the host's entity exists on the server (`since`: one started then or later).

    Tests share one dev server per xdist process, and sites name their hosts alike: another
    test may have made `host/host-001` earlier, so a test asking "did my refused command create
    it?" passes the time it began."""
    try:
        description = await client.get_workflow_handle(names.host_workflow_id(host_id)).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return False
        raise
    return since is None or description.start_time >= since


def run_metalflow(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """Run `metalflow *args` in this process; the result reads like `subprocess.run`'s."""
    argv = [str(arg) for arg in args]
    stdout, stderr = io.StringIO(), io.StringIO()
    status: list[int] = []
    failure: list[BaseException] = []

    def command() -> None:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                status.append(main(argv))
            except SystemExit as exit_:  # argparse's usage errors and --help
                code = exit_.code
                status.append(code if isinstance(code, int) else 0 if code is None else 1)
            except BaseException as error:  # re-raised in the test, with its traceback
                failure.append(error)

    thread = threading.Thread(target=command, name=f"metalflow {' '.join(argv[:2])}", daemon=True)
    thread.start()
    thread.join(TIMEOUT_SECONDS)
    if thread.is_alive():
        raise TimeoutError(f"metalflow {' '.join(argv)} did not return within {TIMEOUT_SECONDS} s")
    if failure:
        raise failure[0]
    return subprocess.CompletedProcess(["metalflow", *argv], status[0], stdout.getvalue(), stderr.getvalue())


async def run_in_few_processes(
    rows: list[tuple[list[str], dict[str, str]]], env: dict[str, str], per_process: int = 4
) -> list[tuple[int, str, str]]:
    """`metalflow ARGV` for each (argv, variables) row, `per_process` commands after one another
    in a command server (below), the servers side by side; (exit status, stdout, stderr) per row,
    in order. `env` is every command's environment; a row's variables apply to its command only.

    For tests of many commands' answers (refusals, errors) whose seconds are waits, not CPU."""

    async def run(chunk: list[tuple[list[str], dict[str, str]]]) -> list[tuple[int, str, str]]:
        return [await run_in_command_server(list(argv), env | variables) for argv, variables in chunk]

    chunks = await asyncio.gather(
        *(run(rows[at : at + per_process]) for at in range(0, len(rows), per_process))
    )
    return [outcome for chunk in chunks for outcome in chunk]


# A command server: reads one JSON line [argv, environment] per command from stdin, runs
# `metalflow.cli.main(argv)` with exactly that environment (os.environ replaced for the command),
# stdin empty and stdout/stderr captured, and writes one JSON line [exit status, stdout, stderr]
# to the file descriptor named by its argument. `os._exit(status)`, with which the Temporal
# commands end, ends the command instead of the process. End of stdin ends it; so does the test
# process's death, mid-command too (its parent checked every second), as README promises.
_SERVE = r"""
import contextlib, io, json, os, sys, threading, time, traceback
from metalflow.cli import main
real_exit, parent = os._exit, os.getppid()
def orphaned():
    while os.getppid() == parent:
        time.sleep(1)
    real_exit(1)
threading.Thread(target=orphaned, daemon=True).start()
def end_command(status):
    raise SystemExit(status)
os._exit = end_command
answers = os.fdopen(int(sys.argv[1]), "w")
requests = sys.stdin
for line in requests:
    argv, environment = json.loads(line)
    os.environ.clear()
    os.environ.update(environment)
    out, err = io.StringIO(), io.StringIO()
    sys.stdin = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        except Exception:
            traceback.print_exc()
            code = 1
    sys.stdin = requests
    answers.write(json.dumps([code, out.getvalue(), err.getvalue()]) + "\n")
    answers.flush()
"""


class _CommandServer:
    """One interpreter of `_SERVE`, running one command at a time."""

    def __init__(self, process: asyncio.subprocess.Process, answers: asyncio.StreamReader) -> None:
        self.process = process
        self.answers = answers

    @classmethod
    async def start(cls) -> _CommandServer:
        read_end, write_end = os.pipe()
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-c", _SERVE, str(write_end), stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL, pass_fds=(write_end,),
            )  # fmt: skip
        finally:
            os.close(write_end)
        answers = asyncio.StreamReader(limit=2**26)
        await asyncio.get_running_loop().connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(answers), os.fdopen(read_end, "rb")
        )
        return cls(process, answers)

    async def run(self, argv: list[str], env: dict[str, str]) -> tuple[int, str, str]:
        assert self.process.stdin is not None
        self.process.stdin.write((json.dumps([argv, env]) + "\n").encode())
        await self.process.stdin.drain()
        line = await self.answers.readline()
        if not line:
            raise RuntimeError(f"the command server ended (exit {await self.process.wait()}) running {argv}")
        code, out, err = json.loads(line)
        return int(code), str(out), str(err)

    def stop(self) -> None:
        if self.process.returncode is None:
            self.process.kill()


_IDLE: dict[asyncio.AbstractEventLoop, list[_CommandServer]] = {}  # a server's pipes are its loop's


async def run_in_command_server(
    argv: list[str], env: dict[str, str], timeout: float = TIMEOUT_SECONDS
) -> tuple[int, str, str]:
    """`metalflow ARGV` with environment `env` (the whole environment, as a subprocess's), in a
    command server of this test process: (exit status, stdout, stderr), as from a subprocess.

    Why: an interpreter spends ~1.5 s of CPU importing metalflow before a command does anything;
    a command server imports it once and runs command after command (one at a time; concurrent
    commands get servers of their own). For tests of what commands do; tests of the process itself
    (signals, `os._exit`, the console script) keep real subprocesses."""
    idle = _IDLE.setdefault(asyncio.get_running_loop(), [])
    server = idle.pop() if idle else await _CommandServer.start()
    try:
        outcome = await asyncio.wait_for(server.run(argv, env), timeout)
    except BaseException:
        server.stop()  # mid-command: never reused
        raise
    idle.append(server)
    return outcome


@dataclass
class Result:
    status: int
    stdout: str
    stderr: str


def use_site_file(path: Path) -> None:
    """Make `path` the site file `metalflow()` gives commands that name none: a module's `sim`
    fixture records its simulated site as it starts it (it stays until another module records its own)."""
    _SITE_FILE["path"] = path


async def metalflow(
    local_env: WorkflowEnvironment, *args: str, address: str | None = None, site_file: Path | None = None
) -> Result:
    """`metalflow ARGS` against `local_env`'s Temporal (or `address`), checking hosts against
    `site_file` or else the site `use_site_file` recorded, in a command server."""
    return Result(*await run_in_command_server(list(args), metalflow_env(local_env, address, site_file)))


def metalflow_env(
    local_env: WorkflowEnvironment, address: str | None = None, site_file: Path | None = None
) -> dict[str, str]:
    """The environment `metalflow()` gives a command (for a test that runs the console script)."""
    env = clean_env()
    # The CLI checks hosts against the inventory before it sends anything: the module's site.
    env["METALFLOW_SITE_FILE"] = str(site_file or _SITE_FILE.get("path", Path("/nonexistent/site.yaml")))
    # A reprovision also checks DPF's DPUs, in the cluster of the simulator that wrote the site file.
    kubeconfig = Path(env["METALFLOW_SITE_FILE"]).parent / "kubeconfig"
    if kubeconfig.is_file():
        env["KUBECONFIG"] = str(kubeconfig)
    env["METALFLOW_INVENTORY"] = "site"
    env["TEMPORAL_ADDRESS"] = address or local_env.client.service_client.config.target_host
    env["TEMPORAL_CONFIG_FILE"] = os.devnull
    return env


async def shown_state(env: WorkflowEnvironment, host: str) -> dict[str, Any]:
    """What `metalflow host status HOST --json` shows of the entity and its operation, read in
    this process (the same `metalflow.hosts` calls): a poll through the command itself cost
    ~1.7 s of CPU per look (the interpreter's imports), most of these tests' CPU. Each test still
    runs the command once the state is reached and asserts what it prints."""
    status = await host_status(env.client, host)
    operation = None
    if status.current is not None and status.current.outcome == "running":
        operation = await operation_status(env.client, status.current.workflow_id)
    return {"host": status.model_dump(mode="json"), "operation": operation}


async def until_shown(env: WorkflowEnvironment, host: str, done: Any, what: str) -> dict[str, Any]:
    """Poll `shown_state` until `done(shown)` (at most 60 s)."""
    shown: dict[str, Any] = {}
    for _ in range(300):
        shown = await shown_state(env, host)
        if done(shown):
            return shown
        await asyncio.sleep(0.2)
    raise AssertionError(f"{host} never {what}: {shown}")


def rebooting(shown: dict[str, Any]) -> bool:
    """The host's operation is in `rebooting-host` (its BMC power cycles the host)."""
    return bool((shown["operation"] or {}).get("phase") == "rebooting-host")


def ended(shown: dict[str, Any]) -> bool:
    """No operation is in flight on the host."""
    return shown["host"]["current"] is None
