"""The kept `metalflow site check` as a campaign reads it, per host of its kind's operation: the
hosts it blocks (left out by the admission, `CampaignInput.site_blocked`) and those it degrades
(run, each one's request saying why, `CampaignInput.site_degraded`), grouped by why. One small
file read (metalflow/site_check.py keeps it), never the site. Split from site_check.py by role:
what a campaign takes from the findings, not how they are made."""

from __future__ import annotations

import re
from pathlib import Path

from contracts.models.campaign_facts import HOST_MARK, HostGroup
from metalflow.site_check import findings_path, load_findings, said_line
from metalflow.site_verdicts import blocked_hosts, degraded_hosts


def campaign_blocks(
    capability: str, path: Path | None = None, *, manual_reboot: bool = False
) -> tuple[HostGroup, ...]:
    """The hosts the kept check blocks `capability` on (a campaign's per-host operation), grouped
    by why, naming the finding and `metalflow site check`: a campaign's admission leaves them out
    (`CampaignInput.site_blocked`). None without a kept check; `FindingsUnreadable` as `consult`."""
    return _campaign_groups(capability, path, manual_reboot, blocked=True)


def campaign_degraded(
    capability: str, path: Path | None = None, *, manual_reboot: bool = False
) -> tuple[HostGroup, ...]:
    """The hosts the kept check degrades `capability` on (not blocked), grouped by why: a
    campaign runs them and each one's operation says it (`CampaignInput.site_degraded`: its
    request's `site_check`, so its status and `OperationStarted` Event), as `metalflow host` does.
    Each host's name (and its DPUs', `<host>-dpu-0`) is `HOST_MARK`, so hosts alike share one
    group. None without a kept check; `FindingsUnreadable` as `consult`."""
    return _campaign_groups(capability, path, manual_reboot, blocked=False)


def _campaign_groups(
    capability: str, path: Path | None, manual_reboot: bool, *, blocked: bool
) -> tuple[HostGroup, ...]:
    findings = load_findings(path or findings_path())
    if findings is None:
        return ()
    groups: dict[str, list[str]] = {}
    hosts = (blocked_hosts if blocked else degraded_hosts)(findings, capability, manual_reboot=manual_reboot)
    for host_id, reasons in hosts.items():
        said = "; ".join(said_line(r) for r in reasons)
        if blocked:
            why = (
                f"{capability} is blocked on it by the site check of {findings.checked_at}: {said} "
                "(run `metalflow site check` again once fixed)"
            )
        else:
            why = f"{capability} is degraded on {host_id} by the site check of {findings.checked_at}: {said}"
            why = re.sub(rf"(?<![\w-]){re.escape(host_id)}(?!\w)", HOST_MARK, why)
        groups.setdefault(why, []).append(host_id)
    return tuple(HostGroup(reason=why, host_ids=tuple(ids)) for why, ids in groups.items())
