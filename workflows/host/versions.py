"""What the host entity shows of a host's versions (`workflows/host/workflow.py`): its memo entry `versions`
and its `BfbVersion` search attribute, from what the entity knows: its `read_host_versions_brief`
reads merged (`versions_known.merge_versions`), or a `host versions --refresh` read (pure functions: no
I/O, deterministic).

The memo entry, shown on the entity's page in the Temporal UI (`describe().memo` for a client):

    {"read_at": "2026-11-27T03:01:53Z", "after": "reprovision/host-001 completed",
     "at_target": "no: bfb on host-001-dpu-1",
     "host_bmc_firmware": "unknown (...)",
     "dpus": {"host-001-dpu-0": {"bfb": "bf-bundle-2.9.1 (at target)", "flavor": "...",
                                 "dpu_firmware": "32.43.1014 (target 32.45.1020)",
                                 "dpu_bmc_firmware": "BF-24.10-24"}, ...}}

Each version reads `V` (no target declared), `V (at target)`, `V (target T)` or
`unknown (why)`; a DPU's firmware the entity did not read again after an operation that can have
changed it (a provision or reprovision: `versions_known.versions_scope_after`) reads `V (read
2026-11-29T10:00:00Z, before reprovision/host-001; a BFB can carry NIC firmware: --refresh reads
it)`, never as current, and counts as unknown against a target (`STALE_NOTE`); `at_target` sums
them up: `yes`, `no: FIELD on DPU, ...`, `unknown: ...` or `no targets declared`. A read that
failed as a whole shows `unknown (why)` for every field.

Bounded: at most `DPU_LIMIT` DPUs (the rest counted in `dpus_not_shown`; `metalflow host
versions HOST` lists them all), each text cut to `TEXT_LIMIT` characters, at most `DPU_LIMIT`
values in `BfbVersion`: a few KB whatever the host.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, Final

from temporalio import workflow
from temporalio.common import RetryPolicy, SearchAttributeUpdate

with workflow.unsafe.imports_passed_through():
    from contracts import names
    from contracts.models.inventory import HostVersionsBrief
    from contracts.wording import iso_z
    from workflows import kernel

VERSIONS_READ_SECONDS = 300.0
"""A versions read gives up after this (its retries included) and shows `unknown`."""
VERSIONS_READ: workflow.ActivityConfig = {
    **kernel.bounded(kernel.BMC_READ, VERSIONS_READ_SECONDS),
    # A worker without the activity (a stand-in, an older build) answers NotFoundError: the read
    # is for show, so it ends at once as `unknown` instead of holding continue-as-new 300 s.
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=kernel.BMC_ATTEMPTS,
        non_retryable_error_types=[*kernel.NON_RETRYABLE, "NotFoundError"],
    ),
}

MEMO_KEY: Final = "versions"
DPU_LIMIT: Final = 8
TEXT_LIMIT: Final = 120
UNKNOWN: Final = "unknown"
DPF_FIELDS: Final = ("bfb", "flavor")  # the rest from the DPU's BMC
DPU_FIELDS: Final = (*DPF_FIELDS, "dpu_firmware", "dpu_bmc_firmware")
STALE_NOTE: Final = "a BFB can carry NIC firmware: --refresh reads it"
"""Why a DPU's firmware read before a provision or reprovision is not shown as current."""


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_LIMIT else text[: TEXT_LIMIT - 3] + "..."


def _shown(value: str | None, target: str, why: str) -> tuple[str, str | None]:
    """The text of one version and its verdict: None (no target), "at", "off" or "unknown"."""
    if value is None:
        return _cut(f"{UNKNOWN} ({why or 'not reported'})"), UNKNOWN if target else None
    if not target:
        return _cut(value), None
    if value == target:
        return _cut(f"{value} (at target)"), "at"
    return _cut(f"{value} (target {target})"), "off"


def _read_before(value: str, read_at: datetime | None, before: str) -> str:
    """A firmware known from a read before `before`, which can have changed it: never current."""
    when = f"read {iso_z(read_at)}, " if read_at is not None else ""
    return f"{value[:40]} ({when}before {before[:60]}; {STALE_NOTE})"


def _summary(verdicts: list[tuple[str, str, str | None]]) -> str:
    judged = [(field, where, v) for field, where, v in verdicts if v is not None]
    if not judged:
        return "no targets declared"
    off = [f"{field} on {where}" for field, where, v in judged if v == "off"]
    unknown = [f"{field} on {where}" for field, where, v in judged if v == UNKNOWN]
    if off:
        return _cut("no: " + ", ".join(off + [f"{u} unknown" for u in unknown]))
    if unknown:
        return _cut("unknown: " + ", ".join(unknown))
    return "yes"


def memo_of(brief: HostVersionsBrief, after: str, now: datetime) -> dict[str, Any]:
    """The memo entry for a read that answered (a source it could not read shows `unknown`)."""
    versions, targets = brief.versions, brief.targets
    dpf_errors = [e for e in versions.errors if not e.startswith("host BMC")]
    verdicts: list[tuple[str, str, str | None]] = []
    dpus: dict[str, dict[str, str]] = {}
    for dpu in versions.dpus[:DPU_LIMIT]:
        bmc = [e for e in dpu.errors if "BMC" in e]
        why = {"dpf": "; ".join([e for e in dpu.errors if e not in bmc] + dpf_errors), "bmc": "; ".join(bmc)}
        shown: dict[str, str] = {}
        for field in DPU_FIELDS:
            source = why["dpf" if field in DPF_FIELDS else "bmc"]
            value = getattr(dpu, field)
            if field not in DPF_FIELDS and dpu.firmware_read_before and value is not None:
                text = _read_before(value, dpu.firmware_read_at, dpu.firmware_read_before)
                verdict = UNKNOWN if getattr(targets, field) else None
            else:
                text, verdict = _shown(value, getattr(targets, field), source)
            shown[field] = text
            verdicts.append((field, dpu.dpu_id, verdict))
        dpus[_cut(dpu.dpu_id)] = shown
    host_why = "; ".join(e for e in versions.errors if e.startswith("host BMC"))
    host_bmc, verdict = _shown(versions.host_bmc_firmware, targets.host_bmc_firmware, host_why)
    verdicts.append(("host_bmc_firmware", "the host", verdict))
    memo: dict[str, Any] = {
        "read_at": iso_z(now),
        "after": _cut(after),
        "at_target": _summary(verdicts),
        "host_bmc_firmware": host_bmc,
        "dpus": dpus,
    }
    if len(versions.dpus) > DPU_LIMIT:
        memo["dpus_not_shown"] = len(versions.dpus) - DPU_LIMIT
    return memo


def unknown_memo(why: str, after: str, now: datetime) -> dict[str, Any]:
    """The memo entry for a read that failed as a whole (the entity goes on)."""
    text = _cut(f"{UNKNOWN} ({why})")
    return {
        "read_at": iso_z(now),
        "after": _cut(after),
        "at_target": text,
        "host_bmc_firmware": text,
        "dpus": {},
    }


def bfb_attribute(brief: HostVersionsBrief | None) -> SearchAttributeUpdate[Any]:
    """`BfbVersion`: every BFB the DPUs run, sorted (`unknown` for one not read; the whole read
    failed: `unknown`); unset for a host without DPUs."""
    if brief is None:
        return names.BFB_VERSION.value_set([UNKNOWN])
    found = sorted({(d.bfb or UNKNOWN)[:TEXT_LIMIT] for d in brief.versions.dpus})[:DPU_LIMIT]
    return names.BFB_VERSION.value_set(found) if found else names.BFB_VERSION.value_unset()
