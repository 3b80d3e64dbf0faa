"""What `metalflow site check` found, and the verdict it gives each capability: pure, no I/O.

`SiteFindings` is what the check read (metalflow/site_check.py gathers it, read-only); `verdicts`
turns it into one `Verdict` per capability of `CAPABILITIES` for the whole site, and `host_verdict`
the same for one host (what an operation's start consults: `metalflow host ...` refuses an
operation whose capability is blocked for its host). Each verdict names its reasons and the
behaviour rows behind them (simulators/*/BEHAVIOUR.md ids, docs/DOMAIN.md sections).

Rules, per host (`_host_rules`), each on the components an operation touches only: a DPU reset
touches the BMCs of the DPUs it resets (`dpus`), a host reset the host BMC, provision, reprovision
and firmware the host BMC and the DPUs they act on; another DPU's finding does not judge it:
- a host the check never saw (added to the site file since), or a DPU named that it never saw:
  every capability but the site's own degraded, "not checked".
- host BMC unreachable or its credentials refused: provision, reprovision, reboot, firmware (its
  activating power cycle), reset host, `--full` and `--both` blocked (each powers the host:
  DOMAIN.md 4.1; redfish F1/F3); not the Arm's own reset. With `--manual-reboot` (provision,
  reprovision, reboot) a person reboots: degraded, saying so, not blocked.
- host BMC without both PowerCycle and LastResetTime: what power cycles the host (reboot, reset
  host, provision, reprovision, firmware) degraded (power cycle by ForceOff, wait, On: slower; a
  retried cycle cannot prove it happened; redfish P1, P2); not `--full` nor `--both`, which turn
  the host off and on around the DPU resets (no cycle to prove). The rules read what each
  capability does (`actions`), so capabilities doing the same agree.
- a DPU BMC unreachable or refusing its credentials: that DPU's reset sequences and firmware
  blocked; provision and reprovision degraded (unplanned resets of that DPU are not seen;
  redfish B11).
- a DPU BMC without ForceRestart: `reset --dpu/--all-dpus` blocked (redfish B4); without
  PowerCycle: `--full` and `--both` blocked (redfish B5, B13).
- a DPU BMC without `BootProgress`: every DPU reset sequence blocked (the sequences wait for
  `OsIsRunning`, redfish B8); without `LastResetTime` nothing (no BlueField shows it, redfish B9).
- a DPU BMC without UpdateService: firmware blocked.
Per site:
- DPF unreadable or no DPU kind served: provision, reprovision, BFB and flavor campaigns blocked.
- DPF `26.4-rc.3` (no `rebootStatus`; the condition stamp): ready, said (dpf R7).
- DPF serving `security.privileged` on DPUServiceTemplates: said on provision (dpf O4).
- Grove without PodCliqueSets: rollout blocked; without PodGangMaps: blocked (the rollout reads
  them, grove G1); PodCliqueSets whose scale-out is gated: degraded (grove G5).
Per PodCliqueSet, for its rollout (`host_verdict(..., pcs=...)`; the site's verdict: every one's):
- scheduled by Grove's `default-scheduler` backend: degraded (no gang scheduling at all, grove K2);
- by `kai-scheduler` while KAI's stale-gang eviction is on: blocked (replacing one clique's pods
  gets the rest of the gang evicted, grove K4); eviction not readable: degraded, naming what to check;
- pods still naming their legacy PodGroup after the migration to PodGangMap, or the migration
  still running: blocked (replacements stay Pending, grove#837, grove K5);
- backend unknown or one the check does not judge: degraded.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from contracts.models.host import RESET_OPERATION
from metalflow.site_findings import (
    KAI_BACKEND,
    KUBE_BACKEND,
    STATUSES,
    VOLCANO_BACKEND,
    BMCFinding,
    DPFFinding,
    GroveFinding,
    PCSFinding,
    Reason,
    SiteFindings,
    Status,
    Verdict,
)

__all__ = [  # the findings' data (metalflow/site_findings.py) with the rules, for one import
    "KAI_BACKEND", "KUBE_BACKEND", "STATUSES", "VOLCANO_BACKEND", "BMCFinding", "DPFFinding",
    "GroveFinding", "PCSFinding", "Reason", "SiteFindings", "Status", "Verdict",
    "PROVISION", "REPROVISION", "REBOOT", "RESET_ARM", "RESET_FULL", "RESET_HOST", "RESET_BOTH",
    "FIRMWARE", "BFB_CAMPAIGN", "FLAVOR_CAMPAIGN", "ROLLOUT", "CAPABILITIES", "CAMPAIGN_CAPABILITY",
    "actions", "host_verdict", "blocked_hosts", "verdicts", "info", "capability_of",
]  # fmt: skip

PROVISION: Final = "provision"
REPROVISION: Final = "reprovision"
REBOOT: Final = "reboot"
RESET_ARM: Final = "reset-dpu"  # `host reset --dpu|--all-dpus`: ForceRestart (Arm only)
RESET_FULL: Final = "reset-dpu-full"  # `--full`: PowerCycle (Arm and NIC), host off around it
RESET_HOST: Final = "reset-host"
RESET_BOTH: Final = "reset-both"
FIRMWARE: Final = "firmware"
BFB_CAMPAIGN: Final = "bfb-campaign"
FLAVOR_CAMPAIGN: Final = "flavor-campaign"
ROLLOUT: Final = "rollout"
CAPABILITIES: Final = (
    PROVISION, REPROVISION, REBOOT, RESET_ARM, RESET_FULL, RESET_HOST, RESET_BOTH, FIRMWARE,
    BFB_CAMPAIGN, FLAVOR_CAMPAIGN, ROLLOUT,
)  # fmt: skip
# What each capability does to a host's components: the verdict follows these actions, never the
# capability's name, so two capabilities that do the same things to the same components (`--both`
# and `--all-dpus --full`: host ForceOff, each DPU PowerCycle, host On, each DPU's OS awaited;
# workflows/host_reset/state.py FULL_SEQUENCE) always get the same verdict on them.
CYCLE: Final = "power cycle"  # a reboot: PowerCycle, else ForceOff, wait, On; proven by LastResetTime
OFF_ON: Final = "off, then on"  # ForceOff ... On around the DPU resets: no PowerCycle, nothing to prove
HOST_BMC_ACTION: Final[dict[str, str]] = {
    PROVISION: CYCLE, REPROVISION: CYCLE, REBOOT: CYCLE, RESET_HOST: CYCLE,
    FIRMWARE: CYCLE,  # its activating power cycle
    RESET_FULL: OFF_ON, RESET_BOTH: OFF_ON,
}  # fmt: skip
# The reset each DPU's BMC is sent (then the DPU's OS is awaited: BootProgress); the Arm's own reset
# does not touch the host BMC.
DPU_RESET_ACTION: Final[dict[str, str]] = {
    RESET_ARM: "ForceRestart", RESET_FULL: "PowerCycle", RESET_BOTH: "PowerCycle",
}  # fmt: skip
DPU_BMC_USED: Final = (*DPU_RESET_ACTION, FIRMWARE)  # sent to the DPU's BMC (firmware: its update)
DPU_WATCHED: Final = (PROVISION, REPROVISION)  # the DPU's BMC read for unplanned resets (redfish B11)
HOST_POWERED: Final = tuple(HOST_BMC_ACTION)
DPU_RESETS: Final = tuple(DPU_RESET_ACTION)
MANUAL_REBOOT: Final = (PROVISION, REPROVISION, REBOOT)  # the operations `--manual-reboot` takes
SITE_ONLY: Final = (BFB_CAMPAIGN, FLAVOR_CAMPAIGN, ROLLOUT)


def actions(capability: str) -> tuple[str | None, str | None, bool]:
    """What `capability` does to a host's components: its host BMC action (`CYCLE`, `OFF_ON`,
    None), the reset its DPUs' BMCs are sent (None: none), and whether it uses the DPUs' BMCs at
    all. Capabilities with the same actions get the same verdict from `_host_rules`."""
    return HOST_BMC_ACTION.get(capability), DPU_RESET_ACTION.get(capability), capability in DPU_BMC_USED


def _worst(reasons: list[Reason]) -> Status:
    return max((r.status for r in reasons), key=STATUSES.index, default="ready")


def _host_rules(
    findings: SiteFindings,
    host_id: str,
    dpus: Collection[str] | None = None,
    manual_reboot: bool = False,
) -> dict[str, list[Reason]]:
    """Each capability's reasons on `host_id`'s components: its host BMC, and the BMCs of `dpus`
    (None: every DPU of the host); with `manual_reboot` the host BMC's findings do not stop what a
    person reboots (`MANUAL_REBOOT`)."""
    out: dict[str, list[Reason]] = {c: [] for c in CAPABILITIES}

    def add(caps: tuple[str, ...], status: Status, text: str, *rows: str) -> None:
        for cap in caps:
            out[cap].append(Reason(status, text, rows))

    host_caps = tuple(c for c in CAPABILITIES if c not in SITE_ONLY)
    seen = {b.dpu for b in findings.bmcs if b.host_id == host_id}
    if not seen:
        add(host_caps, "degraded", _not_checked(findings, f"host {host_id}", "its BMCs are"))
        return out
    for dpu in sorted(set(dpus or ()) - seen):
        add(host_caps, "degraded", _not_checked(findings, f"{host_id}: DPU {dpu}", "its BMC is"))
    host_bmcs = [b for b in findings.bmcs if b.host_id == host_id and b.dpu is None]
    dpu_bmcs = [
        b for b in findings.bmcs
        if b.host_id == host_id and b.dpu is not None and (dpus is None or b.dpu in dpus)
    ]  # fmt: skip
    powered: tuple[str, ...] = HOST_POWERED
    if manual_reboot:  # a person reboots: the host BMC is not used for these
        powered = tuple(c for c in HOST_POWERED if c not in MANUAL_REBOOT)
        for bmc in host_bmcs:
            if not bmc.usable:
                add(MANUAL_REBOOT, "degraded", _manual(host_id, bmc), "DOMAIN 4.1")
    for bmc in host_bmcs:
        if not bmc.usable:
            add(
                powered,
                "blocked",
                f"{host_id}: host {bmc.trouble()}",
                "redfish F1" if bmc.reachable else "redfish F3",
            )
            continue
        if not ("PowerCycle" in bmc.reset_types and bmc.last_reset_time):
            missing = "PowerCycle" if "PowerCycle" not in bmc.reset_types else "LastResetTime"
            add(
                tuple(c for c in powered if HOST_BMC_ACTION[c] == CYCLE),  # not OFF_ON: no cycle to prove
                "degraded",
                f"{host_id}: host BMC {bmc.bmc_id} has no {missing}: power cycles by ForceOff, wait, On "
                "(slower; a retried cycle cannot prove the first happened)",
                "redfish P1" if missing == "PowerCycle" else "redfish P2",
                "DOMAIN 4.1",
            )
    held = [b for b in dpu_bmcs if b.reachable and not b.credentials_ok and b.credentials_by == "dpf"]
    if held:  # once for the host, naming its DPUs (it repeated its advice per DPU)
        add(DPU_BMC_USED, "blocked", _dpf_managed(host_id, held), "dpf Z1", "redfish F1")
    for bmc in dpu_bmcs:
        if bmc in held:
            pass
        elif not bmc.usable:
            add(DPU_BMC_USED, "blocked", f"{host_id}: DPU {bmc.trouble()}",
                "redfish F1" if bmc.reachable else "redfish F3")  # fmt: skip
        if not bmc.usable:
            unseen = f"{host_id}: DPU {bmc.trouble()}: its unplanned resets are not seen"
            add(DPU_WATCHED, "degraded", unseen, "redfish B11")
            continue
        for reset_type, rows in (
            ("ForceRestart", ("redfish B4",)),
            ("PowerCycle", ("redfish B5", "redfish B13")),
        ):
            if reset_type not in bmc.reset_types:
                add(
                    tuple(c for c, sent in DPU_RESET_ACTION.items() if sent == reset_type),
                    "blocked",
                    f"{host_id}: DPU BMC {bmc.bmc_id} does not offer {reset_type}",
                    *rows,
                )
        if not bmc.boot_progress:
            add(DPU_RESETS, "blocked",
                f"{host_id}: DPU BMC {bmc.bmc_id} shows no BootProgress (a reset waits for OsIsRunning)",
                "redfish B8")  # fmt: skip
        if not bmc.update_service:
            add(
                (FIRMWARE,),
                "blocked",
                f"{host_id}: DPU BMC {bmc.bmc_id} serves no UpdateService",
                "redfish H6",
            )
    return out


def _not_checked(findings: SiteFindings, what: str, judged: str) -> str:
    """A host (or DPU) the kept check never saw: added to the site file since, most likely."""
    of = f" of {findings.site_file}" if findings.site_file else ""
    return (
        f"{what} was not checked: the site check{of} of {findings.checked_at} did not see it (added "
        f"since?), so {judged} not judged; run `metalflow site check`"
    )


def _manual(host_id: str, bmc: BMCFinding) -> str:
    """What a `--manual-reboot` operation says when the host BMC cannot be used."""
    return (
        f"{host_id}: host {bmc.trouble()}; with --manual-reboot metalflow does not use it: a person "
        f"reboots the host and then runs `metalflow host-rebooted {host_id}` at each reboot the "
        "operation waits for"
    )


def _dpf_managed(host_id: str, held: list[BMCFinding]) -> str:
    """Why a host's DPU BMCs refuse our credentials when DPF manages them, and what to do, once for
    the host, naming each DPU BMC and DPF's hold on it (dpf Z1)."""
    if len(held) == 1:
        bmc = held[0]
        which = f"DPU BMC {bmc.bmc_id} refuses the site file's credentials, and DPF manages this BMC's "
        which += f"credentials ({bmc.dpf_credentials})"
    else:
        which = f"DPU BMCs {', '.join(b.bmc_id for b in held)} refuse the site file's credentials, and DPF "
        which += (
            f"manages these BMCs' credentials ({'; '.join(f'{b.bmc_id}: {b.dpf_credentials}' for b in held)})"
        )
    return (
        f"{host_id}: {which}: in zero trust DPF 26.8 resets a DPU's BMC to factory "
        "defaults once at onboarding and sets its Redfish account (root on BlueField-3, admin on "
        "BlueField-4) to the password of its credential Secret (key `password`; the shared "
        "bmc-shared-password, or the DPUDevice's spec.bmcCredentialSecretName). Give the site file that "
        "account and password for each such BMC (a credential Secret with username and that password; DPF's "
        "rotations move to a new Secret name, so update it with them), or opt the device out "
        "(DPUDevice spec.bmcFactoryResetPolicy: Never) before it is onboarded; then run "
        "`metalflow site check` again"
    )


