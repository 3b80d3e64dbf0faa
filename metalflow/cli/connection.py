"""Which Temporal a `metalflow` command talks to, and the options that say so.

Every command that talks to Temporal takes `--address HOST:PORT` and `--namespace NS`, as the
Temporal CLI does. Where the rest comes from, first match wins:

1. `TEMPORAL_ADDRESS` or `TEMPORAL_CONFIG_FILE` set: Temporal's environment configuration
   (`metalflow.client.load_connect_config`), as for the worker;
2. else the `metalflow dev` running on the state dir (`$METALFLOW_STATE_DIR`, else `.metalflow`
   in the checkout, as `sim` and `bmc` find it): its address and namespace, so a
   stack on other ports (`metalflow dev --port 7300`) is found without any setting;
3. else the environment configuration's defaults (`~/.config/temporalio/temporal.toml`, then
   127.0.0.1:7233).

`--address` and `--namespace` then override what was found. A command that used the dev stack
says so on stderr, once.

How long a command keeps retrying a Temporal that does not answer (each call: the SDK's retry of
an unavailable server, 10 s by default) is `--connect-timeout SECONDS`, else
`METALFLOW_CONNECT_TIMEOUT`; past it the command says it lost Temporal (exit 3). A Temporal that
restarts within the window is reached and the command goes on.

Cost: one `flock` probe of the state dir's lock when no TEMPORAL_* variable names a server.
Building the parser imports none of the client: Temporal's SDK, the converter's models, the
tracing (OpenTelemetry, which imports the SDK's worker) and the dev stack's claim are imported by
`resolve` and `connect_to`, which only a command that talks to Temporal calls
(tests/fast/test_cli_imports.py).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from temporalio.client import Client

    from metalflow.runtime.telemetry import Tracing

_NAMESPACE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,254}")
_HOST = re.compile(r"[A-Za-z0-9.\-\[\]:]+")

CONNECT_TIMEOUT_ENV = "METALFLOW_CONNECT_TIMEOUT"
CONNECT_TIMEOUT_DEFAULT = 10.0  # the SDK's own window (temporalio.service.RetryConfig)
CONNECT_TIMEOUT_RANGE = (0.1, 3600.0)


def unreachable(address: str, err: BaseException) -> str:
    """Why a command could not connect to Temporal, and what to do: the one wording every command
    prints (`host status` and `campaign list` said it two ways)."""
    return (
        f"cannot reach Temporal at {address} ({type(err).__name__}); start it with `metalflow dev`, "
        "or give --address (or set TEMPORAL_ADDRESS or TEMPORAL_CONFIG_FILE) for your cluster"
    )


def address(text: str) -> str:
    """`--address`: HOST:PORT, the port 1-65535."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not _HOST.fullmatch(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not HOST:PORT, e.g. 127.0.0.1:7233")
    return text


def namespace(text: str) -> str:
    """`--namespace`: a Temporal namespace name."""
    if not _NAMESPACE.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text[:80]!r} is not a namespace name (letters, digits, '.', '_', '-'; at most 255)"
        )
    return text


def connect_timeout(text: str) -> float:
    """`--connect-timeout` and METALFLOW_CONNECT_TIMEOUT: seconds, 0.1 to 3600."""
    low, high = CONNECT_TIMEOUT_RANGE
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not low <= seconds <= high:  # NaN, inf and words too
        raise argparse.ArgumentTypeError(f"{text[:80]!r} is not a number of seconds from {low:g} to {high:g}")
    return seconds


def add_options(parser: argparse.ArgumentParser) -> None:
    """`--address` and `--namespace` on a command that talks to Temporal."""
    group = parser.add_argument_group("Temporal")
    group.add_argument(
        "--address",
        type=address,
        metavar="HOST:PORT",
        help="Temporal's frontend (default: TEMPORAL_ADDRESS or TEMPORAL_CONFIG_FILE, else the "
        "running `metalflow dev` of the state dir, else 127.0.0.1:7233)",
    )
    group.add_argument(
        "--namespace", type=namespace, metavar="NS", help="Temporal namespace (default: as for --address)"
    )
    group.add_argument(
        "--connect-timeout",
        type=connect_timeout,
        metavar="SECONDS",
        help=f"how long each call keeps retrying a Temporal that does not answer before the command "
        f"says it lost Temporal, exit 3 (default: {CONNECT_TIMEOUT_ENV}, else "
        f"{CONNECT_TIMEOUT_DEFAULT:g})",
    )


