"""`metalflow sim ...`: the simulated site, for demos, tests and rehearsing a campaign on a twin.

metalflow sim up [--hosts N] [--dpus-per-host K] [--site FILE] [--faults PROFILE] [--seed S]
metalflow sim down
metalflow sim violations [--json]
metalflow sim power-log HOST [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, NoReturn

import yaml

from contracts.validation import DPUsPerHost, HostId, Hosts, Port, Seed, arg_type
from contracts.wording import plural
from drivers.statedir import STATE_DIR_HELP, state_dir_for
from metalflow.cli import exits, sim_fault
from metalflow.devstack.claim import running_stack
from metalflow.devstack.process import ProcessFailedError
from metalflow.devstack.sim import (
    DEFAULT_SIM_PORT,
    FAULT_PROFILES,
    SIM_READY_TIMEOUT,
    TIMING_PROFILES,
    SiteOptions,
    read_sim_info,
    simulator_process,
)
from metalflow.runtime.ports import PortInUseError, ensure_free

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = exits.OK, exits.FAILED, exits.USAGE, exits.UNREACHABLE


def add_site_options(parser: argparse.ArgumentParser) -> None:
    """The options that choose the simulated site; shared with `metalflow dev`."""
    group = parser.add_argument_group("simulated site")
    group.add_argument(
        "--hosts", type=arg_type(Hosts, number=int), default=3, help="hosts in the generated site (default 3)"
    )
    group.add_argument(
        "--dpus-per-host",
        type=arg_type(DPUsPerHost, number=int),
        default=2,
        help="DPUs per generated host, 0 to 16 (default 2)",
    )
    group.add_argument(
        "--site", type=Path, metavar="FILE", help="serve this site file instead of a generated site"
    )
    group.add_argument(
        "--faults", choices=FAULT_PROFILES, default="none", help="fault profile (default none)"
    )
    group.add_argument(
        "--seed", type=arg_type(Seed, number=int), default=0, help="seed of the fault profile (default 0)"
    )
    group.add_argument(
        "--timings",
        choices=TIMING_PROFILES,
        help="phase and power timings (default: slow with --faults slow, else demo)",
    )
    group.add_argument(
        "--initialised", action="store_true", help="start with DPF site objects and Ready DPUs"
    )
    group.add_argument(
        "--sim-port",
        type=arg_type(Port, number=int),
        default=DEFAULT_SIM_PORT,
        help=f"simulator port (default {DEFAULT_SIM_PORT})",
    )


def site_options(args: argparse.Namespace) -> SiteOptions:
    return SiteOptions(
        hosts=args.hosts,
        dpus_per_host=args.dpus_per_host,
        site_file=args.site.resolve() if args.site else None,
        faults=args.faults,
        seed=args.seed,
        timings=args.timings,
        initialised=args.initialised,
        port=args.sim_port,
    )


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = subparsers.add_parser(
        "sim",
        help="run the simulated site (Kubernetes API with DPF and Grove, BMCs)",
        description="Serve a simulated site on 127.0.0.1 (a Kubernetes-compatible API with DPF and "
        "Grove controllers, one Redfish BMC per host and DPU), read what it recorded, and rehearse "
        "faults. Every command finds the site through the state dir.",
    )
    sim_sub = sim.add_subparsers(title="sim commands", metavar="COMMAND")

    up = sim_sub.add_parser(
        "up",
        help="serve a simulated site on 127.0.0.1 until Ctrl-C (or --detach)",
        description="Serve a simulated site on 127.0.0.1 and write site.yaml, kubeconfig, the BMC "
        "credentials and sim.json into the state dir; until Ctrl-C, or in the background with --detach.",
    )
    add_site_options(up)
    up.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)
    up.add_argument(
        "--detach", action="store_true", help="leave it running in the background; stop with sim down"
    )
    up.set_defaults(handler=_up)

    down = sim_sub.add_parser(
        "down",
        help="stop a simulator started with sim up --detach",
        description="Stop the simulator whose sim.json is in the state dir (SIGTERM; it removes sim.json).",
    )
    down.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)
    down.set_defaults(handler=_down)

    violations = sim_sub.add_parser(
        "violations",
        help="protocol violations the simulator recorded",
        description="The protocol violations the running simulator recorded (requests a real BMC or "
        "DPF would refuse or misread: a power cycle DPF did not ask for, a hold released twice, ...).",
    )
    violations.add_argument("--json", action="store_true", help="print them as a JSON list")
    violations.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)
    violations.set_defaults(handler=_violations)

    power_log = sim_sub.add_parser(
        "power-log",
        help="a host's power transitions, as its BMC logged them",
        description="HOST's power transitions as its simulated BMC logged them; a power cycle is one "
        "transition to Off. The log is kept across a restart of the simulator on the same state dir "
        "(its newest 200 entries, as a BMC keeps its event log), so a restart in the middle of a "
        "power cycle shows the Off before it and the On after it; `metalflow dev --reset` empties it.",
    )
    power_log.add_argument("host", type=arg_type(HostId), help="host id, e.g. host-001")
    power_log.add_argument("--json", action="store_true", help="print them as a JSON list")
    power_log.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)
    power_log.set_defaults(handler=_power_log)

    sim_fault.register(sim_sub)

    def usage(_args: argparse.Namespace) -> int:
        sim.print_help(sys.stderr)
        return EXIT_USAGE

    sim.set_defaults(handler=usage)


def describe_site(state_dir: Path, info: dict[str, Any]) -> str:
    """Where everything is, for a person: printed by `sim up` and `dev`."""
    site = yaml.safe_load(Path(info["site"]).read_text())
    hosts = site.get("hosts", [])
    lines = [
        f"Simulated site {site.get('name', 'default')!r}: {plural(len(hosts), 'host')}, "
        f"faults {info.get('faults', 'none')}",
        f"  Kubernetes API  {info.get('kube_url') or info['url']}   "
        f"(kubectl --kubeconfig {info['kubeconfig']} get dpus)",
        f"  site file       {info['site']}",
        f"  credentials     {state_dir.resolve() / 'credentials'} (one file per BMC, mode 0600)",
    ]
    for host in hosts[:10]:
        dpus = ", ".join(f"{d['id']} ({d.get('model', 'BF3')})" for d in host.get("dpus", []))
        bmc = host["bmc"]
        lines.append(f"  {host['id']:<10} BMC {bmc['endpoint']} [{bmc.get('profile', '')}]  DPUs: {dpus}")
    if len(hosts) > 10:
        lines.append(f"  ... and {len(hosts) - 10} more hosts in the site file")
    return "\n".join(lines)


def _up(args: argparse.Namespace) -> int:
    state_dir = state_dir_for(args.state_dir, "sim up")
    options = site_options(args)
    stack = running_stack(state_dir)
    if stack is not None:  # it would overwrite the stack's site.yaml, kubeconfig and credentials
        print(
            f"metalflow sim up: state dir {state_dir.resolve()} is in use by metalflow dev "
            f"({stack.describe()}), which runs its own simulated site; give sim up another --state-dir",
            file=sys.stderr,
        )
        return EXIT_USAGE
    try:
        ensure_free("127.0.0.1", options.port, "simulated site", "--sim-port")
    except PortInUseError as err:
        print(f"metalflow sim up: {err}", file=sys.stderr)
        return EXIT_USAGE
    return asyncio.run(_run_up(state_dir, options, detach=args.detach))


async def _run_up(state_dir: Path, options: SiteOptions, *, detach: bool) -> int:
    process = simulator_process(state_dir, options, detached=detach)
    await process.start()
    try:
        await process.wait_ready(SIM_READY_TIMEOUT)
    except ProcessFailedError as err:
        await process.stop()
        print(f"metalflow sim up: {err}", file=sys.stderr)
        return EXIT_FAILED
    print(describe_site(state_dir, read_sim_info(state_dir)), flush=True)
    if detach:
        print(f"Running in the background (pid {process.pid}); stop it with: metalflow sim down", flush=True)
        return EXIT_OK
    print("Press Ctrl-C to stop.", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    exited = asyncio.ensure_future(process.wait_exit())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({exited, stopping}, return_when=asyncio.FIRST_COMPLETED)
    stopping.cancel()
    if exited.done():
        print(
            f"metalflow sim up: the simulator exited with {exited.result()}; see {process.log_path}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    await process.stop()
    return EXIT_OK


def _down(args: argparse.Namespace) -> int:
    args.state_dir = state_dir_for(args.state_dir, "sim down")
    try:
        pid = int(read_sim_info(args.state_dir)["pid"])
    except FileNotFoundError:
        print(f"metalflow sim down: no simulator runs with state dir {args.state_dir}", file=sys.stderr)
        return EXIT_USAGE
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    while (args.state_dir / "sim.json").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    (args.state_dir / "sim.json").unlink(missing_ok=True)
    print(f"stopped the simulator (pid {pid})")
    return EXIT_OK


def _get(state_dir: Path, path: str, command: str) -> Any:
    """The simulator's answer to GET `path`; else one line on stderr and the command's exit:
    2 no simulator runs there, or it knows no such object; 3 it cannot be reached; 1 any other
    refusal."""
    try:
        url = read_sim_info(state_dir)["url"]
    except FileNotFoundError:
        _exit(
            f"metalflow sim {command}: no simulator runs with state dir {state_dir} "
            "(start one: metalflow sim up)",
            EXIT_USAGE,
        )
    import httpx  # here, not at the top: building the parser needs none of it

    try:
        response = httpx.get(f"{url}{path}", timeout=10)
    except httpx.HTTPError as err:
        _exit(f"metalflow sim {command}: cannot reach the simulator at {url}: {err}", EXIT_UNREACHABLE)
    if response.status_code != 200:
        error = response.json().get("error", response.text) if response.content else response.reason_phrase
        _exit(f"metalflow sim {command}: {error}", sim_fault.refusal_status(response.status_code))
    return response.json()


def _exit(message: str, status: int) -> NoReturn:
    print(message, file=sys.stderr)
    raise SystemExit(status)


def _violations(args: argparse.Namespace) -> int:
    found = _get(state_dir_for(args.state_dir, "sim violations"), "/sim/violations", "violations")
    if args.json:
        print(json.dumps(found, indent=2))
    elif not found:
        print("no violations recorded")
    else:
        for v in found:
            print(f"{v['time']}  {v['kind']:<45} {v['subject']}: {v['detail']}")
    return EXIT_OK


def _power_log(args: argparse.Namespace) -> int:
    state_dir = state_dir_for(args.state_dir, "sim power-log")
    entries = _get(state_dir, f"/sim/hosts/{args.host}/power-log", "power-log")
    if args.json:
        print(json.dumps(entries, indent=2))
    elif not entries:
        print(f"{args.host}: no power transitions")
    else:
        for e in entries:
            print(f"{e['time']}  {e['from']:>3} -> {e['to']:<3}  {e.get('reset_type') or ''}")
    return EXIT_OK