def _site_rules(findings: SiteFindings, pcs: str | None = None) -> dict[str, list[Reason]]:
    """The site's reasons; the rollout's for PodCliqueSet `pcs` (`namespace/name`) only, or for
    every PodCliqueSet read (None)."""
    out: dict[str, list[Reason]] = {c: [] for c in CAPABILITIES}
    dpf, grove = findings.dpf, findings.grove
    dpf_caps = (PROVISION, REPROVISION, BFB_CAMPAIGN, FLAVOR_CAMPAIGN)
    if not dpf.readable:
        for cap in dpf_caps:
            out[cap].append(Reason("blocked", f"DPF's API cannot be read: {dpf.error}", ("DOMAIN 2",)))
    elif not dpf.dpu_served:
        for cap in dpf_caps:
            out[cap].append(Reason("blocked", "the cluster serves no DPF DPU kind", ("dpf O1",)))
    if not grove.readable:
        out[ROLLOUT].append(Reason("blocked", f"Grove's API cannot be read: {grove.error}", ("grove N1",)))
    elif not grove.pcs_served:
        out[ROLLOUT].append(Reason("blocked", "the cluster serves no PodCliqueSet kind", ("grove N1",)))
    elif not grove.podgangmap_served:
        out[ROLLOUT].append(
            Reason(
                "blocked",
                "Grove serves no PodGangMap (older than the pin): the rollout reads them",
                ("grove G1",),
            )
        )
    gated = [g for g in grove.gated if pcs is None or g.split(" ", 1)[0] == pcs]
    if gated:
        out[ROLLOUT].append(
            Reason(
                "degraded",
                f"scale-out gated after an OnDelete template change: {', '.join(gated)}",
                ("grove G5",),
            )
        )
    if grove.readable and grove.pcs_served and grove.podgangmap_served:
        out[ROLLOUT] += _rollout_rules(grove, pcs)
    return out


