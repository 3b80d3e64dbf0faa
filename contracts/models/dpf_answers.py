"""Answers of DPF writes that carry what the write left, for a workflow to read on from."""

from __future__ import annotations

from contracts.models.dpf import ChangeResult, DPUNodeState


class RebootAcknowledged(ChangeResult):
    """`mark_dpu_node_rebooted`'s answer: the `ChangeResult`, and the DPUNode as the write left it
    (or as the read found it, when there was nothing to write) with its resourceVersion.

    Why: a workflow reads on from it as from a read of the node as of `node_version`
    (`DPFWatch.written`): a site watch signal sent before the write holds an older DPUNode
    version and is dropped, any later one is newer and taken. `node_version` 0 (the node is
    gone, or a payload from before this field): unknown, the workflow reads afresh instead."""

    node: DPUNodeState | None = None
    node_version: int = 0
