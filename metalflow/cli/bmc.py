"""`metalflow bmc check|power HOST`: talk to a host's BMC directly, without Temporal.

For operators before and during a campaign. The same Redfish code as the activities runs here
(`activities.redfish`): `check` reaches the BMC, authenticates and says how a power cycle will be
done there; `power` changes the power and prints each step. The host comes from the inventory
(`METALFLOW_INVENTORY`: the site file, `--site` or `METALFLOW_SITE_FILE`, or the cluster).
Credentials are resolved from the host's reference and never printed.

A person waits here, so every command gives up after `--timeout` seconds (default 60; for
`cycle` the power-down wait is added) with the last error the BMC gave, and prints each
transient error as it is waited out. Workflows keep their own, longer limits.

`power on|off|cycle` done, the command tells the host's entity (signal `power_set`, at most
`TELL_ENTITY_SECONDS`, a Temporal that does not answer retried `TELL_ENTITY_RETRY_SECONDS`;
`--address`/`--namespace` as every command that talks to Temporal): an operator's power action
through metalflow's own CLI is planned, and the entity's power watch takes it as its new baseline
instead of reporting unplanned power. Temporal not reached, or no entity for the host: said on
stderr, the exit status is the power action's.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from contracts.errors import BMCUnavailable, CredentialsUnavailable, InvalidInput, MetalflowError
from contracts.models.inventory import HostInventory
from contracts.models.power_watch import POWER_SET_SIGNAL, PowerSet
from contracts.models.redfish import (
    DEFAULT_POWER_DOWN_WAIT_SECONDS,
    DEFAULT_POWER_SETTLE_SECONDS,
    GracefulShutdownInput,
    PowerCycleInput,
    SetPowerInput,
    SystemPower,
)
from contracts.validation import (
    Grace,
    HostId,
    PowerDownWait,
    PowerSettle,
    PowerTimeout,
    RequestTimeout,
    arg_type,
)
from contracts.wording import iso_z
from drivers.credentials import CredentialResolver
from drivers.redfish.client import RedfishClient
from drivers.redfish.connection import BMCConnection
from drivers.redfish.power import graceful_shutdown, read_power, set_power
from drivers.redfish.powercycle import PowerCycle
from drivers.settings import Settings
from metalflow.cli import exits

EXIT_OK, EXIT_FAILED, EXIT_USAGE = exits.OK, exits.FAILED, exits.USAGE
EXIT_UNREACHABLE, EXIT_INTERRUPTED = exits.UNREACHABLE, exits.INTERRUPTED
DEFAULT_CLI_TIMEOUT_SECONDS = 60.0
TELL_ENTITY_SECONDS = 5.0  # Temporal's answer to the `power_set` signal, at most
TELL_ENTITY_RETRY_SECONDS = 1.0  # a Temporal not answering, retried this long (--connect-timeout: that)


def register(subparsers: Any) -> None:
    """Add the `bmc` subcommand with `check` and `power`."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "bmc",
        help="check a host's BMC or change its power directly (no Temporal needed)",
        description="Reach a host's BMC over Redfish with the credentials its inventory references. "
        "Exit status: 0 done, 1 the BMC refused (credentials rejected, a reset it does not take), 2 "
        "unknown host or bad configuration, 3 the BMC could not be reached (README's table).",
    )
    commands = parser.add_subparsers(title="bmc commands", metavar="COMMAND")
    check = commands.add_parser(
        "check",
        help="reach and authenticate to the BMC; print the system, power state, reset types and "
        "how a power cycle will be done",
        description="Reach the host's BMC, authenticate, and print its system, power state, the reset "
        "types it allows and how `power cycle` (and the power_cycle_host activity) will cycle it.",
    )
    _common(check)
    check.set_defaults(handler=handle_check)
    power = commands.add_parser(
        "power",
        help="power a host on, off, cycle it, or show its power state",
        description="on: ResetType On (nothing when already On). off: ForceOff, or with --graceful "
        "GracefulShutdown then ForceOff after --grace seconds. cycle: one power cycle exactly as the "
        "power_cycle_host activity does it (native PowerCycle where LastResetTime is exposed, else "
        "ForceOff, wait for Off, wait --power-down-wait, On, wait for On). status: the power state.",
    )
    _common(power)
    power.add_argument("action", choices=("on", "off", "cycle", "status"), help="what to do")
    power.add_argument("--graceful", action="store_true", help="off: GracefulShutdown first")
    power.add_argument("--grace", type=arg_type(Grace, number=float), default=300.0, metavar="SECONDS",
                       help="off --graceful: ForceOff after this long (default: %(default)s)")  # fmt: skip
    power.add_argument(
        "--power-down-wait",
        type=arg_type(PowerDownWait, number=float),
        default=DEFAULT_POWER_DOWN_WAIT_SECONDS,
        metavar="SECONDS",
        help="cycle: time between Off and On when cycling by ForceOff/On (default: %(default)s)",
    )
    power.add_argument(
        "--settle",
        type=arg_type(PowerSettle, number=float),
        default=DEFAULT_POWER_SETTLE_SECONDS,
        metavar="SECONDS",
        help="on/off: trust PowerState only once it held this long (BMCs lag after a reset; "
        "default: %(default)s)",
    )
    power.set_defaults(handler=handle_power)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "host", metavar="HOST", type=arg_type(HostId), help="the host id, as in the inventory"
    )
    parser.add_argument("--site", type=Path, default=None, metavar="FILE",
                        help="site file (default: METALFLOW_SITE_FILE, "
                        "else the state dir's site.yaml)")  # fmt: skip
    parser.add_argument("--auth", choices=("session", "basic", "auto"), default=None,
                        help="override the BMC's auth from the inventory: Redfish session, HTTP basic, "
                        "or auto (session where the BMC offers it)")  # fmt: skip
    parser.add_argument("--request-timeout", type=arg_type(RequestTimeout, number=float), default=15.0,
                        metavar="SECONDS",
                        help="timeout of one HTTP request (default: %(default)s)")  # fmt: skip
    parser.add_argument("--timeout", type=arg_type(PowerTimeout, number=float),
                        default=DEFAULT_CLI_TIMEOUT_SECONDS, metavar="SECONDS",
                        help="give up after this long with the last error (cycle: plus "
                        "--power-down-wait; default: %(default)s)")  # fmt: skip