def add_to_temporal_commands(parser: argparse.ArgumentParser) -> None:
    """Give every command whose handler talks to Temporal (marked `talks_to_temporal`) the options."""
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        for sub in dict.fromkeys(action.choices.values()):
            handler = sub.get_default("handler")
            if getattr(handler, "talks_to_temporal", False):
                add_options(sub)
            add_to_temporal_commands(sub)


@dataclass(frozen=True)
class Target:
    """Where the command connects (`Client.connect` keyword arguments) and why there."""

    config: dict[str, Any]
    source: str
    retry_seconds: float | None = None  # None: the SDK's retry (CONNECT_TIMEOUT_DEFAULT)

    @property
    def address(self) -> str:
        return str(self.config.get("target_host", "?"))


def resolve(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> Target:
    """The Temporal this command talks to (see the module docstring).

    Raises:
        metalflow.client.TemporalConfigError: A named config file is missing or not TOML, or
            METALFLOW_CONNECT_TIMEOUT is not a number of seconds in range.
    """
    from drivers.statedir import find_state_dir
    from metalflow.client import TemporalConfigError, load_connect_config
    from metalflow.devstack.claim import running_stack

    env = dict(os.environ if env is None else env)
    retry_seconds: float | None = getattr(args, "connect_timeout", None)
    if retry_seconds is None and env.get(CONNECT_TIMEOUT_ENV):
        try:
            retry_seconds = connect_timeout(env[CONNECT_TIMEOUT_ENV])
        except argparse.ArgumentTypeError as err:
            raise TemporalConfigError(f"{CONNECT_TIMEOUT_ENV}: {err}") from None
    source = "TEMPORAL_* settings"
    if env.get("TEMPORAL_ADDRESS") or env.get("TEMPORAL_CONFIG_FILE"):
        config = dict(load_connect_config(env=env))
    else:
        state_dir, _ = find_state_dir(env=env)
        stack = running_stack(state_dir)
        if stack is not None:
            # What its temporal.toml says, without the user's profile (its TLS or API key is for
            # another server, never for the plain local one).
            config = {"target_host": stack.address, "namespace": stack.namespace}
            source = f"the metalflow dev of state dir {state_dir.resolve()} (pid {stack.pid})"
        else:
            config = dict(load_connect_config(env=env))
            source = "the default Temporal settings"
    if getattr(args, "address", None):
        config["target_host"] = args.address
        source = "--address"
    if getattr(args, "namespace", None):
        config["namespace"] = args.namespace
    if source.startswith("the metalflow dev"):
        print(f"metalflow: Temporal {config.get('target_host')} from {source}", file=sys.stderr, flush=True)
    return Target(config, source, retry_seconds)


_TRACING: list[Tracing] = []


async def connect_to(target: Target) -> Client:
    """A client of `target`, with metalflow's converter, traced when OTEL_TRACES_EXPORTER asks
    (the command's start, update and query spans are then the parents of the workflow's).

    Raises:
        TemporalConfigError: The OTEL_* settings ask for an exporter metalflow cannot provide.
    """
    from metalflow.client import TemporalConfigError, connect_with
    from metalflow.runtime.telemetry import TelemetryConfigError, setup_tracing

    config = dict(target.config)
    if target.retry_seconds is not None:
        from temporalio.service import RetryConfig

        # The window decides, not the SDK's count of 10 retries (about 11 s of backoff).
        window = round(target.retry_seconds * 1000)
        config["retry_config"] = RetryConfig(max_elapsed_time_millis=window, max_retries=10_000)

    try:
        tracing = setup_tracing()
    except TelemetryConfigError as err:
        raise TemporalConfigError(str(err)) from None
    _TRACING.append(tracing)
    return await connect_with(config, interceptors=tracing.interceptors)


def flush_tracing() -> None:
    """Export the command's spans before it ends (the commands end with `os._exit`)."""
    while _TRACING:
        _TRACING.pop().shutdown()
