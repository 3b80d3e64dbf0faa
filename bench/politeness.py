"""Per-BMC politeness (issue 37 item 5): the most requests any one BMC saw at once and per minute
during the bench, and the most Systems of one BMC power-cycling at once against the fleet-wide
per-BMC limit (`METALFLOW_BMC_MAX_IN_FLIGHT`, the BMC's lease).

The simulated BMCs keep the peaks themselves (`GET /sim/bmcs/<id>/load`, a test instrument of
the simulator: `simulators/redfish/load.py` says what "at once" means against BMCs that answer
at once). `bench_fleet.py` reads them, at the end, for the BMCs of metalflow's hosts only (their
host BMCs and their DPUs' BMCs; the ideal's hosts have BMCs of their own and keep no limit), and
`politeness` sums them up. Goals (`run_all.py`): `bmc_max_in_flight` <= 1, and
`bmc_max_power_cycling` <= `bmc_power_cycling_limit`.
"""

from __future__ import annotations

from typing import Any


def politeness(loads: dict[str, dict[str, int]], host_bmcs: set[str], limit: int) -> dict[str, Any]:
    """The figures from each BMC's load record (`loads`: BMC id -> its `/sim/bmcs/<id>/load`).

    Args:
        loads: Every BMC read, host BMCs (by host id) and DPU BMCs (by DPU id).
        host_bmcs: The ids in `loads` that are host BMCs (their Systems power-cycle; a DPU BMC's
            `systems_off_peak` is always 0).
        limit: The fleet-wide per-BMC limit of power cycles at once the workers ran with.

    Returns:
        `bmc_max_in_flight`, `bmc_max_per_minute`, `bmc_max_power_cycling` (None when nothing was
        read), `bmc_power_cycling_limit`, how many BMCs were read, and the BMCs at each peak
        (up to 5, for the reader: which BMC to look at).
    """
    if not loads:
        return {"bmc_max_in_flight": None, "bmc_max_per_minute": None, "bmc_max_power_cycling": None,
                "bmc_power_cycling_limit": limit, "bmcs_read": 0}  # fmt: skip

    def peak(key: str, among: dict[str, dict[str, int]]) -> tuple[int | None, list[str]]:
        if not among:
            return None, []
        most = max(load[key] for load in among.values())
        return most, sorted(bmc for bmc, load in among.items() if load[key] == most)[:5]

    in_flight, in_flight_at = peak("requests_in_flight_peak", loads)
    per_minute, per_minute_at = peak("requests_per_minute_peak", loads)
    cycling, cycling_at = peak("systems_off_peak", {b: v for b, v in loads.items() if b in host_bmcs})
    return {
        "bmc_max_in_flight": in_flight,
        "bmc_max_per_minute": per_minute,
        "bmc_max_power_cycling": cycling,
        "bmc_power_cycling_limit": limit,
        "bmcs_read": len(loads),
        "bmcs_over_one_in_flight": sum(1 for load in loads.values() if load["requests_in_flight_peak"] > 1),
        "bmc_max_in_flight_at": in_flight_at,
        "bmc_max_per_minute_at": per_minute_at,
        "bmc_max_power_cycling_at": cycling_at,
    }
