"""Simulated Redfish BMCs: one per host (vendor profiles, power) and one per DPU (firmware).

Every BMC service is served at the root (`/redfish/v1`) of an address of its own, as a real BMC
is: a port of its own on 127.0.0.1, picked free by the kernel (`BMCs.serve`), over https for
profiles that ask for it. A service is one host's BMC, one DPU's BMC, or (profile
`multi-system`) the one BMC of a group of hosts, each host a System of its own. All services
share one aiohttp runner in the simulator's one process; a request is routed by the local port
it arrived on.

A DPU whose site entry has no BMC (`bmc: null`) gets none: no service, no port; its host's
power cycles still happen (the host's BMC), only its firmware cannot be read or staged. That is
how one process serves 10,000 hosts: every service is one listening socket, i.e. one file
descriptor, and this machine's limit is 20,000 soft and hard, so 10,000 hosts with a DPU BMC
each (20,000 sockets) cannot listen, while 10,000 host BMCs plus the API and the connections
clients open do. Benchmarks that never touch a DPU's BMC ask for such a site (`serve
--no-dpu-bmcs`); a site that needs more BMCs than that groups hosts behind `multi-system` BMCs,
as blade chassis do. Sharing one listener among BMCs was not chosen: a real client reaches each
BMC at an address of its own, and routing by anything but the port (a path prefix, the Host
header) would serve BMCs differently from how real ones are reached.

Cost: one listening socket per BMC service (3,000 for 1,000 hosts with 2 DPUs, 10,000 for
10,000 hosts without DPU BMCs); `serve` raises a clear OSError naming the count and the limit
when they cannot all listen. Per-BMC state is a few small objects; sessions, tasks and the
power log are created on first use, and timers run only for transitions, staging and open
sessions, so idle BMCs cost little.
"""

from __future__ import annotations

import asyncio
import errno
import resource
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from simulators.events import ArmShutdown, Event, Hub, PowerCycled, PowerTransition
from simulators.faults import Faults
from simulators.measure import RequestCounts
from simulators.site import Site
from simulators.timings import Timings
from simulators.violations import Violations

from . import keep
from .dpu import DPUBMC, DPUResets, Firmware, system_power_state, system_status_state
from .host import PROFILES, HostBMC
from .load import LoadRecord
from .messages import now_rfc3339
from .power import PowerControl
from .routes import Redfish
from .server import any_method_runner
from .sessions import SESSION_CAP, Auth
from .tasks import Tasks
from .tls import BMCTLS, make_bmc_tls

__all__ = ["BMCs", "Service", "SESSION_CAP", "PROFILES", "service_groups"]

FOREIGN_ON_DELAY_SECONDS = 1.0
"""How long after a ForceOff took the host Off the `power-on-during-power-down` actor turns it On:
inside metalflow's power-down wait (and inside `set_power`'s 3 s settle), as the bare-metal
manager's power manager did (BEHAVIOUR.md F6)."""


@dataclass
class Service:
    """One BMC service: what answers at one address."""

    id: str  # the key of its account, sessions and tasks: the first BMC id it serves
    hosts: dict[str, HostBMC] = field(default_factory=dict)  # by System id
    dpu: DPUBMC | None = None
    sessions: bool = True  # offers a SessionService
    tls: bool = False
    port: int = 0  # bound by `BMCs.serve`
    next_reset_delay: float = 0.0  # hold the next reset request this long before acting on it
    # Named faults (`BMCs.bmc_fault`): its password rotates at its next accepted ForceOff; it
    # answers nothing (no listener, open connections closed).
    rotate_after_forceoff: bool = False
    unreachable: bool = False
    # Another actor (`power-on-during-power-down`, F6): every ForceOff it accepts is followed,
    # `FOREIGN_ON_DELAY_SECONDS` after the host reaches Off, by an On nobody here sent.
    power_on_after_forceoff: bool = False
    # The BMC's own load record (`BMCs.load`, a test instrument: `load.py`): requests answered
    # at once and per minute, and Systems away from On (a power cycle or ForceOff under way) at
    # once, each its peak.
    load: LoadRecord = field(default_factory=LoadRecord)
    systems_off_peak: int = 0
    # Every request it answered since start, per `METHOD path` (`BMCs.requests`).
    requests_served: Counter[str] = field(default_factory=Counter)

    @property
    def first_host(self) -> HostBMC | None:
        return next(iter(self.hosts.values()), None)


