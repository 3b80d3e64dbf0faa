"""What a host's entity knows of its power at rest (`workflows/host/power_rest.py` decides on it)."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from pydantic import BaseModel


class PowerAtRest(BaseModel):
    """The host's power as last read while no operation ran, and the last change nobody here made."""

    power_state: str = ""  # "": not read since metalflow last powered the host (no baseline)
    last_reset_time: datetime | None = None
    read_at: datetime | None = None
    unplanned: str = ""  # the last power change metalflow did not cause, in words ("" none seen)
    # Each DPU's reset mark (its BMC's LastResetTime, else BootProgress.LastStateTime:
    # `DPUSystemState.reset_mark`) as last read at rest, by DPU id; {}: none read since metalflow
    # last ran an operation on the host (which may reset its DPUs: no baseline).
    dpu_marks: dict[str, str] = {}


POWER_SET_SIGNAL: Final = "power_set"
"""`metalflow bmc power HOST on|off|cycle` to the host's entity once the BMC did it: a power action
through metalflow's own CLI is planned, never told as unplanned power (`power_rest.after_power_set`)."""


class PowerSet(BaseModel):
    """Signal `power_set`: what `metalflow bmc power` did to the host and when it saw it done."""

    action: str  # "on", "off", "cycle": the command's action
    power_state: str  # "On", "Off": the PowerState the command saw at its end
    at: datetime  # when the command saw it (the baseline's time)
    requested_by: str = ""  # who ran it (`$USER@hostname`), for the words of an OFF mark it clears


ITS_REBOOT_NOW_SIGNAL: Final = "its_reboot_now"
"""A reboot child's signal to the operation that started it (`HostRebootInput.tell_parent`): what
it waits for now, for that operation's own current details in the UI (`parts/reboot_rounds.py`)."""


class RebootNow(BaseModel):
    """What a reboot waits for now, in the words `host status` prints after `its reboot ID: `."""

    reboot_id: str  # the reboot's workflow id: its caller takes the words of the reboot in flight only
    phase: str
    details: str
