"""Simulated Redfish BMCs: one per host (vendor profiles, power) and one per DPU (firmware).

Every BMC answers under `/bmc/<bmc-id>/redfish/v1/...` (`<bmc-id>` is the host id or the DPU
id) on the simulator's one port. Per-BMC state is a few small objects; sessions, tasks and the
power log are created on first use, and timers run only for transitions, staging and open
sessions, so 3,000 BMCs cost little while idle.
"""

from __future__ import annotations

from aiohttp import web

from simulators.events import Hub, PowerCycled
from simulators.faults import Faults
from simulators.site import Site
from simulators.timings import Timings
from simulators.violations import Violations

from .dpu import DPUBMC, Firmware
from .host import PROFILES, HostBMC
from .messages import now_rfc3339
from .power import PowerControl
from .routes import Redfish
from .sessions import SESSION_CAP, Auth
from .tasks import Tasks

__all__ = ["BMCs", "SESSION_CAP", "PROFILES"]


class BMCs:
    """All BMCs of a site, their routes and what tests and the control API may read of them."""

    def __init__(
        self,
        site: Site,
        hub: Hub,
        faults: Faults,
        timings: Timings,
        violations: Violations,
        credentials: dict[str, tuple[str, str]],
    ) -> None:
        self.faults = faults
        self.timings = timings
        self.tasks = Tasks()
        self.auth = Auth(credentials, timings.session_timeout_seconds, violations)
        self.power = PowerControl(hub, timings, self.tasks)
        started = now_rfc3339()
        self._hosts: dict[str, HostBMC] = {}
        self._dpus: dict[str, DPUBMC] = {}
        dpus_by_host: dict[str, list[DPUBMC]] = {}
        for host in site.hosts:
            self._hosts[host.id] = HostBMC(host.id, PROFILES[host.bmc.profile], started)
            for dpu in host.dpus:
                bmc = DPUBMC(dpu.id, host.id, dpu.model, dpu.firmware)
                self._dpus[dpu.id] = bmc
                dpus_by_host.setdefault(host.id, []).append(bmc)
        self.firmware = Firmware(timings, self.tasks, dpus_by_host)
        hub.subscribe(PowerCycled, self.firmware.on_power_cycled)
        self._redfish = Redfish(self)

    def add_routes(self, app: web.Application) -> None:
        """Serve every BMC under `/bmc/<bmc-id>/redfish/...` on `app`."""
        self._redfish.add_routes(app)

    async def start(self) -> None:
        """Nothing runs while BMCs are idle; timers start with the first reset or session."""

    async def stop(self) -> None:
        """Cancel every pending timer: transitions, firmware staging and session expiry."""
        for host in self._hosts.values():
            self.power.cancel(host)
        for dpu in self._dpus.values():
            self.firmware.cancel(dpu)
        self.auth.close()

    # -- reads for tests and the control API ---------------------------------------------------

    def host_bmc(self, bmc_id: str) -> HostBMC | None:
        return self._hosts.get(bmc_id)

    def dpu_bmc(self, bmc_id: str) -> DPUBMC | None:
        return self._dpus.get(bmc_id)

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
        """The host's ComputerSystem path, with its BMC's prefix."""
        return self._hosts[host_id].system_uri(f"/bmc/{host_id}")

    def open_sessions(self, bmc_id: str) -> int:
        """How many sessions are open on the BMC (host or DPU)."""
        if bmc_id not in self._hosts and bmc_id not in self._dpus:
            raise KeyError(bmc_id)
        return self.auth.open_count(bmc_id)

    def dpu_firmware(self, dpu_id: str) -> dict[str, str | None]:
        """`{"running": version, "staged": version or None}` of the DPU's NIC firmware."""
        dpu = self._dpus[dpu_id]
        return {"running": dpu.running, "staged": dpu.staged}

    def inject_update_failure(
        self, dpu_id: str, message: str = "Firmware image verification failed."
    ) -> None:
        """Make the DPU's next SimpleUpdate task end in `Exception` with this message."""
        self._dpus[dpu_id].fail_next = message
