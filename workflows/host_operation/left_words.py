"""What a reprovision that ends early (a failure, an abort, a cancel) leaves, in words: each DPU and
the host (and what an abort accepted before the hold's release leaves: `abort_leaves`) (issue 40
Deliver 2: an early end names what was done and what was left). Pure: from what the run saw
(`HostOperationState.replaced`, `seen`, `power_cycles`), no read.

- each DPU: deleted by this run (the uid it deleted) and what DPF showed of it since (recreated as
  a new object, in its phase, or not seen recreated yet: DPF recreates it), or not deleted (as it
  was);
- the generation this run reached (`reached_words`: none named when it reached none);
- the host: power-cycled by this run (how many times the BMC accepted) or not; the workflow adds
  when its reboot left the host OFF (`HostOperationWorkflow._clean_up`).
"""

from __future__ import annotations

from collections.abc import Mapping

from contracts.wording import plural

NO_GENERATION_REACHED = "No boot generation reached by this run"


def reached_words(generation: int, started_at: int, changes: list[str]) -> str:
    """The boot generation an early end reached, named only when this run reached it (the one it
    started at is a previous run's: attack 40f, an abort while waiting for the hold named it), and
    what the run changed."""
    reached = f"Boot generation {generation} reached" if generation > started_at else NO_GENERATION_REACHED
    return f"{reached}. Changed by this run: {'; '.join(changes) or 'nothing'}"


def abort_leaves(replaced: Mapping[str, str]) -> str:
    """What an abort accepted before the hold's release leaves the host in (`replaced`: the DPUs
    this run deleted)."""
    if not replaced:
        return "nothing changed on DPF: its DPUs as they were"
    return (
        f"{plural(len(replaced), 'DPU')} deleted ({', '.join(sorted(replaced))}) come back "
        "held in Node Effect, not Ready, until the host is reprovisioned again; no reboot is owed"
    )


def dpus_left(
    dpu_ids: tuple[str, ...], replaced: Mapping[str, str], seen: Mapping[str, tuple[str, str, str]]
) -> str:
    """Each DPU, in order (`replaced`: DPU id -> the uid this run deleted; `seen`: DPU id -> the
    uid, phase and agent start DPF last showed)."""
    words = []
    for dpu_id in dpu_ids:
        uid = replaced.get(dpu_id)
        if uid is None:
            words.append(f"{dpu_id} not deleted (as it was)")
            continue
        seen_uid, phase, _ = seen.get(dpu_id, ("", "", ""))
        again = (
            f"recreated by DPF (uid {seen_uid}, {phase or 'no phase yet'})"
            if seen_uid and seen_uid != uid
            else "not seen recreated yet: DPF recreates it"
        )
        words.append(f"{dpu_id} deleted (uid {uid}), {again}")
    return "; ".join(words)


def reprovision_left(
    dpu_ids: tuple[str, ...],
    replaced: Mapping[str, str],
    seen: Mapping[str, tuple[str, str, str]],
    power_cycles: int,
) -> str:
    """`Each DPU: ...; The host: ...` for a reprovision's early end (module docstring)."""
    host = (
        f"power-cycled {plural(power_cycles, 'time')} by this run"
        if power_cycles
        else "not power-cycled by this run"
    )
    return f"Each DPU: {dpus_left(dpu_ids, replaced, seen)}. The host: {host}"