def _say(text: str) -> None:
    print(f"{iso_z(datetime.now(UTC))}  {text}", flush=True)


async def _resolve_host(settings: Settings, host_id: str) -> HostInventory:
    from drivers.inventory import Inventory, host_from_site_file

    if settings.inventory == "site":
        return await asyncio.to_thread(
            host_from_site_file, settings.site_file, host_id, settings.dpf_namespace
        )
    return await Inventory(settings).resolve(host_id)


def _run(args: argparse.Namespace, body: Any) -> int:
    try:
        settings = Settings.from_env()
    except ValueError as err:
        print(f"metalflow bmc: {err}", file=sys.stderr)
        return EXIT_USAGE
    if args.site is not None:
        settings = settings.model_copy(update={"site_file": args.site, "inventory": "site"})

    limit = args.timeout + (
        getattr(args, "power_down_wait", 0.0) if getattr(args, "action", "") == "cycle" else 0
    )
    seen: list[BMCConnection] = []

    async def main() -> int:
        host = await _resolve_host(settings, args.host)
        client = RedfishClient(
            CredentialResolver(settings.kubeconfig),
            max_in_flight=settings.bmc_max_in_flight,
            auth=args.auth,
            timeout_seconds=min(args.request_timeout, limit),
        )
        client.on_connect = seen.append
        try:
            async with asyncio.timeout(limit):
                status: int = await body(client, host)
            return status
        finally:
            await client.aclose()

    try:
        return asyncio.run(main())
    except TimeoutError:
        last = next((c.last_problem for c in reversed(seen) if c.last_problem), None)
        print(
            f"metalflow bmc: {args.host}: gave up after {limit:g} s (--timeout)"
            + (f"; last error: {last}" if last else ""),
            file=sys.stderr,
        )
        return EXIT_UNREACHABLE
    except (InvalidInput, CredentialsUnavailable) as err:
        print(f"metalflow bmc: {err.message}", file=sys.stderr)
        return EXIT_USAGE
    except MetalflowError as err:
        print(f"metalflow bmc: {args.host}: {type(err).__name__}: {err.message}", file=sys.stderr)
        return EXIT_UNREACHABLE if isinstance(err, BMCUnavailable) else EXIT_FAILED
    except KeyboardInterrupt:
        print("metalflow bmc: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _describe_cycle(power: SystemPower) -> str:
    if power.power_cycle_method == "PowerCycle":
        return "native PowerCycle (LastResetTime is exposed, so a retried cycle can tell it already happened)"
    has_cycle = "PowerCycle" in power.allowed_reset_types
    why = "LastResetTime is not exposed" if has_cycle else "PowerCycle is not offered"
    return f"ForceOff, wait for Off, wait power_down_wait, On, wait for On ({why})"


def _lag(seconds: float | None) -> str:
    return "" if seconds is None else f" (the BMC showed it {seconds:g} s after accepting the reset)"


def handle_check(args: argparse.Namespace) -> int:
    """Run `metalflow bmc check HOST`."""

    async def body(client: RedfishClient, host: HostInventory) -> int:
        bmc = host.bmc
        print(f"host {host.host_id} (site {host.site})")
        print(f"  BMC:          {bmc.endpoint}")
        print(f"  credentials:  {bmc.credentials.describe()} (auth: {client.auth or bmc.auth})")
        if bmc.insecure:
            print("  TLS:          verification OFF (insecure: true)")
        async with client.connect(bmc) as connection:
            connection.on_problem = lambda text: _say(f"waiting: {text}")
            power = await read_power(connection)
            auth = await connection.auth_mode()
        print(f"  reached:      yes, authenticated ({auth} auth)")
        maker = " ".join(p for p in (power.manufacturer, power.model) if p)
        print(f"  system:       {power.system}" + (f"  ({maker})" if maker else ""))
        print(f"  power state:  {power.power_state}")
        print(f"  reset types:  {', '.join(power.allowed_reset_types) or '(none advertised)'}")
        last = iso_z(power.last_reset_time, none="not exposed")
        print(f"  last reset:   {last}")
        print(f"  power cycle:  {_describe_cycle(power)}")
        return EXIT_OK

    return _run(args, body)


def handle_power(args: argparse.Namespace) -> int:
    """Run `metalflow bmc power HOST on|off|cycle|status`."""

    done: list[PowerSet] = []

    async def body(client: RedfishClient, host: HostInventory) -> int:
        bmc = host.bmc
        async with client.connect(bmc) as connection:
            if args.action == "status":
                power = await read_power(connection)
                print(f"{host.host_id}: {power.power_state}")
                return EXIT_OK
            connection.on_power_state = lambda state: _say(f"{host.host_id}: PowerState {state}")
            connection.on_problem = lambda text: _say(f"{host.host_id}: waiting: {text}")
            timeout = args.timeout
            _say(f"{host.host_id}: power {args.action} through {bmc.endpoint}")
            if args.action == "on":
                request_on = SetPowerInput(
                    bmc=bmc, reset_type="On", timeout_seconds=timeout, settle_seconds=args.settle
                )
                result = await set_power(connection, request_on, _say)
                _say(f"{host.host_id}: {result.power_state}" + _lag(result.lag_seconds))
                done.append(PowerSet(action="on", power_state=result.power_state, at=datetime.now(UTC)))
            elif args.action == "off" and args.graceful:
                request = GracefulShutdownInput(bmc=bmc, grace_seconds=args.grace, timeout_seconds=timeout)
                shutdown = await graceful_shutdown(connection, request, _say)
                _say(f"{host.host_id}: {shutdown.power_state}" + (" (forced)" if shutdown.forced else ""))
                done.append(PowerSet(action="off", power_state=shutdown.power_state, at=datetime.now(UTC)))
            elif args.action == "off":
                request_off = SetPowerInput(
                    bmc=bmc, reset_type="ForceOff", timeout_seconds=timeout, settle_seconds=args.settle
                )
                result = await set_power(connection, request_off, _say)
                _say(f"{host.host_id}: {result.power_state}" + _lag(result.lag_seconds))
                done.append(PowerSet(action="off", power_state=result.power_state, at=datetime.now(UTC)))
            else:
                cycle_request = PowerCycleInput(
                    bmc=bmc,
                    boot_generation=1,
                    requested_at=datetime.now(UTC),
                    power_down_wait_seconds=args.power_down_wait,
                    timeout_seconds=timeout,
                )
                cycle = PowerCycle(
                    connection, cycle_request, None, persist=lambda _: None, flush_seconds=0.0, on_step=_say
                )
                cycled = await cycle.run()
                took = (cycled.finished_at - cycled.started_at).total_seconds()
                _say(
                    f"{host.host_id}: power cycled by {cycled.method} ({', '.join(cycled.reset_types)}) "
                    f"in {took:.1f} s, {cycled.requests} requests"
                )
                done.append(PowerSet(action="cycle", power_state="On", at=cycled.finished_at))
            return EXIT_OK

    status = _run(args, body)
    if status == EXIT_OK and done:
        _tell_entity(args, done[0])
    return status


handle_power.talks_to_temporal = True  # type: ignore[attr-defined]  # tells the entity: --address, --namespace


def _tell_entity(args: argparse.Namespace, done: PowerSet) -> None:
    """Tell the host's entity what `bmc power` did (module docstring); a failure is said on stderr."""
    from temporalio.runtime import Runtime, TelemetryConfig
    from temporalio.service import RPCError, RPCStatusCode

    from contracts import names
    from metalflow.cli import connection
    from metalflow.hosts import default_operator

    done = done.model_copy(update={"requested_by": default_operator()})  # who: an OFF mark it clears says it

    async def tell() -> None:
        # A runtime of its own, gone with this coroutine (below), not the SDK's default one, whose
        # threads outlived the command and aborted the interpreter at its exit (`Fatal Python error:
        # PyGILState_Release`, exit 134, most often after a connect that failed).
        runtime = Runtime(telemetry=TelemetryConfig())
        async with asyncio.timeout(TELL_ENTITY_SECONDS):
            target = connection.resolve(args)
            if target.retry_seconds is None:  # a Temporal that is down is not waited for long here
                target = dataclasses.replace(target, retry_seconds=TELL_ENTITY_RETRY_SECONDS)
            target = dataclasses.replace(target, config={**target.config, "runtime": runtime})
            client = await connection.connect_to(target)
            await client.get_workflow_handle(names.host_workflow_id(args.host)).signal(POWER_SET_SIGNAL, done)

    untold = f"metalflow bmc: {args.host}'s entity was not told of this power {done.action}"
    try:
        asyncio.run(tell())
    except RPCError as err:
        if err.status != RPCStatusCode.NOT_FOUND:
            print(f"{untold} (Temporal: {err.message.splitlines()[0] if err.message else err.status})"
                  "; its power watch may report it as unplanned power", file=sys.stderr)  # fmt: skip
    except Exception as err:  # noqa: BLE001 - the power action is done; telling is a courtesy
        print(f"{untold} (Temporal not reached: {type(err).__name__}); its power watch may report it "
              "as unplanned power", file=sys.stderr)  # fmt: skip
    gc.collect()  # the client and its runtime (a failure's traceback held them), while Python still runs
