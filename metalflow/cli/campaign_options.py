"""The campaign options `campaign start` and `campaign schedule` share, and their parsing into a
`CampaignInput`: every bad value is refused here, naming it, before anything is started."""

from __future__ import annotations

import argparse
import re
from typing import Any

from pydantic import ValidationError

from contracts.models.campaign import (
    KINDS,
    CampaignInput,
    CampaignPolicy,
    FailureBudget,
    HostSelection,
    Limits,
    TargetKind,
    Window,
    zone,
)
from contracts.models.campaign_target import pointing_kinds
from contracts.models.host import OperationPolicy
from contracts.validation import Reason, arg_type

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}
_CLOCK = re.compile(r"([01]?\d|2[0-3]):([0-5]\d)")


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be 1 or more")
    return value


def count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be 0 or more")
    return value


def duration(text: str) -> float:
    """`90`, `90s`, `30m`, `2h`, `1d` in seconds."""
    match = _DURATION.fullmatch(text.strip().lower())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: give e.g. 90s, 30m, 2h or 1d")
    return float(match.group(1)) * _UNITS[match.group(2)]


def duration_words(seconds: float) -> str:
    """A span as `--every` takes it, in the largest unit it is a whole number of: `30d`, `24h`
    (a day is said in hours, as one writes it), `90m`, `45s`; the inverse of `duration`."""
    whole = round(seconds)
    if whole != seconds or whole <= 0:
        return f"{seconds:g}s"
    if whole % 86400 == 0 and whole > 86400:
        return f"{whole // 86400}d"
    for unit, size in (("h", 3600), ("m", 60)):
        if whole % size == 0:
            return f"{whole // size}{unit}"
    return f"{whole}s"


def _day(text: str) -> int:
    key = text.strip().lower()[:3]
    if key not in DAYS:
        raise argparse.ArgumentTypeError(f"{text!r} is not a day: give mon..sun")
    return DAYS.index(key)


FAILURE_BUDGET_WORDS = (
    "N halts the campaign once more than N hosts failed, X% once more than X% of the hosts selected "
    "(rounded down: 10% of 100 hosts halts at the 11th failure); default 0: the first failure halts"
)
"""`--failure-budget`'s help, and README's words for it (tests/fast/test_readme_failure_budget.py)."""
_SPAN = re.compile(r"\d{1,2}:\d\d-\d{1,2}:\d\d")


def window(text: str, default_tz: str = "UTC") -> Window:
    """`[DAYS ]HH:MM-HH:MM[ ZONE]`, DAYS like `sat,sun` or `mon-fri`, ZONE an IANA time zone
    (default: `default_tz`, the `--tz` option); an end before the start runs past midnight."""
    tz = default_tz
    body, _, last = text.strip().rpartition(" ")
    if body and not _SPAN.fullmatch(last):
        tz, text = last, body
    days_text, _, span = text.strip().rpartition(" ")
    start_text, sep, end_text = span.partition("-")
    start, end = _CLOCK.fullmatch(start_text), _CLOCK.fullmatch(end_text)
    if not sep or not start or not end:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give [DAYS ]HH:MM-HH:MM[ ZONE], e.g. 'sat,sun 02:00-06:00 Europe/Berlin'"
        )
    days: list[int] = []
    for part in filter(None, days_text.replace(" ", "").split(",")):
        first, dash, last = part.partition("-")
        if dash:
            a, b = _day(first), _day(last)
            days += [d % 7 for d in range(a, b + 1 if b >= a else b + 8)]
        else:
            days.append(_day(part))
    try:
        return Window(
            days=tuple(sorted(set(days))) if days else tuple(range(7)),
            start_minute=int(start.group(1)) * 60 + int(start.group(2)),
            end_minute=int(end.group(1)) * 60 + int(end.group(2)),
            tz=tz,
        )
    except ValidationError as err:
        raise argparse.ArgumentTypeError(f"window {text!r}: {err.errors()[0]['msg']}") from None


def _window_text(text: str) -> str:
    window(text)  # refused at once when malformed (its zone is checked with --tz later)
    return text