def _rollout_rules(grove: GroveFinding, pcs: str | None) -> list[Reason]:
    """The coherent rollout's reasons per PodCliqueSet (issue 36 point 11): its scheduler backend,
    KAI's stale-gang eviction, the pods a migration to PodGangMap left naming their legacy
    PodGroup. A PodCliqueSet made after the check is judged by Grove's default backend."""
    targets = [p for p in grove.podcliquesets if pcs is None or p.name == pcs]
    if pcs is not None and not targets:
        targets = [PCSFinding(name=pcs, backend=grove.default_backend)]
    out: list[Reason] = []
    for found in targets:
        out += _pcs_reasons(grove, found)
    return out


def _pcs_reasons(grove: GroveFinding, found: PCSFinding) -> list[Reason]:
    name, out = found.name, []
    if found.migrating:
        text = (
            f"{name}: Grove is still migrating it to PodGangMap (condition PodGangMigrationInProgress): "
            "its PodCliques are not reconciled until that ends; wait, then run `metalflow site check` again"
        )
        out.append(Reason("blocked", text, ("grove K5",)))
    if found.legacy_count:
        more = ", ..." if found.legacy_count > len(found.legacy_pods) else ""
        text = (
            f"{name}: {found.legacy_count} pod(s) ({', '.join(found.legacy_pods)}{more}) still name their "
            "legacy PodGroup (a scheduler annotation other than their grove.io/podgang label), left by the "
            "migration to PodGangMap: replacements join a gang that counts too few members and stay Pending "
            "(grove#837). Set each pod's annotation to its grove.io/podgang label (metadata only, as "
            "grove#839 does) or upgrade Grove to a release with grove#839, then run `metalflow site check`"
        )
        out.append(Reason("blocked", text, ("grove K5",)))
    if found.backend == KUBE_BACKEND:
        text = (
            f"{name}: scheduled by Grove's default-scheduler backend, which does no gang scheduling: a "
            "replaced gang's pods are placed one by one, so part of a gang can run while the rest waits "
            "for room; for coherent steps schedule it with kai-scheduler (the cliques' "
            "podSpec.schedulerName, or Grove's scheduler.defaultProfileName)"
        )
        out.append(Reason("degraded", text, ("grove K1", "grove K2")))
    elif found.backend == KAI_BACKEND and grove.kai_eviction == "on":
        text = (
            f"{name}: scheduled by KAI, whose stale-gang eviction is on ({grove.kai_detail}): replacing "
            "one clique's pods leaves its gang short and KAI evicts the rest of the gang when the grace "
            "period ends. Turn it off: SchedulingShard spec.args.default-staleness-grace-period a negative "
            "Go duration (Helm: --set-string scheduler.args.default-staleness-grace-period=-1s; Grove's "
            "installation docs write -1, which KAI's scheduler refuses: no unit; -0s is zero, evicting at "
            "once)"
        )
        out.append(Reason("blocked", text, ("grove K4",)))
    elif found.backend == KAI_BACKEND and grove.kai_eviction != "off":
        text = (
            f"{name}: scheduled by KAI; whether its stale-gang eviction is off is unknown "
            f"({grove.kai_detail or 'not read'}): check "
            "`kubectl get schedulingshards.kai.scheduler -o yaml`: "
            "spec.args.default-staleness-grace-period must be a negative Go duration, e.g. -1s (or "
            "spec.actions.stalegangeviction.enabled false)"
        )
        out.append(Reason("degraded", text, ("grove K4",)))
    elif found.backend == "":
        text = (
            f"{name}: its scheduler backend is unknown ({grove.backend_detail or 'not read'}): check "
            "Grove's operator ConfigMap (config.yaml scheduler.defaultProfileName) and the cliques' "
            "podSpec.schedulerName"
        )
        out.append(Reason("degraded", text, ("grove K1",)))
    elif found.backend not in (KAI_BACKEND, VOLCANO_BACKEND):
        text = f"{name}: scheduled by {found.backend}, whose gang behaviour the check does not judge"
        out.append(Reason("degraded", text, ("grove K1",)))
    return out


