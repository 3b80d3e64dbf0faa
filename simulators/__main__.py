"""`python -m simulators serve ...`: run the simulated site until SIGINT/SIGTERM.

The product starts it through `metalflow sim up` and `metalflow dev`; it is a separate program
so that the product reaches it only over HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import logging
import os
import signal
import sys
from pathlib import Path

from simulators.app import ServeOptions, SimulatedSite
from simulators.dpf.versions import MODE_ENV as DPF_MODE_ENV
from simulators.dpf.versions import VERSION_ENV as DPF_VERSION_ENV
from simulators.dpf.versions import VERSIONS as DPF_VERSIONS
from simulators.dpf.versions import chosen as chosen_dpf_version
from simulators.dpf.versions import chosen_mode as chosen_dpf_mode
from simulators.faults import PROFILES as FAULT_PROFILES
from simulators.grove.backends import EVICTIONS, SCHEDULERS, GroveSetup
from simulators.kube.crds import CRDS_ENV, find_crd_dir
from simulators.persist import SnapshotMismatch
from simulators.site import Site, default_site, load_site
from simulators.timings import PROFILES as TIMING_PROFILES
from simulators.timings import parse_overrides, timings_for


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m simulators", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the simulated site on 127.0.0.1")
    serve.add_argument(
        "--state-dir", default=".metalflow", help="where to write site.yaml, kubeconfig, sim.json"
    )
    serve.add_argument("--port", type=int, default=8280, help="port on 127.0.0.1 (0: any free port)")
    serve.add_argument("--hosts", type=int, default=3, help="hosts in the generated site")
    serve.add_argument("--dpus-per-host", type=int, default=2, help="DPUs per host in the generated site")
    serve.add_argument(
        "--no-dpu-bmcs",
        dest="dpu_bmcs",
        action="store_false",
        help="generated site: DPUs without a BMC (none served; 10,000 hosts fit the descriptor limit)",
    )
    serve.add_argument("--site", help="a site file (YAML) to serve instead of a generated site")
    serve.add_argument("--faults", default="none", choices=FAULT_PROFILES, help="fault profile")
    serve.add_argument("--seed", type=int, default=0, help="seed for the fault profile")
    serve.add_argument(
        "--timings",
        choices=sorted(TIMING_PROFILES),
        help="phase and power timings (default: slow with --faults slow, else demo)",
    )
    serve.add_argument(
        "--timing",
        action="append",
        default=[],
        metavar="NAME=SECONDS",
        help="override one duration of the timing profile, e.g. join_deadline_seconds=20 (repeatable)",
    )
    serve.add_argument(
        "--dpf-version",
        help=f"the DPF release to play: {', '.join(DPF_VERSIONS)} (default: ${DPF_VERSION_ENV}, else 25.10)",
    )
    serve.add_argument(
        "--dpf-deployment-mode",
        help="DPF v26's deployment mode: zero-trust or host-trusted (host-trusted configures the host "
        f"network before joining the cluster; default: ${DPF_MODE_ENV}, else zero-trust)",
    )
    serve.add_argument(
        "--dpf-reboot-discovery",
        choices=("device-query", "boot-id"),
        default="device-query",
        help="how DPF v26's DPU agent finds the reboot method: device-query (MFT >= 4.36.0-95; DPF comes "
        "back to DPU Config after the host reboot) or boot-id (older MFT: one SystemLevelReset, then "
        "DPF goes on to DPU Cluster Config, or Host Network Configuration when host trusted; "
        "dpf BEHAVIOUR.md R4)",
    )
    serve.add_argument(
        "--dpf-bmc-credentials",
        choices=("ours", "per-dpu"),
        default="ours",
        help="who holds the DPU BMCs' passwords: ours (the site file's), or per-dpu: DPF 26.8 zero trust "
        "onboarded the DPUs, factory-reset their BMCs and set per-DPU passwords the site file does not "
        "hold (needs --dpf-version 26 and --initialised; dpf BEHAVIOUR.md Z1)",
    )
    serve.add_argument(
        "--grove-scheduler",
        choices=SCHEDULERS,
        default=SCHEDULERS[0],
        help="Grove's default scheduler profile (its operator ConfigMap; grove BEHAVIOUR.md K1; "
        "default: %(default)s)",
    )
    serve.add_argument(
        "--kai-stale-eviction",
        choices=EVICTIONS,
        default=EVICTIONS[0],
        help="KAI's stale-gang eviction in its default SchedulingShard: off (Grove's advice), on (KAI's "
        "default, 60 s), none (no SchedulingShard) (grove BEHAVIOUR.md K4; default: %(default)s)",
    )
    serve.add_argument(
        "--grove-migrated",
        action="store_true",
        help="a cluster migrated to PodGangMap under KAI: the workloads' first pods keep their legacy "
        "PodGroup annotation (grove#837; grove BEHAVIOUR.md K5)",
    )
    serve.add_argument(
        "--initialised",
        action="store_true",
        help="start with DPF site objects and Ready DPUs (Grove workloads are always created)",
    )
    serve.add_argument(
        "--persist",
        action="store_true",
        help="keep the site's objects across restarts in <state-dir>/sim-store.json",
    )
    serve.add_argument(
        "--crds", help=f"folder of the DPF and Grove CRDs (default: ${CRDS_ENV}, else simulators/crds)"
    )
    serve.add_argument("--log-level", default="WARNING", help="Python log level")
    serve.add_argument(
        "--lifeline-fd",
        type=int,
        help="read end of a pipe from the parent: stop when it closes (the parent died)",
    )
    return parser


def _site_from(args: argparse.Namespace) -> Site:
    if args.site:
        return load_site(Path(args.site))
    return default_site(args.hosts, args.dpus_per_host, dpu_bmcs=args.dpu_bmcs)


def _watch_lifeline(fd: int, stop: asyncio.Event) -> None:
    """Set `stop` once the parent's end of the lifeline pipe closed (it exited, even by SIGKILL).

    The same protocol as metalflow's `devstack/lifeline.py`, written out here because the
    simulator imports nothing of the product. Cost: one loop reader; no polling.
    """
    loop = asyncio.get_running_loop()
    os.set_blocking(fd, False)

    def readable() -> None:
        try:
            if os.read(fd, 64):
                return  # the parent never writes; only end-of-file matters
        except (BlockingIOError, InterruptedError):
            return
        loop.remove_reader(fd)
        os.close(fd)
        stop.set()

    loop.add_reader(fd, readable)


async def _serve(site: Site, options: ServeOptions, lifeline_fd: int | None = None) -> None:
    simulated = SimulatedSite(site, options)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    if lifeline_fd is not None:
        _watch_lifeline(lifeline_fd, stop)
    url = await simulated.start()
    print(f"simulated site {site.name!r} serving on {url} ({len(site.hosts)} hosts)", flush=True)
    if simulated.restored is not None:
        print(f"restored {simulated.restored} objects from {options.state_dir}/sim-store.json", flush=True)
    try:
        await stop.wait()
    finally:
        await simulated.stop()


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        site = _site_from(args)
        timings = timings_for(
            args.timings or ("slow" if args.faults == "slow" else "demo"), **parse_overrides(args.timing)
        )
        dpf_version = chosen_dpf_version(args.dpf_version)
        dpf_mode = chosen_dpf_mode(args.dpf_deployment_mode, dpf_version)
        if args.dpf_bmc_credentials == "per-dpu" and not (
            dpf_version == "26" and dpf_mode == "zero-trust" and args.initialised
        ):
            raise ValueError("--dpf-bmc-credentials per-dpu is DPF 26.8 zero trust: with --dpf-version 26, "
                             "zero-trust and --initialised")  # fmt: skip
        if args.dpf_reboot_discovery != "device-query" and dpf_version == "25.10":
            raise ValueError(f"--dpf-reboot-discovery {args.dpf_reboot_discovery} is DPF v26's agent: "
                             "serve --dpf-version 26 or 26.4-rc.3")  # fmt: skip
    except ValueError as err:
        print(f"simulators: {err}", file=sys.stderr)
        return 2
    try:
        crd_dir = find_crd_dir(args.crds)
    except FileNotFoundError as err:
        print(f"simulators: {err}", file=sys.stderr)
        return 2
    options = ServeOptions(
        state_dir=Path(args.state_dir),
        crd_dir=crd_dir,
        port=args.port,
        faults=args.faults,
        seed=args.seed,
        timings=timings,
        initialised=args.initialised,
        persist=args.persist,
        dpf_version=dpf_version,
        dpf_deployment_mode=dpf_mode,
        grove=GroveSetup(args.grove_scheduler, args.kai_stale_eviction, args.grove_migrated),
        dpf_bmc_credentials=args.dpf_bmc_credentials,
        dpf_reboot_discovery=args.dpf_reboot_discovery,
    )
    try:
        asyncio.run(_serve(site, options, args.lifeline_fd))
    except SnapshotMismatch as err:
        print(f"simulators: {err}; start afresh with `metalflow dev --reset`", file=sys.stderr)
        return 2
    except OSError as err:
        # Only a port taken or forbidden is helped by another --port (not running out of descriptors).
        hint = "; choose another --port" if err.errno in (errno.EADDRINUSE, errno.EACCES) else ""
        print(f"simulators: cannot serve on 127.0.0.1:{args.port}: {err.strerror}{hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
