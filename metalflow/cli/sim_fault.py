"""`metalflow sim fault bmc|dpu|podgang ...`: rehearse failures on the simulated site, by name.

    metalflow sim fault bmc ID wrong-credentials|rotate-after-forceoff|unreachable|clear
    metalflow sim fault bmc ID power-on-during-power-down|power-off-at-rest
    metalflow sim fault dpu ID error|node-effect|install-fails|recover
    metalflow sim fault podgang NAME never-available|fall-back|clear

Every fault can be undone: `clear` (a BMC, a PodGang), `recover` (a DPU's node-effect, or an
install-fails not yet hit). A DPU in Error stays there until it is reprovisioned, as on DPF.
Each fault's behaviour and the real-world report it rehearses: simulators/redfish/BEHAVIOUR.md
(F1-F4, F6, F7) and simulators/dpf/BEHAVIOUR.md (E1, F5).

They post to the simulator's control API (`/sim/faults/...`, simulators/control.py), which takes
the ids every other command takes: a host id for its BMC (`host-002`), a DPU id for its BMC or
its DPU object (`host-001-dpu-0`), as well as the DPU object's name.
Cost: one HTTP request to the simulator; nothing in Temporal.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from pathlib import Path
from typing import Any
from urllib.parse import quote

from contracts.validation import DPUId, arg_type, safe
from drivers.statedir import STATE_DIR_HELP, state_dir_for
from metalflow.cli import exits
from metalflow.devstack.sim import read_sim_info

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_UNREACHABLE = exits.OK, exits.FAILED, exits.USAGE, exits.UNREACHABLE
BMC_FAULTS = {
    "wrong-credentials": "the BMC's password changes now and nobody stored the new one: every "
    "login with the stored credentials is refused (401)",
    "rotate-after-forceoff": "the same, right after the BMC next accepts a ForceOff (a secrets "
    "store rotating the password while metalflow has the host off)",
    "unreachable": "the BMC answers nothing: it stops listening and drops its open connections",
    "power-on-during-power-down": "another actor (a power manager that wants the host On) turns "
    "the host On 1 s after each ForceOff took it Off, until cleared",
    "power-off-at-rest": "another actor turns the host Off once, now (a ForceOff nobody here "
    "sent); only a host that is On and in no transition",
    "clear": "undo the BMC's faults: the stored credentials work again, it answers again, no "
    "other actor turns the host On",
}
DPU_FAULTS = {
    "error": "the DPU goes to phase Error (Ready=False) until it is reprovisioned",
    "node-effect": "a Ready DPU goes back to Node Effect (a critical DPU service is down)",
    "install-fails": "the DPU's next install (now, or at its next reprovision) ends in Error "
    "(FailToInstall) at the end of OS Installing; a reprovision installs it again",
    "recover": "undo node-effect (back to Ready) or an install-fails not yet hit (an Error lasts "
    "until a reprovision)",
}
PODGANG_FAULTS = {
    "never-available": "the PodGang (and every re-creation of it) never becomes Available",
    "fall-back": "the PodGang falls back to not Available (now, or as soon as it is Available)",
    "clear": "forget the PodGang's faults: its next pods behave as usual",
}
# The words that undo a fault: what the command prints instead of "injected".
UNDO = {"clear": "cleared", "recover": "recovered"}
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_BMC_ID = re.compile(r"[A-Za-z0-9][-A-Za-z0-9_.]{0,252}")


def _listing() -> str:
    lines = ["Inject a fault into the running simulated site by name, to rehearse what metalflow and its",
             "operator do about it; each can be undone. The faults:", ""]  # fmt: skip
    for kind, faults in (("bmc ID", BMC_FAULTS), ("dpu ID", DPU_FAULTS), ("podgang NAME", PODGANG_FAULTS)):
        for name, text in faults.items():
            lines.append(
                textwrap.fill(f"{kind} {name}: {text}", 94, initial_indent="  ", subsequent_indent="      ")
            )
    return "\n".join(lines)


def register(sim_sub: Any) -> None:
    """Add `sim fault bmc`, `sim fault dpu` and `sim fault podgang`."""
    fault = sim_sub.add_parser(
        "fault",
        help="rehearse a failure by name: wrong BMC credentials, an unreachable BMC, a DPU whose "
        "install fails, ...",
        description=_listing(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    kinds = fault.add_subparsers(title="fault commands", metavar="KIND")
    bmc = kinds.add_parser(
        "bmc",
        help="wrong-credentials, rotate-after-forceoff, unreachable, power-on-during-power-down, "
        "power-off-at-rest or clear one BMC",
        description="; ".join(f"{name}: {text}" for name, text in BMC_FAULTS.items())
        + ". ID is a host id (its BMC; on a multi-system BMC, every host it serves) or a DPU id "
        "(the DPU's BMC).",
    )
    bmc.add_argument("bmc", metavar="ID", type=_bmc_id, help="host or DPU id, e.g. host-002")
    bmc.add_argument("fault", choices=BMC_FAULTS, help="what happens to it")
    bmc.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)
    bmc.set_defaults(handler=_bmc)
    dpu = kinds.add_parser(
        "dpu",
        help="error, node-effect, install-fails or recover one DPU",
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
        help="make a PodGang never available, or fall back; or clear that",
        description="; ".join(f"{name}: {text}" for name, text in PODGANG_FAULTS.items()) + ".",
    )
    podgang.add_argument("podgang", metavar="NAME", type=_name, help="the PodGang's name")
    podgang.add_argument("fault", choices=PODGANG_FAULTS, help="what happens to it")
    podgang.add_argument("--state-dir", type=Path, default=None, help=STATE_DIR_HELP)
    podgang.set_defaults(handler=_podgang)

    def usage(_args: argparse.Namespace) -> int:
        fault.print_help(sys.stderr)
        return EXIT_USAGE

    fault.set_defaults(handler=usage)


def _name(text: str) -> str:
    if not _NAME.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"invalid PodGang name {safe(text, 40)}: lower-case letters, digits, '-' and '.'"
        )
    return text


def _bmc_id(text: str) -> str:
    if not _BMC_ID.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"invalid host or DPU id {safe(text, 40)}: letters, digits, '-', '_' and '.'"
        )
    return text


def _bmc(args: argparse.Namespace) -> int:
    return _post(
        args.state_dir, f"bmcs/{quote(args.bmc)}/{args.fault}", None, f"BMC of {args.bmc}", args.fault
    )


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
        return EXIT_USAGE
    import httpx  # here, not at the top: building the parser needs none of it

    try:
        response = httpx.post(f"{url}/sim/faults/{path}", json=body, timeout=10)
    except httpx.HTTPError as err:
        print(f"metalflow sim fault: cannot reach the simulator at {url}: {err}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if response.status_code != 200:
        error = response.json().get("error", response.text) if response.content else response.reason_phrase
        print(f"metalflow sim fault: {subject}: {error}", file=sys.stderr)
        return refusal_status(response.status_code)
    print(f"{subject}: {UNDO.get(fault, fault + ' injected')}")
    return EXIT_OK


def refusal_status(http_status: int) -> int:
    """The exit status of the simulator's refusal: 2 it has no such object (404), else 1 (what
    the object is in now refuses it, e.g. a recover of a DPU with no failure injected: 400, 409);
    bad words are argparse's, before anything is asked."""
    return EXIT_USAGE if http_status == 404 else EXIT_FAILED