def budget(text: str) -> FailureBudget:
    """`N` failures, or `X%` of the hosts selected (rounded down)."""
    try:
        if text.endswith("%"):
            return FailureBudget(max_percent=float(text[:-1]))
        return FailureBudget(max_failures=int(text))
    except (ValueError, ValidationError):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give a number of hosts (e.g. 2) or a share (e.g. 5%)"
        ) from None


def selector(text: str) -> dict[str, str]:
    pairs = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"{text!r}: give LABEL=VALUE[,LABEL=VALUE...], e.g. rack=r01")
        pairs[key.strip()] = value.strip()
    return pairs


def host_list(text: str) -> tuple[str, ...]:
    hosts = tuple(h.strip() for h in text.split(",") if h.strip())
    if not hosts:
        raise argparse.ArgumentTypeError("give at least one host id")
    return hosts


def add_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """The selection, the target and the pacing options."""
    which = parser.add_mutually_exclusive_group(required=required)
    which.add_argument("--all", action="store_true", help="every host of the site inventory")
    which.add_argument("--hosts", type=host_list, metavar="H1,H2", help="these hosts")
    which.add_argument(
        "--selector", type=selector, metavar="LABELS", help="hosts with these labels (k=v,...)"
    )
    which.add_argument("--group", metavar="G", help="the hosts of this inventory group")
    target = parser.add_mutually_exclusive_group(required=required)
    for kind, spec in KINDS.items():  # one option per target kind (contracts/models/campaign_target.py)
        if spec.value:
            target.add_argument(f"--{kind}", dest=_dest(kind), metavar=spec.metavar, help=spec.help)
        else:
            target.add_argument(f"--{kind}", dest=_dest(kind), action="store_true", help=spec.help)
    imaged = "/".join(f"--{k}" for k, spec in KINDS.items() if spec.image)
    parser.add_argument("--image", metavar="URI", help=f"the firmware image (with {imaged})")
    pointing = "/".join(f"--{k}" for k in pointing_kinds())
    parser.add_argument("--deployment", help=f"the DPUDeployment of {pointing} (default: the --group)")
    parser.add_argument(
        "--canary-deployment", metavar="NAME",
        help=f"{pointing}: the canary's own DPUDeployment, pointed first; its hosts are the canary",
    )  # fmt: skip
    parser.add_argument(
        "--whole-deployment", action="append", metavar="NAME",
        help=f"{pointing}: this DPUDeployment (--deployment's or --canary-deployment's; repeatable) may "
        "select hosts outside the campaign (they turn Outdated), never one another running campaign holds",
    )  # fmt: skip
    parser.add_argument(
        "--keep-changes", action="store_true",
        help=f"{pointing}: keep the DPUDeployments pointed on abort or a failed canary (default: restore)",
    )  # fmt: skip
    parser.add_argument("--canary", type=count, default=1, help="hosts of the canary batch (default 1)")
    parser.add_argument("--batch-size", type=positive_int, default=10, help="hosts per batch (default 10)")
    parser.add_argument("--max-in-flight", type=positive_int, default=10, help="hosts at once (default 10)")
    parser.add_argument(
        "--max-per-group", type=count, default=0, help="hosts at once per group (0: no limit)"
    )
    parser.add_argument(
        "--max-per-bmc", type=count, default=1, help="hosts at once per BMC endpoint (default 1)"
    )
    parser.add_argument(
        "--soak",
        type=duration,
        default=0.0,
        metavar="DURATION",
        help="wait after the canary and after each batch before the next batch starts",
    )
    parser.add_argument(
        "--window",
        type=_window_text,
        action="append",
        metavar="SPEC",
        help="maintenance window, e.g. 'sat,sun 02:00-06:00' (in --tz) or '... 02:00-06:00 Europe/Berlin'",
    )
    parser.add_argument(
        "--tz", metavar="ZONE", default="UTC",
        help="IANA time zone of the windows without one (and of --cron): default %(default)s",
    )  # fmt: skip
    parser.add_argument(
        "--failure-budget", type=budget, default=FailureBudget(max_failures=0), metavar="N|X%",
        help=FAILURE_BUDGET_WORDS.replace("%", "%%"),
    )  # fmt: skip
    parser.add_argument(
        "--assigned", choices=("skip", "wait-for-approval"), default="skip",
        help="hosts with an instance assigned: skip them, or wait for their approval (default skip)",
    )  # fmt: skip
    parser.add_argument(
        "--power-down-wait", type=float, metavar="SECONDS",
        help="reprovisions: seconds between power Off and On (default: each host's policy)",
    )  # fmt: skip
    parser.add_argument(
        "--dpu-error-reprovisions", type=count, metavar="N",
        help="reprovisions: a DPU in Error is reprovisioned this often before the host fails",
    )  # fmt: skip
    parser.add_argument("--reason", type=arg_type(Reason), default="", help="why, recorded with the campaign")