def service_groups(site: Site) -> dict[str, str]:
    """The service id of every host BMC: its own id, or the first host of its multi-system group."""
    first_of_group: dict[str, str] = {}
    found: dict[str, str] = {}
    for host in site.hosts:
        if host.bmc.profile == "multi-system":
            group = host.bmc.group or "multi-system"
            found[host.id] = first_of_group.setdefault(group, host.id)
        else:
            found[host.id] = host.id
    return found


# Descriptors the simulator needs besides its BMCs' listeners: the API's two listeners, its
# clients' connections (watches, the worker's pool, tests), files, the event loop's own.
SPARE_DESCRIPTORS = 1_000


def _check_descriptors(services: int) -> None:
    """Refuse, before binding anything, a site whose BMCs cannot all listen in this process."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and services + SPARE_DESCRIPTORS > soft:
        raise OSError(
            errno.EMFILE,
            f"the site has {services} BMC services, one listening socket each, and this process may "
            f"open {soft} file descriptors ({SPARE_DESCRIPTORS} kept for connections): serve DPUs "
            "without BMCs (`--no-dpu-bmcs`, `bmc: null`) or group hosts behind multi-system BMCs",
        )


class BMCs:
    """All BMCs of a site, their servers and what tests and the control API may read of them."""

    def __init__(
        self,
        site: Site,
        hub: Hub,
        faults: Faults,
        timings: Timings,
        violations: Violations,
        credentials: dict[str, tuple[str, str]],
        *,
        tls_everywhere: bool = False,
    ) -> None:
        """`tls_everywhere` serves every BMC over https, whatever its profile (conformance runs:
        the Redfish protocol allows basic auth and session login over https only)."""
        self.faults = faults
        self.timings = timings
        self.tasks = Tasks()
        self.auth = Auth(credentials, timings.session_timeout_seconds, violations)
        self.power = PowerControl(hub, timings, self.tasks)
        self.power.on_change = self._note_power
        started = now_rfc3339()
        self._hosts: dict[str, HostBMC] = {}
        self._dpus: dict[str, DPUBMC] = {}
        self.services: dict[str, Service] = {}
        self._service_of: dict[str, Service] = {}  # every BMC id (host or DPU) -> its service
        dpus_by_host: dict[str, list[DPUBMC]] = {}
        groups = service_groups(site)
        for host in site.hosts:
            profile = PROFILES[host.bmc.profile]
            service_id = groups[host.id]
            service = self.services.get(service_id)
            if service is None:
                service = self.services[service_id] = Service(
                    service_id, sessions=profile.sessions, tls=profile.tls or tls_everywhere
                )
            bmc = self._hosts[host.id] = HostBMC(host.id, profile, started, service_id)
            service.hosts[bmc.system_id] = bmc
            self._service_of[host.id] = service
            for dpu in host.dpus:
                if dpu.bmc is None:
                    continue  # no BMC reachable for this DPU: none served
                dpu_bmc = DPUBMC(dpu.id, host.id, dpu.model, dpu.firmware)
                self._dpus[dpu.id] = dpu_bmc
                self._service_of[dpu.id] = self.services[dpu.id] = Service(
                    dpu.id, dpu=dpu_bmc, tls=tls_everywhere
                )
                dpus_by_host.setdefault(host.id, []).append(dpu_bmc)
        self.firmware = Firmware(timings, self.tasks, dpus_by_host)
        hub.subscribe(PowerCycled, self.firmware.on_power_cycled)
        self.dpu_resets = DPUResets(hub, timings, dpus_by_host)
        hub.subscribe(PowerTransition, self.dpu_resets.on_power)
        hub.subscribe(ArmShutdown, self._arm_shut_down)
        self._redfish = Redfish(self)
        self._by_port: dict[int, Service] = {}
        self._sites: dict[str, web.TCPSite] = {}  # the listener of each service, by service id
        self._tls: BMCTLS | None = None  # the https context, for listening again after `unreachable`
        self._runner: web.BaseRunner | None = None
        self._tls_dir: tempfile.TemporaryDirectory[str] | None = None
        self.ca_path: Path | None = None  # the CA of the https BMCs, once served
        self.request_counts: RequestCounts | None = None  # set by the site: requests per client
        self._foreign: set[asyncio.Task[None]] = set()  # F6's pending Ons (another actor's)

    async def serve(self, tls_dir: Path | None = None) -> None:
        """Listen for every BMC service on a free port of 127.0.0.1 (https where asked).

        Args:
            tls_dir: Where to write the CA (`bmc-ca.pem`) and the servers' key, when a service
                serves https; a temporary folder when None.
        """
        self._runner = any_method_runner(self._redfish.handle)
        await self._runner.setup()
        tls = None
        if any(service.tls for service in self.services.values()):
            if tls_dir is None:
                self._tls_dir = tempfile.TemporaryDirectory(prefix="metalflow-bmc-tls-")
                tls_dir = Path(self._tls_dir.name)
            tls = make_bmc_tls(tls_dir)
            self.ca_path = tls.ca_path
        self._tls = tls
        _check_descriptors(len(self.services))
        for service in self.services.values():
            site = self._sites[service.id] = web.TCPSite(
                self._runner, "127.0.0.1", 0, ssl_context=tls.context if service.tls and tls else None
            )
            await site.start()
            sockets = site._server.sockets if site._server is not None else ()  # type: ignore[attr-defined]
            if not sockets:
                # asyncio skips an address whose socket() failed (EMFILE among others) and starts a
                # server with no socket: say what ran out instead of failing on an empty list.
                raise OSError(
                    errno.EMFILE,
                    f"could not listen for BMC {service.id} ({len(self._by_port)} of "
                    f"{len(self.services)} BMC services listening): out of file descriptors or ports",
                )
            service.port = sockets[0].getsockname()[1]
            self._by_port[service.port] = service

    def endpoint(self, bmc_id: str) -> str:
        """The base URL of a BMC (`<endpoint>/redfish/v1` is its service root), once served."""
        service = self._service_of[bmc_id]
        return f"{'https' if service.tls else 'http'}://127.0.0.1:{service.port}"

    def service_at(self, port: int) -> Service | None:
        return self._by_port.get(port)

    def service_of(self, bmc_id: str) -> Service:
        return self._service_of[bmc_id]

    async def start(self) -> None:
        """Nothing runs while BMCs are idle; timers start with the first reset or session."""

    async def stop(self) -> None:
        """Cancel every pending timer (transitions, firmware staging, session expiry); stop serving."""
        for task in list(self._foreign):
            task.cancel()
        for host in self._hosts.values():
            self.power.cancel(host)
        for dpu in self._dpus.values():
            self.firmware.cancel(dpu)
            if dpu.boot_timer is not None:
                dpu.boot_timer.cancel()
        self.auth.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._tls_dir is not None:
            self._tls_dir.cleanup()
            self._tls_dir = None

    # -- reads for tests and the control API ---------------------------------------------------

    def host_bmc(self, bmc_id: str) -> HostBMC | None:
        return self._hosts.get(bmc_id)

    def dpu_bmc(self, bmc_id: str) -> DPUBMC | None:
        return self._dpus.get(bmc_id)

    def _arm_shut_down(self, event: Event) -> None:
        """Hub handler: a DPU's agent shut its Arm OS down (SystemLevelReset): the BMC shows it."""
        dpu = self._dpus.get(event.dpu_id) if isinstance(event, ArmShutdown) else None
        if dpu is not None:
            self.dpu_resets.arm_shut_down(dpu)

    def dpu_system_state(self, dpu_id: str) -> tuple[str, str] | None:
        """The DPU System's `PowerState` and `Status.State`, as its BMC serves them (what DPF
        reads in WaitForShutdown, dpf BEHAVIOUR.md R2); None when the DPU has no BMC here."""
        dpu = self._dpus.get(dpu_id)
        if dpu is None:
            return None
        power = system_power_state(dpu)
        return power, system_status_state(power)

    def reset_counts(self, dpu_id: str) -> dict[str, int]:
        """The resets the DPU's own System (its Arm cores) took, by reset type."""
        return dict(self._dpus[dpu_id].resets)

    def dpu_state(self, dpu_id: str) -> dict[str, object]:
        """What the DPU's BMC shows and did: Arm state, Paused, a latched PowerCycle, the resets
        sent (by type) and those that reset the NIC too (`GET /sim/dpu-bmcs/<id>`).

        Raises:
            KeyError: no such DPU BMC.
        """
        dpu = self._dpus[dpu_id]
        return {
            "arm": dpu.arm, "paused": dpu.paused, "latched": dpu.latched, "resets": dict(dpu.resets),
            "nic_resets": dpu.nic_resets, "last_reset_time": dpu.last_reset_time, "powered": dpu.powered,
            "arm_since": dpu.arm_since,
        }  # fmt: skip

    def dpu_fault(self, dpu_id: str, fault: str) -> None:
        """`paused` (stuck in its UEFI shell), `reset` (someone reset its Arm: an uncontrolled
        reset, e.g. a crash) or `no-powercycle` (the System no longer advertises or takes
        `PowerCycle`: BEHAVIOUR.md B13). Raises KeyError (no such DPU BMC), LookupError (no such
        fault)."""
        dpu = self._dpus[dpu_id]
        if fault == "paused":
            self.dpu_resets.pause(dpu)
        elif fault == "reset":
            self.dpu_resets.take_effect(dpu, "ForceRestart", nic=False)
        elif fault == "no-powercycle":
            dpu.reset_types = tuple(t for t in dpu.reset_types if t != "PowerCycle")
        else:
            raise LookupError(f"unknown DPU BMC fault {fault!r}; one of paused, reset, no-powercycle")

    def kept_state(self) -> dict[str, dict[str, Any]]:
        """What each BMC keeps across the simulator's restart, by BMC id (`keep.py`): the site's
        snapshot saves it (`simulators.persist`), as a real BMC keeps its system's power state,
        firmware and last reset mark when the site's manager restarts (BEHAVIOUR.md L1, L2)."""
        kept = {host_id: keep.host_state(host) for host_id, host in self._hosts.items()}
        return kept | {dpu_id: keep.dpu_state(dpu) for dpu_id, dpu in self._dpus.items()}

    def restore_kept(self, kept: dict[str, dict[str, Any]]) -> None:
        """Take back what a snapshot kept (ids the site no longer has are ignored); a power
        transition it kept resumes at `resume`."""
        for bmc_id, state in kept.items():
            if bmc_id in self._hosts:
                keep.restore_host(self._hosts[bmc_id], state)
            elif bmc_id in self._dpus:
                keep.restore_dpu(self._dpus[bmc_id], state)

    def resume(self) -> None:
        """Resume the power transitions a snapshot kept (once the site's controllers listen)."""
        for host in self._hosts.values():
            if host.pending and host.timer is None:
                self.power.resume(host)

    def bmc_ids(self) -> list[str]:
        return [*self._hosts, *self._dpus]

    def power_log(self, host_id: str) -> list[dict[str, str | None]]:
        """Every settled power transition of the host: `{"time", "from", "to", "reset_type"}`.

        Raises:
            KeyError: no such host.
        """
        log = self._hosts[host_id].log
        return [] if log is None else [dict(entry) for entry in log]

    def power_state(self, host_id: str) -> str:
        """The host's `PowerState` now (On, Off, PoweringOn, PoweringOff)."""
        return self._hosts[host_id].power

    def profile(self, host_id: str) -> str:
        return self._hosts[host_id].profile.name

    def system_path(self, host_id: str) -> str:
        """The host's ComputerSystem path on its BMC."""
        return self._hosts[host_id].system_uri()

    def load(self, bmc_id: str) -> dict[str, int]:
        """The peaks of the BMC's service since start (shared by the hosts of a multi-system
        BMC): `requests_in_flight_peak` (requests answered at once), `requests_per_minute_peak`
        (the most that arrived within any `WINDOW_SECONDS`) and `systems_off_peak` (its Systems
        away from On at once, i.e. power cycles or ForceOffs under way together). A test
        instrument (`load.py`), not a Redfish behaviour."""
        service = self._service_of[bmc_id]
        return {
            "requests_in_flight_peak": service.load.in_flight_peak,
            "requests_per_minute_peak": service.load.per_minute_peak,
            "systems_off_peak": service.systems_off_peak,
        }

    def requests(self, bmc_id: str) -> dict[str, int]:
        """Every request the BMC's service answered since start, per `METHOD path` (a host's id
        names its BMC, shared on a multi-system BMC), as a BMC's access log would count them."""
        return dict(sorted(self._service_of[bmc_id].requests_served.items()))

    def _note_power(self, host: HostBMC) -> None:
        service = self.services[host.service_id]
        off = sum(1 for system in service.hosts.values() if system.power != "On")
        service.systems_off_peak = max(service.systems_off_peak, off)

    def open_sessions(self, bmc_id: str) -> int:
        """How many sessions are open on the BMC (host or DPU; a shared BMC counts all its own)."""
        return self.auth.open_count(self._service_of[bmc_id].id)

    def dpu_firmware(self, dpu_id: str) -> dict[str, str | None]:
        """`{"running": version, "staged": version or None}` of the DPU's NIC firmware."""
        dpu = self._dpus[dpu_id]
        return {"running": dpu.running, "staged": dpu.staged}

    def delay_next_reset(self, bmc_id: str, seconds: float) -> None:
        """Hold the BMC's next reset request `seconds` before acting on it and answering (a BMC
        that is slow to answer a reset, longer than a client's heartbeat timeout)."""
        self._service_of[bmc_id].next_reset_delay = seconds

    BMC_FAULTS = (
        "wrong-credentials", "rotate-after-forceoff", "unreachable",
        "power-on-during-power-down", "power-off-at-rest", "clear",
    )  # fmt: skip

    async def bmc_fault(self, bmc_id: str, fault: str) -> dict[str, object]:
        """A named fault of the BMC serving `bmc_id` (a host or DPU id; a multi-system BMC's
        fault is every host's it serves), BEHAVIOUR.md F1-F4, F6, F7; the BMC's faults after it.

        - `wrong-credentials`: its password changes now (nobody stored the new one): 401.
        - `rotate-after-forceoff`: the same, right after it next accepts a ForceOff.
        - `unreachable`: it stops listening and closes its open connections: no answer at all.
        - `power-on-during-power-down`: another actor (a power manager whose desired state is On)
          turns the host On `FOREIGN_ON_DELAY_SECONDS` after each ForceOff took it Off, until
          cleared.
        - `power-off-at-rest`: another actor turns the host Off once, now (a ForceOff nobody here
          sent); refused (ValueError) unless the host is On and in no transition.
        - `clear`: all undone (the stored password works again; it listens on its port; no
          other actor turns the host On). A host turned Off stays Off.

        Raises KeyError (no such BMC), LookupError (no such fault), ValueError (not now).
        """
        service = self._service_of[bmc_id]
        if fault == "wrong-credentials":
            self.auth.rotate(service.id)
        elif fault == "rotate-after-forceoff":
            service.rotate_after_forceoff = True
        elif fault == "unreachable":
            if not service.unreachable:
                service.unreachable = True
                await self._sites[service.id].stop()
        elif fault == "power-on-during-power-down":
            service.power_on_after_forceoff = True
        elif fault == "power-off-at-rest":
            self._power_off_by_someone(bmc_id, service)
        elif fault == "clear":
            self.auth.restore(service.id)
            service.rotate_after_forceoff = False
            service.power_on_after_forceoff = False
            if service.unreachable:
                await self._listen_again(service)
        else:
            raise LookupError(f"unknown BMC fault {fault!r}; one of {', '.join(self.BMC_FAULTS)}")
        return self.bmc_faults(bmc_id)

    def bmc_faults(self, bmc_id: str) -> dict[str, object]:
        """The named faults in force on the BMC serving `bmc_id`. Raises KeyError."""
        service = self._service_of[bmc_id]
        return {
            "bmc": service.id,
            "wrong_credentials": self.auth.rotated(service.id),
            "rotate_after_forceoff": service.rotate_after_forceoff,
            "unreachable": service.unreachable,
            "power_on_during_power_down": service.power_on_after_forceoff,
        }

    def forceoff_accepted(self, service: Service, host: HostBMC, prefix: str) -> None:
        """A ForceOff was accepted: a rotation armed by `rotate-after-forceoff` happens now; with
        `power-on-during-power-down`, another actor turns the host back On shortly after Off."""
        if service.rotate_after_forceoff:
            service.rotate_after_forceoff = False
            self.auth.rotate(service.id)
        if service.power_on_after_forceoff:
            task = asyncio.get_running_loop().create_task(self._power_on_by_someone(host, prefix))
            self._foreign.add(task)
            task.add_done_callback(self._foreign.discard)

    async def _power_on_by_someone(self, host: HostBMC, prefix: str) -> None:
        """F6: once the host settled Off, wait `FOREIGN_ON_DELAY_SECONDS`, then On (not metalflow's)."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + 60.0
        while host.power != "Off" or host.pending:
            if loop.time() > give_up:
                return  # it never settled Off (someone turned it On already): nothing to do
            await asyncio.sleep(0.05)
        await asyncio.sleep(FOREIGN_ON_DELAY_SECONDS)
        if host.power == "Off" and not host.pending:
            self.power.reset(host, "On", prefix)

    def _power_off_by_someone(self, bmc_id: str, service: Service) -> None:
        """F7: another actor's ForceOff of the host `bmc_id` names, now (on a multi-system BMC,
        that host only)."""
        host = self._hosts.get(bmc_id)
        if host is None:
            raise LookupError(f"{bmc_id} is no host: power-off-at-rest turns a host off")
        if host.power != "On" or host.pending:
            raise ValueError(f"host {bmc_id} is {host.power}, not On at rest: nothing turned off")
        self.power.reset(host, "ForceOff", "")

    async def _listen_again(self, service: Service) -> None:
        assert self._runner is not None
        context = self._tls.context if service.tls and self._tls is not None else None
        site = self._sites[service.id] = web.TCPSite(
            self._runner, "127.0.0.1", service.port, ssl_context=context
        )
        await site.start()
        service.unreachable = False

    def inject_update_failure(
        self, dpu_id: str, message: str = "Firmware image verification failed."
    ) -> None:
        """Make the DPU's next SimpleUpdate task end in `Exception` with this message."""
        self._dpus[dpu_id].fail_next = message
