"""The metalflow worker: every workflow and activity on one task queue (`python worker.py`).

Exit status is deterministic: 0 after a graceful shutdown on SIGTERM/SIGINT, 1 when the worker
fails (the reason on stderr), 2 for a configuration error (a bad setting, a missing or malformed
`TEMPORAL_CONFIG_FILE`, no usable kubeconfig, a missing or invalid site file), in one line. The
root `worker.py` ends the process with `os._exit` after flushing, because the SDK's native
runtime can abort the interpreter at exit (`PyGILState_Release`)
and turn a clean shutdown into a crash status.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import temporalio.activity
import temporalio.workflow
from pydantic import ValidationError
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker, WorkerDeploymentConfig

import activities
import workflows
from activities import heartbeat
from contracts import names
from contracts.errors import PERMANENT_TYPES, InvalidInput, PermanentError
from contracts.wording import LogFormatterZ
from drivers.settings import Settings
from drivers.site_file import SiteFileCache, SiteFileError
from metalflow.client import connect
from metalflow.runtime import code_cache
from metalflow.runtime.lifeline import LIFELINE_ARG, watch_lifeline
from metalflow.runtime.telemetry import TelemetryConfigError, setup_tracing
from metalflow.runtime.versioning import deployment_config_from_env, worker_versioning
from metalflow.runtime.versioning import describe as describe_versioning

GRACEFUL_SHUTDOWN_TIMEOUT = timedelta(seconds=10)
# Workflow tasks are pure Python run on threads under one GIL: N of them at once each take N
# times their CPU time of wall clock, and one that takes past the workflow task timeout (10 s)
# is thrown away and retried, work lost on a busy worker. The SDK's default of 100 slots did
# that on the 200-host fleet benchmark (1,441 tasks over 5 s in one run, bench/README.md). A
# task waiting for a slot waits on the server, where it is not timed out (a sticky one moves to
# the shared queue after 10 s: a replay, not a failure); 20 slots still cover the round trip of
# each completion to the server (a task holds its slot until then).
WORKFLOW_TASK_SLOTS = 20
# Activities are async I/O (HTTP to BMCs and the API server, RPCs to Temporal) and the site's
# DPF watch holds one slot per site, not per host: 200 leave room for a fleet's power cycles.
ACTIVITY_SLOTS = 200
# Heartbeats reach the server within this (the SDK's default throttle is 0.8 x the heartbeat
# timeout, 3.2 s for the power cycle, which waited that long before every reset that must not
# repeat). What it costs per activity is in activities/heartbeat.py: callers that beat on every
# poll go through `HeartbeatGate`, so the rate stays what each activity needs.
HEARTBEAT_THROTTLE = heartbeat.HEARTBEAT_THROTTLE
EVENTS_ENV = "METALFLOW_KUBE_EVENTS"
log = logging.getLogger("metalflow.worker")

if TYPE_CHECKING:
    from metalflow.runtime.events import Emitter


def build_worker(
    client: Client,
    task_queue: str = names.TASK_QUEUE,
    settings: Settings | None = None,
    deployment_config: WorkerDeploymentConfig | None = None,
) -> Worker:
    """Create a worker that registers every workflow in `workflows.ALL` and every activity of
    `activities.build_activities`.

    Args:
        client: A client from `metalflow.client.connect`; activities that signal workflows use it.
        task_queue: The task queue to poll.
        settings: Where the site is (default: `Settings.from_env()`).
        deployment_config: Worker versioning (`metalflow.runtime.versioning`); None: unversioned.
    """
    # Each workflow run re-imports the workflow modules in its sandbox: compile them once
    # (metalflow/runtime/code_cache.py; measured at half the worker's CPU without bytecode files).
    code_cache.install()
    # ... and the sandbox's own entry snippets, compiled per call by the SDK (code_cache.py).
    runner = code_cache.workflow_runner()
    settings = settings or Settings.from_env()
    return Worker(
        client,
        task_queue=task_queue,
        workflows=workflows.ALL,
        activities=activities.build_activities(temporal_client=client, settings=settings),
        graceful_shutdown_timeout=GRACEFUL_SHUTDOWN_TIMEOUT,
        # An input that does not validate (a workflow started by hand, `temporal workflow start`)
        # fails the workflow naming the field, instead of failing its first task again and again
        # forever (the SDK's default for any error while decoding arguments). Signals with a bad
        # payload are still dropped by the SDK, and updates rejected, whatever this says.
        workflow_failure_exception_types=[ValidationError],
        max_concurrent_workflow_tasks=WORKFLOW_TASK_SLOTS,
        max_concurrent_activities=ACTIVITY_SLOTS,
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        # How long a dead worker's workflows wait before another worker takes them (settings.py).
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=settings.worker_takeover_seconds),
        **({"workflow_runner": runner} | worker_versioning(deployment_config, runner=runner)),
    )


async def run_worker(
    task_queue: str, profile: str | None, metrics_address: str | None = None, lifeline_fd: int | None = None
) -> None:
    """Connect, run the worker until SIGTERM, SIGINT or a cut lifeline (the process that started
    it died), then shut it down gracefully."""
    settings = Settings.from_env()  # a bad setting stops the worker before it connects
    deployment_config = deployment_config_from_env()
    # Imported here: aiohttp must stay out of the modules workflow sandboxes re-import (tests
    # define workflows in modules that import this one).
    from metalflow.runtime.observability import Observability

    observability = Observability.from_env(metrics_address)  # a bad address too
    tracing = setup_tracing()
    try:
        check_site_access(settings)  # before connecting: a worker that cannot act must not poll
        runtime = observability.runtime()
        extra: dict[str, Any] = {"runtime": runtime} if runtime is not None else {}
        client = await connect(profile=profile, interceptors=tracing.interceptors, **extra)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        if lifeline_fd is not None:
            # Past the graceful shutdown's own limit, exit anyway: the server may have died too.
            hard_exit = GRACEFUL_SHUTDOWN_TIMEOUT.total_seconds() + 10
            watch_lifeline(lifeline_fd, stop.set, hard_exit_after=hard_exit)
        worker = build_worker(client, task_queue, settings, deployment_config)
        emitter = start_events(settings)
        observability.emitter = emitter
        async with worker:
            if emitter is not None:
                await emitter.start()
            await observability.start(client, worker)
            await start_site_watch(client, settings, task_queue)
            log.info(
                "worker polling task queue %r on %s namespace %r, %s",
                task_queue,
                client.service_client.config.target_host,
                client.namespace,
                describe_versioning(deployment_config),
            )
            await stop.wait()
            log.info("shutting down (waiting up to %s for running activities)", GRACEFUL_SHUTDOWN_TIMEOUT)
        log.info("worker stopped")
    finally:
        if observability.emitter is not None:
            await observability.emitter.stop()
        await observability.stop()
        tracing.shutdown()


def start_events(settings: Settings) -> Emitter | None:
    """The worker's Kubernetes Events (`metalflow.runtime.events`), unless
    `METALFLOW_KUBE_EVENTS=off`."""
    if os.environ.get(EVENTS_ENV, "on").strip().lower() in ("off", "false", "0", "no"):
        log.info("Kubernetes Events off (%s)", EVENTS_ENV)
        return None
    from metalflow.runtime.events import Emitter

    return Emitter(settings)


async def start_site_watch(client: Client, settings: Settings, task_queue: str) -> None:
    """Start the site's one DPF watch (`dpf-watch/<namespace>`), or keep the one that runs, so
    the first operation does not wait for it; the first operation would start it otherwise.
    Started from the API server's resourceVersions now (`ensure_site_watch`): its first listing
    signals only hosts that changed since, not every host of the site."""
    from activities.site_watch.start import ensure_site_watch
    from drivers.kube import load_configuration

    try:
        await ensure_site_watch(
            client,
            load_configuration(settings),
            settings.dpf_namespace,
            task_queue,
            settings.site_watch_heartbeat_timeout_seconds,
        )
    except Exception as err:  # not fatal: the first operation's join starts it
        log.warning("could not start the site's DPF watch yet (%s); the first operation will", err)


def check_site_access(settings: Settings) -> None:
    """Refuse to start without a usable kubeconfig (or in-cluster config) and, in site mode, a
    valid site file: a worker that starts anyway would fail every operation it picks up.

    Raises:
        ValueError: What is missing or wrong, in one line.
    """
    # Imported here: the Kubernetes client (urllib3) must stay out of the modules that workflow
    # sandboxes re-import (tests define workflows in modules that import this one).
    from drivers.kube import load_configuration

    try:
        load_configuration(settings)
        if settings.inventory == "site":
            SiteFileCache.shared(settings.site_file).check()  # parsed once: the inventory keeps it
    except SiteFileError as err:
        raise ValueError(f"{err.one_line()} (METALFLOW_SITE_FILE)") from None
    except InvalidInput as err:
        raise ValueError(f"{err.message} (KUBECONFIG)".replace("\n", " ")) from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the worker's command line."""
    parser = argparse.ArgumentParser(
        prog="worker.py",
        description="Run a metalflow worker. Connection settings come from TEMPORAL_* variables "
        "and the Temporal config file (see README.md).",
    )
    parser.add_argument("--task-queue", default=names.TASK_QUEUE, help="task queue (default: %(default)s)")
    parser.add_argument("--profile", default=None, help="Temporal config profile (default: TEMPORAL_PROFILE)")
    parser.add_argument(
        "--metrics-address",
        default=None,
        help="serve /livez, /readyz and Prometheus /metrics on HOST:PORT "
        "(default: METALFLOW_METRICS_ADDRESS; off when neither is set)",
    )
    parser.add_argument(
        LIFELINE_ARG, type=int, default=None, help="stop when this pipe closes (given by `metalflow dev`)"
    )
    return parser.parse_args(argv)


