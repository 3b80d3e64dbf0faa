"""What a removal knows and what it decides; `HostRemovalWorkflow` (workflow.py) acts.

`RemovalState` holds what the run asked for and what it changed so far, and decides: whether DPF
has let go of what is removed, what is left (named in a timeout's words), what the result lists,
and what an abort leaves (taken in every phase: before the first delete nothing is deleted;
after it the deletes sent cannot be taken back, DPF finishes them, and the run stops waiting).
Pure: no Temporal, no clock, no I/O. A removal never continues as new, so its state has no data
shape in `contracts`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from contracts.models.dpf import DPURef, HostDPFState, HostRef, ObjectsResult
from contracts.models.removal import HostRemovalInput, RemovedObject

CHANGES: Final = frozenset({"deleted", "updated", "finalizers removed"})
"""The outcomes of a delete that changed something (the others: already gone, still deleting)."""


@dataclass
class RemovalState:
    """One removal: what is removed (`request.dpu_ids`: those DPUs; None: the whole DPUNode)."""

    request: HostRemovalInput
    started_at: datetime
    actions: list[RemovedObject] = field(default_factory=list)  # every object a delete touched, in order
    deleting: bool = False  # the first delete was sent: it cannot be taken back
    forced: bool = False  # finalizers had to be removed

    def what(self) -> str:
        if self.request.dpu_ids is None:
            return "the DPUNode"
        return "DPUs " + ", ".join(self.request.dpu_ids)

    def counts(self, dpu_id: str | None) -> bool:
        """Whether a DPU is one this removal waits for."""
        return self.request.dpu_ids is None or dpu_id in self.request.dpu_ids

    def gone(self, dpf: HostDPFState) -> bool:
        """Whether DPF has let go of everything removed (a node: itself and its DPUs)."""
        if self.request.dpu_ids is None:
            return dpf.node is None and not dpf.dpus
        return all(dpf.dpu(i) is None for i in self.request.dpu_ids)

    def left(self, dpf: HostDPFState | None) -> str:
        """What is still there, in words (a timeout names it)."""
        if dpf is None:
            return "no DPF state seen"
        left = [f"DPU {d.name} ({d.phase or 'no phase'})" for d in dpf.dpus if self.counts(d.dpu_id)]
        if self.request.dpu_ids is None and dpf.node is not None:
            left.insert(0, f"DPUNode {dpf.node.name}")
        return ", ".join(left) or "nothing"

    def record(self, result: ObjectsResult) -> None:
        self.actions += [RemovedObject(kind=o.kind, name=o.name, outcome=o.outcome) for o in result.objects]

    def changes(self) -> tuple[RemovedObject, ...]:
        """Every change this run made, in order (the result's `actions`)."""
        return tuple(a for a in self.actions if a.outcome in CHANGES)

    def changed(self) -> str:
        """The changes in words: what an early end leaves behind (a delete cannot be undone)."""
        return "; ".join(f"{a.kind} {a.name} {a.outcome}" for a in self.changes()) or "nothing"

    def removed(self, host: HostRef) -> tuple[str, ...]:
        """What is gone at the end, e.g. "DPUNode/node-h1", "DPU/...", "DPUDevice/device-d1"."""
        if self.request.dpu_ids is None:
            dpus = sorted({a.name for a in self.actions if a.kind == "DPU"})
            return (f"DPUNode/{host.node_name()}", *(f"DPU/{n}" for n in dpus))
        removed: list[str] = []
        for dpu_id in self.request.dpu_ids:
            ref = DPURef(host_id=host.host_id, dpu_id=dpu_id, namespace=host.namespace)
            removed += [f"DPUDevice/{ref.device_name()}", f"DPU/{ref.dpu_name()}"]
        return tuple(removed)

    def abort_leaves(self) -> str:
        """What an abort taken now leaves: nothing deleted yet, or deletes DPF finishes by itself
        (a delete cannot be taken back), the run no longer waiting for them."""
        if not self.deleting:
            return "nothing deleted"
        return (
            "the deletes sent cannot be taken back: DPF finishes them; the run stopped waiting for "
            f"{self.what()} to be gone"
        )