def host_verdict(
    findings: SiteFindings,
    host_id: str | None,
    capability: str,
    *,
    pcs: str | None = None,
    dpus: Collection[str] | None = None,
    manual_reboot: bool = False,
) -> Verdict:
    """The verdict of `capability` for one host: the site's rules and those of the host's
    components the operation touches (None: the site's rules only): its host BMC where it powers
    the host (not with `manual_reboot`: a person reboots), and the BMCs of the DPUs it acts on
    (`dpus`; None: every DPU of the host). A rollout's for PodCliqueSet `pcs` (`namespace/name`;
    None: every one)."""
    if capability not in CAPABILITIES:
        raise ValueError(f"unknown capability {capability!r}; one of {', '.join(CAPABILITIES)}")
    own = _host_rules(findings, host_id, dpus, manual_reboot)[capability] if host_id is not None else []
    reasons = _site_rules(findings, pcs)[capability] + own
    return Verdict(capability, _worst(reasons), tuple(reasons))


def blocked_hosts(
    findings: SiteFindings, capability: str, *, manual_reboot: bool = False
) -> dict[str, tuple[Reason, ...]]:
    """Each checked host on which `capability` is blocked by its own components (every DPU: a
    campaign acts on them all), with those reasons: what a campaign leaves out, as `metalflow host`
    refuses it there. The site's own rules are not here (they refuse the whole campaign)."""
    out = {}
    for host_id in findings.hosts():
        reasons = _host_rules(findings, host_id, None, manual_reboot)[capability]
        if blocked := tuple(r for r in reasons if r.status == "blocked"):
            out[host_id] = blocked
    return out


