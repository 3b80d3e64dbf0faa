"""No request for a DPU DPF no longer has, whoever asks (issue 40): the entity's rule over what its
own removals took out of DPF (`HostEntityMemory.removed_from_dpf`: DPU id, or "" for the whole
DPU node, to the removal's workflow id; state.py keeps it).

- A reprovision of a removed DPU, and a reset naming one (`host reset --dpu D`), is refused
  (`refusal`): a reprovision deletes the DPU for DPF to recreate, and a removed one never is, so
  it would wait for a hold that never comes; a reset would act on a DPU DPF no longer has.
- A reset of every DPU (`--all-dpus`, `--both`) means the DPUs DPF still has: the removed ones
  are left out (`left_out`, handed to the reset run, which names them in its details and end
  words; the entity's answer says so too: `contracts.wording.left_out_words`), and it is refused
  when the whole DPU node was removed (none is left). A host whose inventory lists no DPU but
  removed ones is refused by the reset run itself, before anything is sent (it alone reads the
  inventory: `workflows/host_reset/state.py` `chosen_dpus`).

Pure: no Temporal, no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping

from contracts import names
from contracts.errors import DPUsRemoved
from contracts.models.host import EntityRequestBody, ResetRequest, ResetTarget
from contracts.wording import left_out_words

__all__ = ["EVERY_DPU", "left_out", "left_out_words", "refusal"]

EVERY_DPU: tuple[ResetTarget, ...] = (ResetTarget.ALL_DPUS, ResetTarget.BOTH)


def refusal(
    host_id: str, removed: Mapping[str, str], operation: str, request: EntityRequestBody
) -> DPUsRemoved | None:
    """The refusal of `request` for DPUs DPF no longer has (None: none). Every DPU when a
    reprovision names none; a reset of every DPU only when the whole node was removed."""
    reset = request if isinstance(request, ResetRequest) else None
    named_reset = reset is not None and reset.target == ResetTarget.DPU
    every_dpu = reset is not None and reset.target in EVERY_DPU
    if not removed or not (operation == names.REPROVISION or named_reset or every_dpu):
        return None
    node, gone = removed.get(""), []
    if node is not None:
        what, by, dpus = f"the DPU node of {host_id}", node, ""
    elif every_dpu:
        return None  # the DPUs DPF still has: the removed ones are left out (`left_out`)
    else:
        named = request.dpu_ids or sorted(removed)
        gone = [d for d in named if d in removed]
        if not gone:
            return None
        what, dpus = ", ".join(gone), f" --dpus {','.join(gone)}"
        by = ", ".join(sorted({removed[d] for d in gone}))
    return DPUsRemoved(
        f"host {host_id}: DPF no longer has {what} (removed by {by}); {operation} refused "
        f"(bring it back with: metalflow host provision {host_id}{dpus})",
        {"dpu_ids": gone},  # empty: the whole node (every DPU named)
    )


def left_out(removed: Mapping[str, str], request: EntityRequestBody) -> dict[str, str]:
    """The DPUs a reset of every DPU (`--all-dpus`, `--both`) leaves out because DPF no longer has
    them, each with the removal that took it out; {} for every other request."""
    if not isinstance(request, ResetRequest) or request.target not in EVERY_DPU:
        return {}
    return {dpu: by for dpu, by in sorted(removed.items()) if dpu}