def campaign_input(name: str, args: argparse.Namespace) -> CampaignInput:
    """The campaign's input from the parsed options.

    Raises:
        ValueError: The options do not make a campaign (the message says which).
    """
    selection = HostSelection(
        all=args.all, hosts=args.hosts or (), selector=args.selector or {}, group=args.group or ""
    )
    kind, value = _target(args)
    spec = KINDS[kind]
    if args.image and not spec.image:
        raise ValueError(f"--image goes with {' or '.join(f'--{k}' for k, s in KINDS.items() if s.image)}")
    deployment = args.deployment or (args.group if spec.points_deployment else "") or ""
    if spec.points_deployment and not deployment:
        raise ValueError(f"--{kind} needs --deployment (or --group, whose DPUDeployment it is)")
    if args.canary_deployment and not spec.points_deployment:
        raise ValueError(f"--canary-deployment goes with {' or '.join(f'--{k}' for k in pointing_kinds())}")
    zone(args.tz)
    try:
        windows = tuple(window(text, args.tz) for text in args.window or ())
    except argparse.ArgumentTypeError as err:
        raise ValueError(str(err)) from None
    values: dict[str, Any] = {
        "name": name,
        # a dict, validated with the rest: a bad target is a ValueError naming it, never pydantic's text
        "target": {
            "kind": kind,
            "value": value,
            "image_uri": args.image or "",
            "deployment": deployment,
            "canary_deployment": args.canary_deployment or "",
            "whole_deployment": tuple(args.whole_deployment or ()),
        },
        "selection": selection,
        "canary": args.canary,
        "limits": Limits(
            batch_size=args.batch_size,
            max_in_flight=args.max_in_flight,
            max_per_group=args.max_per_group,
            max_per_bmc=args.max_per_bmc,
        ),
        "soak_seconds": args.soak,
        "windows": windows,
        "budget": args.failure_budget,
        "policy": CampaignPolicy(assigned=args.assigned, keep_changes=args.keep_changes),
        "requested_by": args.by,
        "reason": args.reason,
        "host_policy": _host_policy(args),
    }
    try:
        return CampaignInput.model_validate(values)
    except ValidationError as err:
        raise ValueError(
            "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in err.errors())
        ) from None


def _host_policy(args: argparse.Namespace) -> OperationPolicy | None:
    changes: dict[str, Any] = {}
    if args.power_down_wait is not None:
        changes["power_down_wait_seconds"] = args.power_down_wait
    if args.dpu_error_reprovisions is not None:
        changes["max_dpu_error_reprovisions"] = args.dpu_error_reprovisions
    return OperationPolicy.model_validate(changes) if changes else None


def _dest(kind: TargetKind) -> str:
    return kind.value.replace("-", "_")


def _target(args: argparse.Namespace) -> tuple[TargetKind, str]:
    for kind, spec in KINDS.items():
        given = getattr(args, _dest(kind))
        if not given:
            continue
        if spec.image and not args.image:
            raise ValueError(f"--{kind} needs --image URI")
        return kind, given if spec.value else ""
    usages = [
        f"--{k}" + (f" {s.metavar}" if s.value else "") + (" --image URI" if s.image else "")
        for k, s in KINDS.items()
    ]
    raise ValueError(f"give a target: {', '.join(usages[:-1])} or {usages[-1]}")