def degraded_hosts(
    findings: SiteFindings, capability: str, *, manual_reboot: bool = False
) -> dict[str, tuple[Reason, ...]]:
    """Each checked host on which `capability` is degraded (not blocked) by its own components
    (every DPU), with those reasons: what a campaign's operation there says, as `metalflow host`
    says it. The site's own rules are not here (said once for the whole campaign)."""
    out = {}
    for host_id in findings.hosts():
        reasons = _host_rules(findings, host_id, None, manual_reboot)[capability]
        if any(r.status == "blocked" for r in reasons):
            continue
        if degraded := tuple(r for r in reasons if r.status == "degraded"):
            out[host_id] = degraded
    return out


def verdicts(findings: SiteFindings) -> tuple[Verdict, ...]:
    """One verdict per capability for the whole site: every host's reasons, the worst counts."""
    site = _site_rules(findings)
    per_host = [_host_rules(findings, h) for h in findings.hosts()]
    out = []
    for cap in CAPABILITIES:
        reasons = list(site[cap])
        for rules in per_host:
            reasons += rules[cap]
        out.append(Verdict(cap, _worst(reasons), tuple(reasons)))
    return tuple(out)


def info(findings: SiteFindings) -> list[str]:
    """What the check read that decides nothing but an operator should know."""
    lines = []
    dpf = findings.dpf
    if dpf.readable and dpf.version:
        stamp = {
            "26.4-rc.3": "no rebootStatus: the host reboot is read from the Rebooted condition (dpf R7)",
            "26": "rebootStatus served (dpf O2, R3)",
            "25.10": "no agentStatus, no rebootStatus (dpf O2)",
        }.get(dpf.version, "")
        lines.append(f"DPF {dpf.version}" + (f": {stamp}" if stamp else ""))
    if dpf.readable and dpf.template_privileged:
        lines.append("DPF serves security.privileged on DPUServiceTemplates (26.8+ rule, dpf O4)")
    if dpf.readable and dpf.dpu_served:
        detail = f" ({dpf.trust_detail})" if dpf.trust_detail else ""
        lines.append(f"DPF trust mode: {dpf.trust_mode or 'unknown'}{detail} (dpf Z1)")
        if dpf.strategies:
            lines.append(f"DPUDeployment strategies: {', '.join(dpf.strategies)}")
        if dpf.reboot_discovery and dpf.version != "25.10":  # 25.10 serves no agentStatus
            lines.append(f"DPU agents' reboot-method discovery: {dpf.reboot_discovery} (dpf R4)")
    by_dpf = [b.bmc_id for b in findings.bmcs if b.dpu is not None and b.credentials_by == "dpf"]
    if by_dpf:
        lines.append(f"DPU BMC credentials managed by DPF: {', '.join(by_dpf)} (dpf Z1)")
    grove = findings.grove
    if grove.readable and grove.pcs_served:
        detail = f" ({grove.backend_detail})" if grove.backend_detail else ""
        lines.append(
            f"Grove's default scheduler backend: {grove.default_backend or 'unknown'}{detail} (grove K1)"
        )
        if grove.kai_eviction:
            lines.append(f"KAI stale-gang eviction: {grove.kai_eviction} ({grove.kai_detail}) (grove K4)")
    return lines


def capability_of(
    operation: str | None, *, host_only: bool = False, both: bool = False, full: bool = False
) -> str | None:
    """The capability a `metalflow host` operation needs (None: one the check does not judge,
    e.g. `remove`). `operation` is the request's operation name (contracts/names.py; `reset`)."""
    if operation == RESET_OPERATION:
        return RESET_HOST if host_only else RESET_BOTH if both else RESET_FULL if full else RESET_ARM
    return {PROVISION: PROVISION, REPROVISION: REPROVISION, REBOOT: REBOOT, FIRMWARE: FIRMWARE}.get(
        operation or ""
    )


CAMPAIGN_CAPABILITY: Final = {
    "reprovision": REPROVISION,
    "bfb": BFB_CAMPAIGN,
    "flavor": FLAVOR_CAMPAIGN,
    "firmware": FIRMWARE,
}
"""A campaign kind (contracts/models/campaign_target.py `TargetKind`) -> the capability it needs."""
