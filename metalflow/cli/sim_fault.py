"""`metalflow sim fault dpu ID error|node-effect|recover` and `sim fault podgang NAME
never-available|fall-back`: rehearse failures on the simulated site.

They post to the simulator's control API (`/sim/faults/...`, simulators/control.py), which takes
the short DPU id every other command takes (`host-001-dpu-0`) as well as the DPU object's name.
Cost: one HTTP request to the simulator; nothing in Temporal.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from contracts.validation import DPUId, arg_type, safe
from drivers.statedir import STATE_DIR_HELP, state_dir_for
from metalflow.devstack.sim import read_sim_info

EXIT_OK, EXIT_FAILED = 0, 1
DPU_FAULTS = {
    "error": "the DPU goes to phase Error (Ready=False) until it is reprovisioned",
    "node-effect": "a Ready DPU goes back to Node Effect (a critical DPU service is down)",
    "recover": "a DPU put in Node Effect recovers: back to Ready (an Error lasts until a reprovision)",
}
PODGANG_FAULTS = {
    "never-available": "the PodGang (and every re-creation of it) never becomes Available",
    "fall-back": "the PodGang falls back to not Available (now, or as soon as it is Available)",
}
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def register(sim_sub: Any) -> None:
    """Add `sim fault dpu` and `sim fault podgang`."""
    fault = sim_sub.add_parser(
        "fault",
        help="rehearse a failure: a DPU in Error or Node Effect, a PodGang that never comes up",
        description="Inject a fault into the running simulated site, to rehearse what metalflow "
        "and its operator do about it.",
    )
    kinds = fault.add_subparsers(title="fault commands", metavar="KIND")
    dpu = kinds.add_parser(
        "dpu",
        help="error, node-effect or recover one DPU",
        description="; ".join(f"{name}: {text}" for name, text in DPU_FAULTS.items()) + ".",
    )
    dpu.add_argument("dpu", metavar="ID", type=arg_type(DPUId), help="DPU id, e.g. host-001-dpu-0")
    dpu.add_argument("fault", choices=DPU_FAULTS, help="what happens to it")
    dpu.add_argument(
        "--message", default="injected by metalflow sim fault", help="the Error condition's message"
    )
    dpu.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)
    dpu.set_defaults(handler=_dpu)
    podgang = kinds.add_parser(
        "podgang",
        help="make a PodGang never available, or fall back",
        description="; ".join(f"{name}: {text}" for name, text in PODGANG_FAULTS.items()) + ".",
    )
    podgang.add_argument("podgang", metavar="NAME", type=_name, help="the PodGang's name")
    podgang.add_argument("fault", choices=PODGANG_FAULTS, help="what happens to it")
    podgang.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)
    podgang.set_defaults(handler=_podgang)

    def usage(_args: argparse.Namespace) -> int:
        fault.print_help(sys.stderr)
        return 2

    fault.set_defaults(handler=usage)


def _name(text: str) -> str:
    if not _NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"invalid PodGang name {safe(text, 40)}: lower-case letters, digits, '-' and '.'"
        )
    return text


def _dpu(args: argparse.Namespace) -> int:
    body = {"message": args.message} if args.fault == "error" else None
    return _post(args.state_dir, f"dpus/{quote(args.dpu)}/{args.fault}", body, f"DPU {args.dpu}", args.fault)


def _podgang(args: argparse.Namespace) -> int:
    return _post(
        args.state_dir,
        f"podgangs/{quote(args.podgang)}/{args.fault}",
        None,
        f"PodGang {args.podgang}",
        args.fault,
    )


def _post(explicit: Path | None, path: str, body: dict[str, str] | None, subject: str, fault: str) -> int:
    state_dir = state_dir_for(explicit, "sim fault")
    try:
        url = read_sim_info(state_dir)["url"]
    except FileNotFoundError:
        print(f"metalflow sim fault: no simulator runs with state dir {state_dir}", file=sys.stderr)
        return EXIT_FAILED
    try:
        response = httpx.post(f"{url}/sim/faults/{path}", json=body, timeout=10)
    except httpx.HTTPError as err:
        print(f"metalflow sim fault: cannot reach the simulator at {url}: {err}", file=sys.stderr)
        return EXIT_FAILED
    if response.status_code != 200:
        error = response.json().get("error", response.text) if response.content else response.reason_phrase
        print(f"metalflow sim fault: {subject}: {error}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{subject}: {fault} injected")
    return EXIT_OK
