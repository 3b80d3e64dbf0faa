"""The barriers of a host operation, as pure functions of one `HostDPFState`.

No Temporal API here: the workflow asks these questions of the newest state the watcher sent, and
tests ask them of hand-written states. "The DPUs" are the DPUs under the operation; safety checks
look at every DPU of the host.

Why the reboot barrier waits for EVERY DPU (docs/DOMAIN.md sections 1 and 2.5, the RFC's hard case): DPF puts
the reboot-required annotation on the DPUNode when the FIRST DPU reaches `Rebooting`; a sibling
may still be writing its OS. Power-cycling then corrupts the sibling's install. So the host is
cycled only when the annotation is present, every DPU is in `Rebooting` (or already `Ready`: it
needs no reboot), and no DPU of the host is in an install phase.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from contracts.models.dpf import (
        PHASE_DELETING,
        PHASE_ERROR,
        PHASE_NODE_EFFECT,
        PHASE_READY,
        PHASE_REBOOTING,
        DPUState,
        HostDPFState,
    )

INSTALL_PHASES: Final = frozenset({"Config FW Parameters", "Prepare BFB", "OS Installing"})
"""A host power cycle in these phases corrupts the DPU's install."""

BEFORE_HOLD: Final = frozenset({"", "Initializing", "Pending"})
"""Phases a (re)created DPU passes before DPF holds it in `Node Effect`."""


def current_dpu(state: HostDPFState, dpu_id: str, replaced_uid: str | None = None) -> DPUState | None:
    """The DPU object an operation means now: not deleting, and not the one it replaced."""
    found = state.dpu(dpu_id)
    if found is None or found.deleting or found.phase == PHASE_DELETING or found.uid == replaced_uid:
        return None
    return found


def _current(
    state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]
) -> list[tuple[str, DPUState | None]]:
    return [(d, current_dpu(state, d, replaced.get(d))) for d in dpu_ids]


def held_or_beyond(state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]) -> bool:
    """Every DPU exists (recreated where it was replaced) and has reached the hold, or gone past it
    (a restarted operation finds DPUs a previous run already released)."""
    for _, dpu in _current(state, dpu_ids, replaced):
        if dpu is None or dpu.phase in BEFORE_HOLD:
            return False
        if dpu.phase == PHASE_NODE_EFFECT and not (state.hold is not None and state.hold.holding):
            return False  # DPF has not created the hold yet: releasing now would release nothing
    return True


def any_held(state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]) -> bool:
    """Some DPU waits in `Node Effect` behind a hold that is still on."""
    holding = state.hold is not None and state.hold.holding
    current = _current(state, dpu_ids, replaced)
    return holding and any(d is not None and d.phase == PHASE_NODE_EFFECT for _, d in current)


def installing(state: HostDPFState) -> list[str]:
    """Names of the host's DPUs (any, not only the operation's) a power cycle would corrupt."""
    return [d.name for d in state.dpus if d.phase in INSTALL_PHASES]


def reboot_barrier_reached(state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]) -> bool:
    """DPF asks for the reboot, every DPU is in `Rebooting` or `Ready`, and none of the host installs."""
    if state.node is None or not state.node.waiting_for_reboot or installing(state):
        return False
    current = _current(state, dpu_ids, replaced)
    if any(d is None or d.phase not in (PHASE_REBOOTING, PHASE_READY) for _, d in current):
        return False
    return any(d is not None and d.phase == PHASE_REBOOTING for _, d in current)


def all_ready(state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]) -> bool:
    """Every DPU `Ready` (phase and condition) and DPF asks for no reboot."""
    if state.node is not None and state.node.waiting_for_reboot:
        return False
    return all(d is not None and d.ready for _, d in _current(state, dpu_ids, replaced))


def failed(state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str]) -> list[DPUState]:
    """The DPUs in `Error`."""
    return [d for _, d in _current(state, dpu_ids, replaced) if d is not None and d.phase == PHASE_ERROR]


def progress_marks(state: HostDPFState, dpu_ids: Iterable[str]) -> tuple[tuple[str, str, str, str], ...]:
    """What changes when DPF moves a DPU on after a reboot: its uid, phase and condition statuses.

    The reboot-required annotation is left out on purpose: the workflow removes it itself, and a
    signal sent just before that removal still carries it.
    """
    marks = []
    for dpu_id in dpu_ids:
        dpu = state.dpu(dpu_id)
        if dpu is None:
            marks.append((dpu_id, "", "", ""))
            continue
        conds = ",".join(f"{c.type}={c.status}/{c.reason}" for c in dpu.conditions)
        marks.append((dpu_id, dpu.uid, dpu.phase, conds))
    return tuple(marks)


def elsewhere(
    state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str], phases: Iterable[str]
) -> list[str]:
    """Where each DPU NOT in one of `phases` is, e.g. "dpu-1 in OS Installing" (an operator's first
    question about a barrier that does not move)."""
    wanted = set(phases)
    return [
        f"{dpu_id} not recreated yet" if dpu is None else f"{dpu_id} in {dpu.phase or 'no phase yet'}"
        for dpu_id, dpu in _current(state, dpu_ids, replaced)
        if dpu is None or dpu.phase not in wanted
    ]


def count(
    state: HostDPFState, dpu_ids: Iterable[str], replaced: Mapping[str, str], phases: Iterable[str]
) -> int:
    """How many of the DPUs are in one of `phases`."""
    wanted = set(phases)
    return sum(1 for _, d in _current(state, dpu_ids, replaced) if d is not None and d.phase in wanted)
