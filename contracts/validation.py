"""Sane bounds for what people type: one set of rules for the CLI and the workflow input models.

A number that reaches a workflow decides how long a host stays powered off or how often it is
power-cycled, and a string is stored in history and echoed to terminals; so every duration and
count has a range (NaN and infinity are never in it), and ids and free text have a length limit
and a character set without control characters (ANSI escapes would rewrite an operator's
terminal when `host status` echoes them).

The models use the `Annotated` types (`PowerDownWait`, `Retries`, `Requester`, ...); the CLI uses
`arg_type(...)` over the same types, so both refuse the same values with the same words. Bounds
only ever apply to inputs and requests: status and result models stay unconstrained, so a value
an older release accepted can still be read back from history.

Cost per host: none (validation runs once per request, in the client or the workflow's decode).
"""

from __future__ import annotations

import argparse
import re
import unicodedata
from collections.abc import Callable
from typing import Annotated, Any, Final

from pydantic import AfterValidator, Field, TypeAdapter, ValidationError

MINUTE: Final = 60.0
HOUR: Final = 3600.0
DAY: Final = 86400.0

ID_MAX: Final = 63  # a Kubernetes label value; DPF object names embed host and DPU ids
INSTANCE_MAX: Final = 128
REQUESTER_MAX: Final = 128
REASON_MAX: Final = 500

_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _printable(kind: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        bad = next((c for c in value if unicodedata.category(c).startswith("C")), None)
        if bad is not None:
            raise ValueError(f"{kind} contains the control character {bad!r}: use printable text")
        return value

    return check


def _identifier(kind: str) -> Callable[[str], str]:
    def check(value: str) -> str:
        _printable(kind)(value)
        if not _ID.fullmatch(value):
            raise ValueError(
                f"invalid {kind}: use letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
        return value

    return check


# -- durations (seconds) and counts of policies and CLI options -------------------------------
# NaN and infinity are refused by `allow_inf_nan=False`; each upper bound is far beyond any real
# need and far below harm (a power-down wait of 1e12 s left a host off, beyond abort).
PowerDownWait = Annotated[float, Field(ge=0, le=HOUR, allow_inf_nan=False)]  # between Off and On
PowerDownRead = Annotated[float, Field(ge=1, le=HOUR, allow_inf_nan=False)]  # a power read during that wait
# Seconds before each power-on attempt after a refused one (then a person is asked): never two
# attempts milliseconds apart, never more than five blind ones.
PowerOnRetryDelay = Annotated[float, Field(ge=0.5, le=600, allow_inf_nan=False)]
PowerOnRetries = Annotated[tuple[PowerOnRetryDelay, ...], Field(min_length=1, max_length=5)]
StepTimeout = Annotated[float, Field(gt=0, le=7 * DAY, allow_inf_nan=False)]  # a stalled reboot or phase
ApprovalTimeout = Annotated[float, Field(gt=0, le=30 * DAY, allow_inf_nan=False)]
ApprovalWindow = Annotated[float, Field(ge=0, le=30 * DAY, allow_inf_nan=False)]
ReprovisionAfter = Annotated[float, Field(gt=0, le=30 * DAY, allow_inf_nan=False)]
HoldBackAfterAbort = Annotated[float, Field(ge=0, le=30 * DAY, allow_inf_nan=False)]  # 0: none
ForceAfter = Annotated[float, Field(gt=0, le=DAY, allow_inf_nan=False)]
PowerTimeout = Annotated[float, Field(gt=0, le=HOUR, allow_inf_nan=False)]  # one BMC power transition
PowerSettle = Annotated[float, Field(ge=0, le=5 * MINUTE, allow_inf_nan=False)]  # a lagging PowerState
Grace = Annotated[float, Field(gt=0, le=HOUR, allow_inf_nan=False)]  # GracefulShutdown, then ForceOff
RequestTimeout = Annotated[float, Field(gt=0, le=10 * MINUTE, allow_inf_nan=False)]  # one HTTP request
Retries = Annotated[int, Field(ge=0, le=100)]
Hosts = Annotated[int, Field(ge=1, le=100_000)]
DPUsPerHost = Annotated[int, Field(ge=0, le=16)]
Seed = Annotated[int, Field(ge=0, le=2**32 - 1)]
Port = Annotated[int, Field(ge=1, le=65_535)]

# -- strings -------------------------------------------------------------------------------
HostId = Annotated[str, Field(min_length=1, max_length=ID_MAX), AfterValidator(_identifier("host id"))]
DPUId = Annotated[str, Field(min_length=1, max_length=ID_MAX), AfterValidator(_identifier("DPU id"))]
InstanceId = Annotated[
    str, Field(min_length=1, max_length=INSTANCE_MAX), AfterValidator(_identifier("instance id"))
]
Requester = Annotated[str, Field(min_length=1, max_length=REQUESTER_MAX), AfterValidator(_printable("--by"))]
Reason = Annotated[str, Field(max_length=REASON_MAX), AfterValidator(_printable("--reason"))]


def check(kind: Any, value: Any) -> Any:
    """Validate `value` against one of the types above.

    Raises:
        ValueError: One line saying what is wrong (never a pydantic dump).
    """
    try:
        return TypeAdapter(kind).validate_python(value)
    except ValidationError as err:
        raise ValueError(describe(err)) from None


def describe(err: ValidationError) -> str:
    """The first problem of a validation error in words, one line."""
    problem = err.errors(include_url=False)[0]
    where = ".".join(str(part) for part in problem["loc"])
    message = str(problem["msg"]).removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


def arg_type(kind: Any, *, number: type[int] | type[float] | None = None) -> Callable[[str], Any]:
    """An argparse `type=` that parses the text and applies `kind`'s rules (a usage error, exit 2).

    Args:
        kind: One of the types above.
        number: Parse the text as this number type first (None: keep the text).
    """

    def parse(text: str) -> Any:
        shown = safe(text, 40)
        value: Any = text
        if number is not None:
            try:
                value = number(text)
            except ValueError:
                whole = "a whole number" if number is int else "a number"
                raise argparse.ArgumentTypeError(f"{shown} is not {whole}") from None
        try:
            return check(kind, value)
        except ValueError as err:
            raise argparse.ArgumentTypeError(f"{shown}: {err}") from None

    return parse


def safe(text: str, limit: int = 80) -> str:
    """`text` fit for a terminal: control characters escaped, cut to `limit` characters, quoted."""
    shown = "".join(c if not unicodedata.category(c).startswith("C") else repr(c)[1:-1] for c in text)
    return "'" + (shown if len(shown) <= limit else f"{shown[:limit]}...") + "'"


def terminal_safe(text: str) -> str:
    """`text` with every control character but the newline escaped (`\\x1b`), for printing what
    a workflow stored: values accepted before these rules must not drive the reader's terminal."""
    return "".join(
        c if c == "\n" or not unicodedata.category(c).startswith("C") else repr(c)[1:-1] for c in text
    )
