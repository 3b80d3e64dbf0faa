"""Whether DPF has the DPUs an operation names: the one decision `metalflow host reprovision` and
`host firmware` (metalflow/cli/inventory_check.py) and a campaign's admission (its selection's
read, drivers/campaign.py, and `workflows/campaign/admission.py`) all make, so the CLI and a
campaign cannot disagree about a host one of whose DPUs was removed from DPF (`host remove
--dpus`) or never provisioned.

Why it matters: a reprovision of such a DPU waits for a hold that never comes; a firmware run
stages its image, then ends before its power cycle (`DPUsNotInDPF`): the DPU would never be
Ready after it (issue 40). Pure: the callers read DPF's DPU objects (a DPU object that exists is
present, as the CLI always read it).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence


def not_in_dpf(wanted: Sequence[str], present: Collection[str]) -> list[str]:
    """The DPUs of `wanted` (ids, in order) DPF has no DPU object of (`present`: the ids of those
    it has)."""
    return [dpu_id for dpu_id in wanted if dpu_id not in present]


def left_out_words(host_id: str, missing: Sequence[str]) -> str:
    """Why a campaign leaves out a host DPF lacks DPUs of (what the CLI refuses, in its words)."""
    return (
        f"DPF has no DPU {', '.join(missing)} (removed, or never provisioned): its operation would "
        f"never see it Ready; provision it first (`metalflow host provision {host_id}`)"
    )
