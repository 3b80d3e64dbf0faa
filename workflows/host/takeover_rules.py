"""What a host's entity must not lose with its run, and how a new entity takes it over (issue 40).

Continue-as-new carries the whole state; a run ended by hand (`temporal workflow terminate`, a
reset) carries nothing but its last memo. So the entity keeps in its memo (`names.CARRIED_MEMO`,
written when it changes) what must outlive the process holding it: the boot generation, the run
that left the host OFF (`left_off_by`), maintenance, an operator's hold on automation
(`automation_hold.py`), the instance the host is assigned to, and the DPUs its removals took out of
DPF (`removed_from_dpf`: a reprovision of them is refused). A new entity (no state handed to
it) reads the last closed run of its workflow id once at its start (`read_entity_predecessor`)
and takes that entry over (`take_over`), saying so in its status, memo and log. The boot
generation follows its one rule (`boot_generation.generation_after`: never back); what the new
entity already knows (a start's own generation, a request handled meanwhile) is kept.
Pure: no Temporal, no clock, no I/O.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from contracts.models.host import AutomationHold, EntityPredecessor, HostEntityMemory, Maintenance
from contracts.wording import iso_z
from workflows.parts.boot_generation import generation_after


def carried(memory: HostEntityMemory) -> dict[str, Any]:
    """The memo entry that outlives the run: JSON-ready, compared to write it only when it changed."""
    return {
        "boot_generation": memory.boot_generation,
        "instance": memory.instance,
        "removed_from_dpf": dict(memory.removed_from_dpf),
        "left_off_by": memory.left_off_by,
        "maintenance": memory.maintenance.model_dump(mode="json") if memory.maintenance else None,
        "automation_held_back": (
            memory.automation_held_back.model_dump(mode="json") if memory.automation_held_back else None
        ),
    }


def take_over(memory: HostEntityMemory, before: EntityPredecessor, now: datetime | None = None) -> str:
    """Take over what the predecessor's memo carried, in words ("" nothing to take: no closed
    run, or one that carried nothing, e.g. older code), saying when (`now`). Never moves the boot
    generation back and never replaces what this entity already holds. The words are shown until
    a later operation completes (`HostEntityState.finish`): what they reported is past by then."""
    entry = before.carried
    if not entry:
        return ""
    taken = []
    generation = int(entry.get("boot_generation") or 0)
    if generation > memory.boot_generation:
        memory.boot_generation = generation_after(memory.boot_generation, generation)
        taken.append(f"boot generation {memory.boot_generation}")
    if entry.get("instance") and memory.instance is None:
        memory.instance = str(entry["instance"])
        taken.append(f"instance {memory.instance}")
    removed = {
        str(dpu): str(by)
        for dpu, by in dict(entry.get("removed_from_dpf") or {}).items()
        if dpu not in memory.removed_from_dpf
    }
    if removed:
        memory.removed_from_dpf.update(removed)
        taken.append(f"removed from DPF: {', '.join(sorted(d or 'the DPU node' for d in removed))}")
    if entry.get("left_off_by") and not memory.left_off_by:
        memory.left_off_by = str(entry["left_off_by"])
        taken.append(f"the host is OFF as {memory.left_off_by} left it")
    if entry.get("maintenance") and memory.maintenance is None:
        memory.maintenance = Maintenance.model_validate(entry["maintenance"])
        taken.append(f"maintenance by {memory.maintenance.by}: {memory.maintenance.reason}")
    if entry.get("automation_held_back") and memory.automation_held_back is None:
        memory.automation_held_back = AutomationHold.model_validate(entry["automation_held_back"])
        taken.append(f"automation held back by {memory.automation_held_back.by}")
    if not taken:
        return ""
    closed = f" at {iso_z(before.closed_at)}" if before.closed_at else ""
    how = f"{before.status.lower() or 'closed'}{closed}"
    at = f" at {iso_z(now)}" if now else ""
    memory.taken_over = f"took over from run {before.run_id} ({how}){at}: {'; '.join(taken)}"
    return memory.taken_over
