"""What a simulated BMC keeps across the simulator's restart (issue 40; redfish BEHAVIOUR.md L2),
as pure rules of `simulators/redfish/keep.py`: a transition leg in flight is kept as the state it
left plus the states still to reach, an Arm boot under way is kept as finished (a stuck UEFI
shell is not a boot), and an older snapshot that kept only the marks changes nothing else."""

from __future__ import annotations

import json

from simulators.redfish.dpu import DPUBMC
from simulators.redfish.host import PROFILES, HostBMC
from simulators.redfish.keep import LOG_KEPT, dpu_state, host_state, restore_dpu, restore_host

MARK = "2026-11-30T00:00:00Z"


def fresh_host() -> HostBMC:
    return HostBMC("host-001", PROFILES["powercycle"], MARK)


def test_a_restart_leg_in_flight_is_kept_as_the_state_it_left_and_the_states_to_reach() -> None:
    host = fresh_host()
    host.power, host.pending, host.reset_type = "PoweringOff", ("Off", "On"), "ForceRestart"
    kept = json.loads(json.dumps(host_state(host)))  # as the snapshot file holds it
    assert kept["power"] == "On"
    again = fresh_host()
    restore_host(again, kept)
    assert (again.power, again.pending, again.reset_type) == ("On", ("Off", "On"), "ForceRestart")


def test_a_host_at_rest_comes_back_at_rest_in_its_state() -> None:
    host = fresh_host()
    host.power = "Off"
    again = fresh_host()
    restore_host(again, json.loads(json.dumps(host_state(host))))
    assert (again.power, again.pending, again.reset_type) == ("Off", (), None)


def test_an_arm_boot_under_way_is_kept_finished_and_a_stuck_uefi_shell_stays_stuck() -> None:
    booting = DPUBMC("dpu-0", "host-001", "BF3", "32.43.1014")
    booting.arm, booting.running, booting.staged = "UEFI", "32.45.1020", "32.46.1100"
    stuck = DPUBMC("dpu-1", "host-001", "BF3", "32.43.1014")
    stuck.arm, stuck.paused = "UEFI", True
    again = [DPUBMC(d.dpu_id, "host-001", "BF3", "32.43.1014") for d in (booting, stuck)]
    for old, new in zip((booting, stuck), again, strict=True):
        restore_dpu(new, json.loads(json.dumps(dpu_state(old))))
    assert (again[0].arm, again[0].running, again[0].staged) == ("OsIsRunning", "32.45.1020", "32.46.1100")
    assert (again[1].arm, again[1].paused) == ("UEFI", True)


def test_an_older_snapshot_s_marks_change_only_the_marks() -> None:
    host, dpu = fresh_host(), DPUBMC("dpu-0", "host-001", "BF3", "32.43.1014")
    restore_host(host, {"last_reset_time": "2026-11-29T12:00:00Z"})
    restore_dpu(dpu, {"last_reset_time": "2026-11-29T12:00:01Z"})
    assert (host.power, host.last_reset_time) == ("On", "2026-11-29T12:00:00Z")
    assert (dpu.running, dpu.powered, dpu.arm, dpu.last_reset_time) == (
        "32.43.1014", True, "OsIsRunning", "2026-11-29T12:00:01Z",
    )  # fmt: skip


def test_the_power_log_is_kept_across_a_restart_its_newest_entries_only() -> None:
    """Attack 40f (LOW): `metalflow sim power-log` started empty after a restart on the state dir,
    so a restart rehearsed in the middle of a power cycle showed its On without the Off before
    it. The log is kept (as a BMC keeps its event log), bounded to the newest `LOG_KEPT`."""
    host = fresh_host()
    off = {"time": "2026-11-30T00:00:01Z", "from": "On", "to": "Off", "reset_type": "ForceOff"}
    host.log = [off]
    again = fresh_host()
    restore_host(again, json.loads(json.dumps(host_state(host))))
    assert again.log == [off]
    host.log = [{**off, "time": f"t{i}"} for i in range(LOG_KEPT + 5)]
    kept = json.loads(json.dumps(host_state(host)))
    restore_host(again, kept)
    assert again.log is not None and len(again.log) == LOG_KEPT and again.log[0]["time"] == "t5"
    quiet = fresh_host()  # a host that never changed power keeps no log, and gets none back
    restore_host(quiet, json.loads(json.dumps(host_state(fresh_host()))))
    assert quiet.log is None