class _WorkflowTag(logging.Filter):
    """Tags a line with the workflow it is about (`[reprovision/host-001]`), in place of the dict
    of run id, namespace, task queue and attempt the SDK appends (a 290-character line)."""

    def filter(self, record: logging.LogRecord) -> bool:
        context = getattr(record, "temporal_workflow", None) or getattr(record, "temporal_activity", None)
        workflow_id = context.get("workflow_id") if isinstance(context, dict) else None
        record.workflow_tag = f" [{workflow_id}]" if workflow_id else ""
        return True


class _ExpectedFailureInOneLine(logging.Filter):
    """An activity that ended with one of metalflow's permanent errors (wrong BMC credentials, a
    missing secret, bad input: the world's answer, raised on purpose with its cause in words) is
    one line, `Completing activity as failed: BMCAuthenticationFailed: <why>`, not the SDK's
    30-line traceback of the driver's internals; so is one an activity passes on as a plain
    `ApplicationError` of the same type, not retryable (the power cycle adds the step it reached:
    `activities/redfish/power.py`, `with_step`). Other errors keep their traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, PermanentError) or (
            isinstance(error, ApplicationError) and error.non_retryable and error.type in PERMANENT_TYPES
        ):
            record.msg = f"{record.getMessage()}: {error.type}: {error.message}"
            record.args, record.exc_info, record.exc_text = None, None, None
        return True


def configure_logging(level: int = logging.INFO) -> None:
    """The worker's log at INFO reads as a story: one line per step of each operation."""
    logging.basicConfig(level=level)
    line = LogFormatterZ("%(asctime)s %(levelname)s %(name)s: %(message)s%(workflow_tag)s")
    for handler in logging.getLogger().handlers:
        handler.setFormatter(line)  # times in ISO 8601 UTC with Z, as every time printed
        handler.addFilter(_WorkflowTag())
        handler.addFilter(_ExpectedFailureInOneLine())
    temporalio.workflow.logger.workflow_info_on_message = False
    temporalio.activity.logger.activity_info_on_message = False
    # A line per HTTP request (BMCs, the Kubernetes API) drowns the story of the operations.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    """Run the worker; return the process exit status instead of raising."""
    args = parse_args(argv)
    configure_logging()
    try:
        asyncio.run(run_worker(args.task_queue, args.profile, args.metrics_address, args.lifeline_fd))
    except (TelemetryConfigError, ValueError) as error:
        print(f"worker: configuration error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    except Exception as error:  # the status must say failure, with the reason, never a traceback dump
        print(f"worker: failed: {type(error).__name__}: {error}", file=sys.stderr)
        log.debug("worker failure", exc_info=True)
        return 1
    return 0
