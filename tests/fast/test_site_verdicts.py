"""`metalflow site check`'s pure verdicts (metalflow/site_verdicts.py): capability x findings ->
ready / degraded / blocked, each reason with its behaviour row; and what an operation's start
reads from the kept findings (metalflow/site_check.py `consult_words`); what the check makes of
the cluster's answers (metalflow/site_readings.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from metalflow.site_check import consult_words, load_findings, save_findings
from metalflow.site_readings import (
    GROVE_CONFIG_SELECTOR,
    dpf_credentials,
    dpuset_strategies,
    grove_default_backend,
    kai_eviction,
    pcs_findings,
    trust_mode,
)
from metalflow.site_verdicts import (
    CAPABILITIES,
    BMCFinding,
    DPFFinding,
    GroveFinding,
    PCSFinding,
    SiteFindings,
    capability_of,
    host_verdict,
    verdicts,
)

HOST_TYPES = ("On", "ForceOff", "GracefulShutdown", "ForceRestart", "PowerCycle")
DPU_TYPES = ("GracefulRestart", "ForceRestart", "GracefulShutdown", "PowerCycle", "On")


def host_bmc(host: str = "h1", **changes: object) -> BMCFinding:
    bmc = BMCFinding(
        bmc_id=host, host_id=host, reset_types=HOST_TYPES, last_reset_time=True, update_service=True
    )
    return dataclasses.replace(bmc, **changes)  # type: ignore[arg-type]


def dpu_bmc(host: str = "h1", **changes: object) -> BMCFinding:
    bmc = BMCFinding(bmc_id=f"{host}-dpu-0", host_id=host, dpu=f"{host}-dpu-0", reset_types=DPU_TYPES,
                     boot_progress=True, update_service=True)  # fmt: skip
    return dataclasses.replace(bmc, **changes)  # type: ignore[arg-type]


def site(*bmcs: BMCFinding, dpf: DPFFinding | None = None, grove: GroveFinding | None = None) -> SiteFindings:
    return SiteFindings(
        site="s",
        checked_at="2026-11-29T07:00:00Z",
        bmcs=bmcs or (host_bmc(), dpu_bmc()),
        dpf=dpf or DPFFinding(version="26"),
        grove=grove or GroveFinding(),
    )


def statuses(findings: SiteFindings) -> dict[str, str]:
    return {v.capability: v.status for v in verdicts(findings)}


def changed(findings: SiteFindings) -> dict[str, tuple[str, tuple[str, ...]]]:
    """The capabilities not ready: their status and every row named."""
    return {
        v.capability: (v.status, tuple(row for r in v.reasons for row in r.rows))
        for v in verdicts(findings)
        if v.status != "ready"
    }


def test_a_site_with_everything_is_ready_for_everything() -> None:
    assert set(statuses(site()).values()) == {"ready"}
    assert tuple(statuses(site())) == CAPABILITIES


def test_a_host_bmc_refusing_its_credentials_blocks_what_powers_the_host_not_the_arms_reset() -> None:
    found = changed(site(host_bmc(credentials_ok=False, error="401"), dpu_bmc()))
    powered = ("provision", "reprovision", "reboot", "reset-dpu-full", "reset-host", "reset-both", "firmware")
    assert found == {cap: ("blocked", ("redfish F1",)) for cap in powered}  # firmware: its power cycle


def test_an_unreachable_host_bmc_names_the_unreachable_row() -> None:
    assert changed(site(host_bmc(reachable=False), dpu_bmc()))["reboot"] == ("blocked", ("redfish F3",))


@pytest.mark.parametrize("missing", ["PowerCycle", "LastResetTime"])
def test_a_host_bmc_without_a_provable_power_cycle_degrades_the_power_cycles(missing: str) -> None:
    bmc = (
        host_bmc(reset_types=tuple(t for t in HOST_TYPES if t != "PowerCycle"))
        if missing == "PowerCycle"
        else host_bmc(last_reset_time=False)
    )
    found = changed(site(bmc, dpu_bmc()))
    # Not --full nor --both: they turn the host off and on around the DPU resets, no cycle to prove.
    assert set(found) == {"provision", "reprovision", "reboot", "reset-host", "firmware"}
    assert {status for status, _ in found.values()} == {"degraded"}
    row = "redfish P1" if missing == "PowerCycle" else "redfish P2"  # not H2: a firmware row
    assert all(row in rows for _, rows in found.values())
    assert missing in verdicts(site(bmc, dpu_bmc()))[2].reasons[0].text


SAME_ACTIONS_VARIANTS = {
    "clean": (host_bmc(), dpu_bmc()),
    "host BMC without PowerCycle": (host_bmc(reset_types=("On", "ForceOff", "ForceRestart")), dpu_bmc()),
    "host BMC without LastResetTime": (host_bmc(last_reset_time=False), dpu_bmc()),
    "host BMC refusing": (host_bmc(credentials_ok=False, error="401"), dpu_bmc()),
    "host BMC unreachable": (host_bmc(reachable=False), dpu_bmc()),
    "DPU BMC without PowerCycle": (host_bmc(), dpu_bmc(reset_types=("ForceRestart", "On"))),
    "DPU BMC without ForceRestart": (host_bmc(), dpu_bmc(reset_types=("PowerCycle",))),
    "DPU BMC without BootProgress": (host_bmc(), dpu_bmc(boot_progress=False)),
    "DPU BMC without UpdateService": (host_bmc(), dpu_bmc(update_service=False)),
    "DPU BMC unreachable": (host_bmc(), dpu_bmc(reachable=False)),
    "DPU BMC held by DPF": (host_bmc(), dpu_bmc(credentials_ok=False, credentials_by="dpf")),
    "two DPUs, one dead": (
        host_bmc(),
        dpu_bmc(),
        dpu_bmc(bmc_id="h1-dpu-1", dpu="h1-dpu-1", reachable=False),
    ),
}


@pytest.mark.parametrize("variant", SAME_ACTIONS_VARIANTS)
def test_reset_both_and_all_dpus_full_get_one_verdict_as_they_do_the_same(variant: str) -> None:
    """`--both` and `--all-dpus --full` send the same power actions to the same components (host
    ForceOff, each DPU PowerCycle, host On, each DPU's OS awaited: the workflow's own decision
    says so below), so the check judges them alike on every finding; a host BMC without
    PowerCycle once degraded `--both` only."""
    from contracts.models.host import ResetTarget
    from workflows.host_reset import state as sequence

    both, full = (ResetTarget.BOTH, False), (ResetTarget.ALL_DPUS, True)
    assert sequence.full_reset(*both) and sequence.full_reset(*full)
    assert sequence.dpu_reset_type(*both) == sequence.dpu_reset_type(*full) == "PowerCycle"
    findings = site(*SAME_ACTIONS_VARIANTS[variant])
    said = [host_verdict(findings, "h1", cap) for cap in ("reset-both", "reset-dpu-full")]
    assert said[0].status == said[1].status and said[0].reasons == said[1].reasons, said
    by_site = {v.capability: v for v in verdicts(findings)}
    assert by_site["reset-both"].status == by_site["reset-dpu-full"].status


def test_a_dpu_bmc_without_powercycle_blocks_the_full_sequences_only() -> None:
    found = changed(site(host_bmc(), dpu_bmc(reset_types=("ForceRestart", "On"))))
    assert found == {
        "reset-dpu-full": ("blocked", ("redfish B5", "redfish B13")),
        "reset-both": ("blocked", ("redfish B5", "redfish B13")),
    }


def test_a_dpu_bmc_without_forcerestart_blocks_the_arm_reset() -> None:
    assert changed(site(host_bmc(), dpu_bmc(reset_types=("PowerCycle",)))) == {
        "reset-dpu": ("blocked", ("redfish B4",))
    }


def test_an_unreachable_dpu_bmc_blocks_its_resets_and_firmware_and_degrades_provisioning() -> None:
    found = changed(site(host_bmc(), dpu_bmc(reachable=False)))
    assert found == {
        "reset-dpu": ("blocked", ("redfish F3",)),
        "reset-dpu-full": ("blocked", ("redfish F3",)),
        "reset-both": ("blocked", ("redfish F3",)),
        "firmware": ("blocked", ("redfish F3",)),
        "provision": ("degraded", ("redfish B11",)),
        "reprovision": ("degraded", ("redfish B11",)),
    }


def test_a_dpu_bmc_without_bootprogress_blocks_the_dpu_resets() -> None:
    found = changed(site(host_bmc(), dpu_bmc(boot_progress=False)))
    assert found == {
        cap: ("blocked", ("redfish B8",)) for cap in ("reset-dpu", "reset-dpu-full", "reset-both")
    }


def test_a_dpu_bmc_without_updateservice_blocks_firmware() -> None:
    assert changed(site(host_bmc(), dpu_bmc(update_service=False))) == {
        "firmware": ("blocked", ("redfish H6",))
    }


def test_a_host_bmc_without_updateservice_blocks_nothing() -> None:
    assert changed(site(host_bmc(update_service=False), dpu_bmc())) == {}


def test_dpf_unreadable_or_not_served_blocks_provisioning_and_the_campaigns() -> None:
    dpf_caps = {"provision", "reprovision", "bfb-campaign", "flavor-campaign"}
    assert set(changed(site(dpf=DPFFinding(readable=False, error="refused")))) == dpf_caps
    assert set(changed(site(dpf=DPFFinding(dpu_served=False)))) == dpf_caps


def test_grove_without_podgangmap_blocks_the_rollout_and_a_gated_scale_out_degrades_it() -> None:
    assert changed(site(grove=GroveFinding(podgangmap_served=False))) == {
        "rollout": ("blocked", ("grove G1",))
    }
    assert changed(site(grove=GroveFinding(pcs_served=False)))["rollout"][0] == "blocked"
    assert changed(site(grove=GroveFinding(gated=("ns/pcs",)))) == {"rollout": ("degraded", ("grove G5",))}


def test_blocked_outranks_degraded() -> None:
    bmc = host_bmc(reset_types=("On", "ForceOff"))  # degraded
    both = {v.capability: v for v in verdicts(site(bmc, dpu_bmc(reachable=False)))}
    assert both["firmware"].status == "blocked"  # its power cycle degraded, its DPU's BMC blocks it
    assert {r.status for r in both["firmware"].reasons} == {"blocked", "degraded"}


def test_a_hosts_verdict_has_only_its_own_bmcs_and_the_sites_reasons() -> None:
    findings = site(host_bmc("h1"), dpu_bmc("h1"), host_bmc("h2", reachable=False), dpu_bmc("h2"),
                    grove=GroveFinding(podgangmap_served=False))  # fmt: skip
    assert host_verdict(findings, "h1", "reboot").status == "ready"
    assert host_verdict(findings, "h2", "reboot").status == "blocked"
    assert host_verdict(findings, "h1", "rollout").status == "blocked"
    with pytest.raises(ValueError, match="unknown capability 'nope'"):
        host_verdict(findings, "h1", "nope")


def two_dpus(*, dead: str = "h1-dpu-0", host: BMCFinding | None = None) -> SiteFindings:
    """h1 with two DPUs, the BMC of `dead` unreachable."""
    return site(
        host or host_bmc(),
        dpu_bmc(reachable=dead != "h1-dpu-0"),
        dpu_bmc(bmc_id="h1-dpu-1", dpu="h1-dpu-1", reachable=dead != "h1-dpu-1"),
    )


def test_an_operation_is_judged_by_the_components_it_touches_only() -> None:
    """Issue 36 (re-attack): H-dpu-0's dead BMC refused `reset --dpu H-dpu-1`. A DPU reset touches
    that DPU's BMC, a host reset the host BMC, reprovision and firmware the host BMC and the DPUs
    they act on."""
    findings = two_dpus()
    for cap in ("reset-dpu", "reset-dpu-full", "firmware"):
        assert host_verdict(findings, "h1", cap, dpus=("h1-dpu-1",)).status == "ready", cap
        assert host_verdict(findings, "h1", cap, dpus=("h1-dpu-0",)).status == "blocked", cap
        assert host_verdict(findings, "h1", cap).status == "blocked", cap  # every DPU (--all-dpus)
    assert host_verdict(findings, "h1", "reprovision", dpus=("h1-dpu-1",)).status == "ready"
    assert host_verdict(findings, "h1", "reprovision").status == "degraded"
    assert host_verdict(findings, "h1", "reset-host").status == "ready"  # the host BMC only
    assert host_verdict(findings, "h1", "reset-both").status == "blocked"  # every DPU
    dead_host = two_dpus(dead="none", host=host_bmc(reachable=False))
    assert host_verdict(dead_host, "h1", "reset-dpu", dpus=("h1-dpu-0",)).status == "ready"  # the Arm's own
    for cap in ("reset-dpu-full", "firmware", "reprovision", "reset-host"):  # each powers the host
        assert host_verdict(dead_host, "h1", cap, dpus=("h1-dpu-0",)).status == "blocked", cap


def test_a_manual_reboot_is_not_refused_by_the_host_bmc_and_says_a_person_reboots(tmp_path: Path) -> None:
    """Issue 36 (re-attack): `--manual-reboot`, README's answer to a dead host BMC, was refused by
    that host BMC's block. A person reboots: it runs, degraded, saying so."""
    path = tmp_path / "site-check.json"
    save_findings(path, site(host_bmc(credentials_ok=False, error="401"), dpu_bmc()))
    for operation in ("reboot", "provision", "reprovision"):
        assert consult_words("h1", operation, path)[0], operation
        refuse, lines = consult_words("h1", operation, path, manual_reboot=True)
        assert not refuse, (operation, lines)
        assert lines[0].startswith(f"{operation} is degraded on h1 by the site check of"), lines
        assert "a person reboots the host" in lines[1] and "`metalflow host-rebooted h1`" in lines[1], lines
        assert "refuses the stored credentials" in lines[1], lines
    # without a host BMC finding against it a manual reboot says nothing; its DPUs still count
    save_findings(path, site(host_bmc(), dpu_bmc(reachable=False)))
    assert consult_words("h1", "reboot", path, manual_reboot=True) == (False, [])
    assert "[redfish B11]" in consult_words("h1", "provision", path, manual_reboot=True)[1][1]


def test_every_operation_maps_to_its_capability() -> None:
    assert capability_of("provision") == "provision"
    assert capability_of("reprovision") == "reprovision"
    assert capability_of("reboot") == "reboot"
    assert capability_of("firmware") == "firmware"
    assert capability_of("remove") is None
    assert capability_of("reset") == "reset-dpu"
    assert capability_of("reset", full=True) == "reset-dpu-full"
    assert capability_of("reset", host_only=True) == "reset-host"
    assert capability_of("reset", both=True) == "reset-both"


def test_findings_survive_their_file(tmp_path: Path) -> None:
    findings = site(host_bmc(), dpu_bmc(), grove=GroveFinding(gated=("a/b",)))
    save_findings(tmp_path / "site-check.json", findings)
    loaded = SiteFindings.from_json(json.loads((tmp_path / "site-check.json").read_text()))
    assert loaded == findings


def test_an_operations_start_refuses_blocked_says_degraded_and_is_silent_without_a_check(
    tmp_path: Path,
) -> None:
    path = tmp_path / "site-check.json"
    assert consult_words("h1", "reboot", path) == (False, [])  # no check kept: runs as before
    save_findings(path, site(host_bmc(reachable=False), dpu_bmc()))
    refuse, lines = consult_words("h1", "reboot", path)
    assert refuse and "reboot is blocked on h1" in lines[0] and "metalflow site check" in lines[0]
    assert "[redfish F3]" in lines[1]
    assert consult_words("h1", "reset-dpu", path) == (False, [])  # the Arm's reset needs no host BMC
    assert consult_words("h1", None, path) == (False, [])  # remove: not judged
    save_findings(path, site(host_bmc(last_reset_time=False), dpu_bmc()))
    refuse, lines = consult_words("h1", "reboot", path)
    assert not refuse and "reboot is degraded on h1" in lines[0]
    # A kept check that cannot be read refuses (an attack truncated it and operations ran as if
    # none was kept: a gate that fails open); `None` capabilities (remove) are still not judged.
    # valid JSON but not the object a check keeps crashed readers (AttributeError) instead
    for broken in ("{not json", '{"site": "attack", "checked_at": ', '{"site": "a"}', "[]", "7", '"x"',
                   '{"site": "a", "checked_at": "t", "bmcs": ["x"]}'):  # fmt: skip
        path.write_text(broken)
        refuse, lines = consult_words("h1", "reboot", path)
        assert refuse and lines[0].startswith("the kept site check cannot be read ("), lines
        assert str(path) in lines[0] and "metalflow site check" in lines[0], lines
    assert consult_words("h1", None, path) == (False, [])


def test_a_gated_podcliqueset_is_one_with_scaling_groups_and_an_anchor_at_another_hash() -> None:
    from metalflow.site_check import gated_podcliquesets

    def pcs(name: str, groups: bool, current: str = "h2") -> dict[str, object]:
        template = {"cliques": [], **({"podCliqueScalingGroups": [{"name": "g"}]} if groups else {})}
        return {"metadata": {"namespace": "ns", "name": name}, "spec": {"template": template},
                "status": {"currentGenerationHash": current}}  # fmt: skip

    def gang_map(owner: str, replica: int, anchor_hash: str) -> dict[str, object]:
        entry = {"role": "Anchor", "anchorIndex": 0, "podCliqueSetGenerationHash": anchor_hash}
        return {"metadata": {"namespace": "ns", "name": f"{owner}-{replica}",
                             "labels": {"app.kubernetes.io/part-of": owner}},
                "spec": {"podCliqueSetReplicaIndex": replica, "entries": [entry]}}  # fmt: skip

    items = [pcs("a", True), pcs("b", False), pcs("c", True)]
    maps = [gang_map("a", 0, "h1"), gang_map("a", 1, "h2"), gang_map("b", 0, "h1"), gang_map("c", 0, "h2")]
    assert gated_podcliquesets(items, maps) == ("ns/a (replica(s) 0)",)


def test_an_old_check_is_obeyed_and_said_to_be_old(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    path = tmp_path / "site-check.json"
    save_findings(path, site())  # checked 2026-11-29T07:00:00Z, everything ready
    assert consult_words("h1", "reboot", path, now=datetime(2026, 11, 29, 8, tzinfo=UTC)) == (False, [])
    later = datetime(2026, 12, 1, 7, tzinfo=UTC)
    assert consult_words("h1", "reboot", path, now=later) == (
        False,
        ["the site check of 2026-11-29T07:00:00Z is 48 h old: run `metalflow site check`"],
    )
    save_findings(path, site(host_bmc(reachable=False), dpu_bmc()))
    refuse, lines = consult_words("h1", "reboot", path, now=later)
    assert refuse and lines[-1].endswith("is 48 h old: run `metalflow site check`")


def test_bad_input_is_refused_naming_it_and_keeps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from metalflow.cli import main

    monkeypatch.setenv("METALFLOW_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("METALFLOW_INVENTORY", "site")
    assert main(["site", "check", "--site", str(tmp_path / "none.yaml")]) == 2
    for bad in (["--concurrency", "0"], ["--timeout", "-1"]):
        with pytest.raises(SystemExit) as usage:  # argparse's usage error: the `metalflow` script's 2
            main(["site", "check", *bad])
        assert usage.value.code == 2
    assert not (tmp_path / "site-check.json").exists()
    monkeypatch.setenv("METALFLOW_INVENTORY", "cluster")
    assert main(["site", "check"]) == 2


def test_a_rollout_or_campaign_reads_the_sites_own_rules(tmp_path: Path) -> None:
    from contracts.models.campaign_target import TargetKind
    from metalflow.site_verdicts import CAMPAIGN_CAPABILITY

    assert set(CAMPAIGN_CAPABILITY) == {str(kind) for kind in TargetKind}  # every kind judged
    path = tmp_path / "site-check.json"
    save_findings(
        path, site(host_bmc(reachable=False), dpu_bmc(), grove=GroveFinding(podgangmap_served=False))
    )
    refuse, lines = consult_words(None, "rollout", path)
    assert refuse and lines[0].startswith("rollout is blocked on the site by the site check of")
    assert consult_words(None, "reprovision", path) == (False, [])  # a host's BMC is the host's
    save_findings(path, site(dpf=DPFFinding(readable=False, error="refused")))
    assert consult_words(None, CAMPAIGN_CAPABILITY["bfb"], path)[0]


# -- the coherent rollout's scheduling (issue 36 point 11; grove BEHAVIOUR.md K1-K5) ---------------
def grove(*pcs: PCSFinding, **changes: object) -> GroveFinding:
    found = GroveFinding(default_backend="kai-scheduler", kai_eviction="off", kai_detail="shard default: off",
                         podcliquesets=pcs or (PCSFinding("ns/a", "kai-scheduler"),))  # fmt: skip
    return dataclasses.replace(found, **changes)  # type: ignore[arg-type]


def rollout(found: GroveFinding, pcs: str | None = None) -> tuple[str, tuple[str, ...], str]:
    verdict = host_verdict(site(grove=found), None, "rollout", pcs=pcs)
    return (
        verdict.status,
        tuple(row for r in verdict.reasons for row in r.rows),
        " ".join(r.text for r in verdict.reasons),
    )


def test_kai_with_stale_gang_eviction_off_is_ready_on_blocked_unknown_degraded() -> None:
    assert rollout(grove())[:2] == ("ready", ())
    status, rows, text = rollout(grove(kai_eviction="on", kai_detail="SchedulingShard default: unset"))
    assert (status, rows) == ("blocked", ("grove K4",))
    assert "evicts the rest of the gang" in text and "default-staleness-grace-period=-1s" in text
    status, rows, text = rollout(grove(kai_eviction="unknown", kai_detail="cannot list: 403"))
    assert (status, rows) == ("degraded", ("grove K4",))
    assert "unknown (cannot list: 403): check `kubectl get schedulingshards.kai.scheduler" in text


def test_grove_default_scheduler_does_no_gang_scheduling_and_degrades_the_rollout() -> None:
    status, rows, text = rollout(grove(PCSFinding("ns/a", "default-scheduler"), kai_eviction=""))
    assert (status, rows) == ("degraded", ("grove K1", "grove K2"))
    assert "does no gang scheduling" in text
    # eviction on matters only to a PodCliqueSet under KAI
    assert rollout(grove(PCSFinding("ns/a", "default-scheduler"), kai_eviction="on"))[0] == "degraded"
    assert rollout(grove(PCSFinding("ns/a", "volcano")))[:2] == ("ready", ())
    assert rollout(grove(PCSFinding("ns/a", "")))[:2] == ("degraded", ("grove K1",))


def test_pods_left_on_a_legacy_podgroup_or_a_running_migration_block_the_rollout() -> None:
    legacy = PCSFinding("ns/a", "kai-scheduler", legacy_count=5, legacy_pods=("p1", "p2", "p3"))
    status, rows, text = rollout(grove(legacy))
    assert (status, rows) == ("blocked", ("grove K5",))
    assert "5 pod(s) (p1, p2, p3, ...)" in text and "grove#837" in text
    assert rollout(grove(PCSFinding("ns/a", "kai-scheduler", migrating=True)))[:2] == (
        "blocked",
        ("grove K5",),
    )


def test_a_rollout_is_judged_by_its_own_podcliqueset_and_a_new_one_by_the_default_backend() -> None:
    found = grove(
        PCSFinding("ns/bad", "kai-scheduler", legacy_count=1, legacy_pods=("p",)),
        PCSFinding("ns/kube", "default-scheduler"),
        PCSFinding("ns/good", "kai-scheduler"),
    )
    assert rollout(found)[0] == "blocked"  # the site's verdict: every PodCliqueSet's reasons
    assert rollout(found, "ns/good")[:2] == ("ready", ())
    assert rollout(found, "ns/kube")[0] == "degraded"
    assert rollout(found, "ns/bad")[0] == "blocked"
    assert rollout(found, "ns/new")[:2] == ("ready", ())  # made after the check: Grove's default, KAI
    assert rollout(dataclasses.replace(found, default_backend=""), "ns/new")[0] == "degraded"
    gated = dataclasses.replace(found, gated=("ns/bad (replica(s) 0)",))
    assert rollout(gated, "ns/good")[:2] == ("ready", ())  # G5 is the gated PodCliqueSet's only


def test_kai_stale_gang_eviction_is_read_from_the_scheduling_shards() -> None:
    def shard(name: str, **spec: object) -> dict[str, object]:
        return {"metadata": {"name": name}, "spec": spec}

    assert kai_eviction([]) == ("unknown", "no KAI SchedulingShard found")
    assert kai_eviction([shard("default", args={"default-staleness-grace-period": "-1s"})])[0] == "off"
    assert kai_eviction([shard("default", actions={"stalegangeviction": {"enabled": False}})])[0] == "off"
    state, detail = kai_eviction([shard("default")])
    assert state == "on" and "unset, KAI's default 60s" in detail
    state, detail = kai_eviction(
        [
            shard("a", args={"default-staleness-grace-period": "-1s"}),
            shard("b", args={"default-staleness-grace-period": "5m"}),
        ]
    )
    assert state == "on" and detail == "SchedulingShard b: default-staleness-grace-period 5m"


def test_groves_default_backend_is_read_from_its_operator_configmap() -> None:
    def cm(name: str, config: str) -> dict[str, object]:
        return {"metadata": {"namespace": "grove-system", "name": name}, "data": {"config.yaml": config}}

    unset = cm(
        "grove-operator-cm-1", "scheduler:\n  profiles: [{name: default-scheduler}, {name: kai-scheduler}]\n"
    )
    kai = cm("grove-operator-cm-2", "scheduler:\n  defaultProfileName: kai-scheduler\n")
    assert grove_default_backend([unset]) == (  # SetDefaults_SchedulerConfiguration
        "default-scheduler",
        # one truth (it read "default-scheduler (unset: Grove's default)": set and unset at once)
        "ConfigMap grove-system/grove-operator-cm-1, scheduler.defaultProfileName unset, so Grove's "
        "default default-scheduler",
    )
    assert grove_default_backend([kai]) == (
        "kai-scheduler",
        "ConfigMap grove-system/grove-operator-cm-2, scheduler.defaultProfileName kai-scheduler",
    )
    assert grove_default_backend([]) == ("", "no ConfigMap labelled " + GROVE_CONFIG_SELECTOR)
    assert grove_default_backend([unset, kai])[0] == ""  # disagreeing: unknown, both named
    assert grove_default_backend([cm("x", "scheduler: [")])[0] == ""


def test_each_podcliqueset_gets_its_backend_and_the_pods_left_on_a_legacy_podgroup() -> None:
    def pcs(name: str, scheduler: str = "", migrating: bool = False) -> dict[str, object]:
        pod_spec = {"schedulerName": scheduler} if scheduler else {}
        conditions = [{"type": "PodGangMigrationInProgress", "status": "True"}] if migrating else []
        cliques = [{"spec": {"podSpec": {}}}, {"spec": {"podSpec": pod_spec}}]
        return {"metadata": {"namespace": "ns", "name": name}, "spec": {"template": {"cliques": cliques}},
                "status": {"conditions": conditions}}  # fmt: skip

    def pod(name: str, owner: str, scheduler: str, gang: str, notes: dict[str, str]) -> dict[str, object]:
        labels = {"app.kubernetes.io/part-of": owner, "grove.io/podgang": gang}
        return {"metadata": {"namespace": "ns", "name": name, "labels": labels, "annotations": notes},
                "spec": {"schedulerName": scheduler}}  # fmt: skip

    pods = [
        pod("a-ok", "a", "kai-scheduler", "a-0-1", {"pod-group-name": "a-0-1"}),
        pod("a-old", "a", "kai-scheduler", "a-0-1", {"pod-group-name": "a-0"}),
        pod("b-old", "b", "volcano", "b-0-1", {"scheduling.k8s.io/group-name": "b-0"}),
        pod("c-none", "c", "default-scheduler", "c-0-1", {}),
    ]
    found = pcs_findings(
        [pcs("a"), pcs("b", "volcano", migrating=True), pcs("c", "default-scheduler")], "kai-scheduler", pods
    )
    assert found == (
        PCSFinding("ns/a", "kai-scheduler", legacy_count=1, legacy_pods=("a-old",)),
        PCSFinding("ns/b", "volcano", legacy_count=1, legacy_pods=("b-old",), migrating=True),
        PCSFinding("ns/c", "default-scheduler"),
    )


def test_the_scheduling_findings_survive_their_file(tmp_path: Path) -> None:
    findings = site(grove=grove(PCSFinding("ns/a", "kai-scheduler", legacy_count=4, legacy_pods=("p", "q"))))
    save_findings(tmp_path / "f.json", findings)
    assert load_findings(tmp_path / "f.json") == findings


# -- zero trust: who holds a DPU BMC's credentials (issue 36 point 7; dpf BEHAVIOUR.md Z1) ---------
def test_a_dpu_bmc_refusing_our_credentials_while_dpf_manages_them_says_so_and_what_to_do() -> None:
    managed = "DPUDevice ns/device-h1-dpu-0, Secret device-h1-dpu-0-bmc-v1; BMCFactoryResetReady True"
    bmc = dpu_bmc(credentials_ok=False, error="401", credentials_by="dpf", dpf_credentials=managed)
    found = changed(site(host_bmc(), bmc))
    for cap in ("reset-dpu", "reset-dpu-full", "reset-both", "firmware"):
        assert found[cap] == ("blocked", ("dpf Z1", "redfish F1")), cap
    text = host_verdict(site(host_bmc(), bmc), "h1", "firmware").reasons[0].text
    assert f"DPF manages this BMC's credentials ({managed})" in text
    assert "factory defaults once at onboarding" in text and "bmcFactoryResetPolicy: Never" in text
    assert "refuses the stored credentials" not in text  # not the generic 401
    # ours refused: the generic reason, as before; DPF's accepted: nothing to say
    assert changed(site(host_bmc(), dpu_bmc(credentials_ok=False, credentials_by="ours")))["firmware"] == (
        "blocked", ("redfish F1",),
    )  # fmt: skip
    assert changed(site(host_bmc(), dpu_bmc(credentials_by="dpf", dpf_credentials=managed))) == {}


def test_the_trust_mode_is_read_from_the_dpus() -> None:
    def dpu(**status: str) -> dict[str, object]:
        return {"status": status}

    assert trust_mode([dpu(deploymentMode="host-trusted", dpuInstallInterface="redfish")]) == (
        "host-trusted", "1 DPU(s), status.deploymentMode",
    )  # fmt: skip
    assert trust_mode([dpu(dpuInstallInterface="redfish")] * 2) == (
        "zero-trust",
        "2 DPU(s), status.dpuInstallInterface",
    )
    assert trust_mode([]) == ("", "no DPU shows a deploymentMode or an install interface")
    assert trust_mode([dpu(deploymentMode="zero-trust"), dpu(deploymentMode="host-trusted")])[0] == ""
    on_delete = {"dpus": {"dpuSetStrategy": {"type": "OnDelete"}}}
    deployments = [{"metadata": {"namespace": "ns", "name": "d"}, "spec": on_delete},
                   {"metadata": {"namespace": "ns", "name": "e"}, "spec": {"dpus": {}}}]  # fmt: skip
    assert dpuset_strategies(deployments) == ("ns/d: OnDelete", "ns/e: unset")


def test_a_dpu_bmcs_credentials_are_dpfs_in_zero_trust_when_a_dpudevice_names_it() -> None:
    def device(name: str, serial: str, **spec: str) -> dict[str, object]:
        return {"metadata": {"namespace": "dpf", "name": name}, "spec": {"serialNumber": serial, **spec}}

    devices = [device("device-h1-dpu-0", "S0"), device("MT123", "S1", bmcCredentialSecretName="mt123-bmc-v1")]
    kw = {"device_name": "device-h1-dpu-0", "serial": None, "bmc_host": "10.0.0.1"}
    assert dpf_credentials(devices, "zero-trust", **kw) == (
        "dpf",
        "DPUDevice dpf/device-h1-dpu-0, Secret bmc-shared-password",
    )
    by_serial = dpf_credentials(devices, "zero-trust", device_name="device-x", serial="S1", bmc_host="")
    assert by_serial == ("dpf", "DPUDevice dpf/MT123, Secret mt123-bmc-v1")
    assert dpf_credentials(devices, "host-trusted", **kw) == (
        "ours",
        "",
    )  # host trusted: DPF never uses the BMC
    assert dpf_credentials([], "zero-trust", **kw) == ("ours", "no DPUDevice of DPF names it")
    ip = [device("a", "A", bmcIp="10.0.0.1"), device("b", "B", bmcIp="10.0.0.2")]
    assert dpf_credentials(ip, "zero-trust", device_name="x", serial=None, bmc_host="10.0.0.1")[0] == "dpf"
    assert (
        dpf_credentials(ip + ip, "zero-trust", device_name="x", serial=None, bmc_host="10.0.0.1")[0] == "ours"
    )


def test_the_trust_findings_survive_their_file(tmp_path: Path) -> None:
    dpf = DPFFinding(
        version="26", trust_mode="zero-trust", trust_detail="1 DPU(s)", strategies=("ns/d: OnDelete",)
    )
    findings = site(host_bmc(), dpu_bmc(credentials_by="dpf", dpf_credentials="DPUDevice x"), dpf=dpf)
    save_findings(tmp_path / "f.json", findings)
    assert load_findings(tmp_path / "f.json") == findings


@pytest.mark.parametrize(
    ("argv", "host_dead", "refused"),
    [
        (["host", "reset", "h1", "--dpu", "h1-dpu-1"], True, False),  # the healthy DPU's BMC only
        (["host", "reset", "h1", "--dpu", "h1-dpu-0"], False, True),
        (["host", "reset", "h1", "--all-dpus"], False, True),
        (
            [
                "host",
                "firmware",
                "h1",
                "--version",
                "32.45.1020",
                "--image",
                "https://i/f.bin",
                "--dpus",
                "h1-dpu-1",
            ],
            False,
            False,
        ),  # fmt: skip
        (["host", "reprovision", "h1", "--dpus", "h1-dpu-1", "--manual-reboot"], True, False),
        (["host", "reprovision", "h1", "--dpus", "h1-dpu-1"], True, True),
    ],
)
def test_the_cli_judges_the_components_its_arguments_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str], host_dead: bool, refused: bool
) -> None:
    """`metalflow host ...`'s start hands the DPUs and `--manual-reboot` to the verdict (h1-dpu-0's
    BMC unreachable; the host BMC too where `host_dead`)."""
    from metalflow.cli import build_parser
    from metalflow.cli.host import _site_check_says

    monkeypatch.setenv("METALFLOW_STATE_DIR", str(tmp_path))
    save_findings(tmp_path / "site-check.json", two_dpus(host=host_bmc(reachable=not host_dead)))
    args = build_parser().parse_args(argv)
    assert (_site_check_says(args) is not None) == refused, getattr(args, "site_check", ())


def test_each_site_file_keeps_its_own_findings_and_a_host_the_check_never_saw_is_not_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 36 (re-attack): `site check --site other.yaml` replaced the findings of the site in
    use, and a host added after the check ran unwarned. Each site file keeps its own findings (the
    state dir's site.yaml in site-check.json); a host (or DPU) the check never saw is degraded,
    'not checked'; a site file changed since the check is said."""
    from metalflow.site_check import findings_path

    monkeypatch.setenv("METALFLOW_STATE_DIR", str(tmp_path))
    monkeypatch.delenv("METALFLOW_SITE_FILE", raising=False)
    own, other = tmp_path / "site.yaml", tmp_path / "other.yaml"
    assert findings_path() == findings_path(own) == tmp_path / "site-check.json"
    assert findings_path(other) not in (findings_path(own), findings_path(tmp_path / "third.yaml"))
    assert findings_path(other).parent == tmp_path and findings_path(other).name.startswith("site-check-")
    own.write_text("name: s\nhosts: [h1]\n")  # the site the findings name (`site()`: "s")
    other.write_text("hosts: [h9]\n")
    save_findings(findings_path(own), dataclasses.replace(site(), site_file=str(own), site_digest=_sha(own)))
    save_findings(findings_path(other), site(host_bmc("h9", reachable=False), dpu_bmc("h9")))
    assert consult_words("h1", "reboot") == (False, [])  # the site in use's findings stand
    monkeypatch.setenv("METALFLOW_SITE_FILE", str(other))  # the other site in use: its own findings
    assert consult_words("h9", "reboot")[0] and not consult_words("h1", "reboot")[0]
    monkeypatch.delenv("METALFLOW_SITE_FILE")
    refuse, lines = consult_words("h2", "reboot")  # a host added after the check
    assert not refuse and lines[0].startswith("reboot is degraded on h2 by the site check of"), lines
    assert lines[1].startswith(f"host h2 was not checked: the site check of {own} of 2026-11-29T07:00:00Z"), (
        lines
    )
    assert "run `metalflow site check`" in lines[1] and "[" not in lines[1], lines
    refuse, lines = consult_words("h1", "reset-dpu", dpus=("h1-dpu-7",))  # a DPU added after the check
    assert not refuse and "h1: DPU h1-dpu-7 was not checked" in lines[1], lines
    assert consult_words("h2", "rollout") == (False, [])  # the site's own capabilities: no host
    own.write_text("hosts: [h1, h2]\n")  # changed since the check
    refuse, lines = consult_words("h1", "reboot")
    assert not refuse and lines == [
        f"the site file {own} changed since the site check of 2026-11-29T07:00:00Z (hosts or BMCs changed "
        "since are judged as the check saw them): run `metalflow site check`"
    ]


def _sha(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_missing_kubeconfig_is_bad_input_and_keeps_the_last_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 36 (re-attack): a KUBECONFIG that is not there exited 1 (blocked: DPF unreadable) and
    replaced a good check with those findings. It is bad input (README's exit 2), naming the file,
    and changes nothing."""
    from metalflow.cli import main

    monkeypatch.setenv("METALFLOW_STATE_DIR", str(tmp_path))
    monkeypatch.setenv("METALFLOW_INVENTORY", "site")
    monkeypatch.delenv("METALFLOW_SITE_FILE", raising=False)
    (tmp_path / "site.yaml").write_text(
        "name: s\nnamespace: dpf\nhosts:\n  - id: h1\n    bmc: {endpoint: 'http://127.0.0.1:1', "
        "credentials: {env: {username: U, password: P}}}\n    dpus: []\n"
    )
    kept = tmp_path / "site-check.json"
    save_findings(kept, site())
    good = kept.read_bytes()
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "no-such-kubeconfig"))
    assert main(["site", "check", "--timeout", "1"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "no-such-kubeconfig") in err and "the kept findings are unchanged" in err, err
    assert kept.read_bytes() == good
    # Not YAML, or YAML but no kubeconfig: a PyYAML traceback and exit 1 before; now bad input,
    # naming the file and what is wrong, a JSON error under --json, nothing kept.
    for text, said in (("garbage: [\n", "is not valid YAML"), ("[]\n", "is not a kubeconfig")):
        bad = tmp_path / "kc"
        bad.write_text(text)
        monkeypatch.setenv("KUBECONFIG", str(bad))
        assert main(["site", "check", "--timeout", "1"]) == 2
        err = capsys.readouterr().err
        assert f"the Kubernetes configuration {bad} {said}" in err and "Traceback" not in err, err
        assert "the kept findings are unchanged" in err and kept.read_bytes() == good, err
        assert main(["site", "check", "--timeout", "1", "--json"]) == 2
        document = json.loads(capsys.readouterr().out)
        assert said in document["error"] and document["exit_status"] == 2, document
        assert kept.read_bytes() == good


def test_a_bmc_error_keeps_its_start_and_its_end_where_the_credentials_are_named() -> None:
    """Issue 36 (re-attack): the BMC's error, cut at 200 characters, lost the credentials file's
    path at its end. The middle is cut instead."""
    from metalflow.site_check import clip

    path = "/etc/metalflow/credentials/" + "rack-17/" * 12 + "gpu-0042.json"
    text = (
        "BMC gpu-0042: POST /redfish/v1/SessionService/Sessions answered 401 "
        + "NoValidSession: "
        + "x" * 300
        + f" (check the credentials in file {path})\nsecond line"
    )
    said = clip(text)
    assert said.startswith("BMC gpu-0042: POST /redfish/v1/SessionService/Sessions answered 401")
    assert said.endswith(f"(check the credentials in file {path})") and " ... " in said, said
    assert len(said) < len(text.splitlines()[0]) and clip("short\nmore") == "short"


def test_a_check_stamped_in_the_future_says_a_clock_is_off(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    path = tmp_path / "site-check.json"
    save_findings(path, site())  # checked 2026-11-29T07:00:00Z
    earlier = datetime(2026, 11, 29, 4, tzinfo=UTC)
    refuse, lines = consult_words("h1", "reboot", path, now=earlier)
    assert not refuse and lines == [
        "the site check of 2026-11-29T07:00:00Z is 3.0 h in the future: this machine's clock or that of "
        "the machine that ran the check is off, so how old the findings are cannot be told; set the clock "
        "right and run `metalflow site check`"
    ]
    assert consult_words("h1", "reboot", path, now=datetime(2026, 11, 29, 6, 58, tzinfo=UTC)) == (False, [])


def test_the_agents_reboot_method_discovery_is_read_from_the_dpus_and_said() -> None:
    """Issue 36 (re-attack): the check did not say how DPF's agents discover the reboot method
    (dpf R4): device query (`RebootMethodDiscovery=True` in `status.agentStatus.conditions`, as the
    agent sets it on each report) or boot ID (a report without it). From the DPUs it lists anyway."""
    from metalflow.site_readings import reboot_discovery
    from metalflow.site_verdicts import info

    def dpu(agent: dict[str, object] | None) -> dict[str, object]:
        return {"status": {"phase": "Ready", **({"agentStatus": agent} if agent is not None else {})}}

    condition = {"type": "RebootMethodDiscovery", "status": "True", "reason": "NoAction"}
    query = {"rebootMethod": "NoAction", "lastStartupTime": "2026-11-29T07:00:00Z", "conditions": [condition]}
    boot_id = {"rebootMethod": "SystemLevelReset", "lastStartupTime": "2026-11-29T07:00:00Z"}
    said = reboot_discovery([dpu(query), dpu(query), dpu(boot_id), dpu(None)])
    assert said.startswith("device query (RebootMethodDiscovery=True: after a host reboot DPF asks the agent")
    assert (
        "on 2 DPU(s); boot ID (a reboot method reported without RebootMethodDiscovery: an agent MFT older "
        "than 4.36.0-95" in said
    )
    assert said.endswith("; not reported yet (no agent has decided its reboot method since it started: "
                         "read again once they report) on 1 DPU(s)")  # fmt: skip
    assert reboot_discovery([]) == ""
    lines = info(site(dpf=DPFFinding(version="26", reboot_discovery=said)))
    assert f"DPU agents' reboot-method discovery: {said} (dpf R4)" in lines
    assert not any(
        "discovery" in line for line in info(site(dpf=DPFFinding(version="25.10", reboot_discovery=said)))
    )


def test_an_agent_that_started_but_has_not_decided_its_reboot_method_is_not_reported_yet() -> None:
    """Issue 36 (low findings item 2): after a host reboot the check said "boot ID" for agents
    that had only started. Upstream each agent start writes `lastStartupTime` and `rebootMethod:
    Unknown` first (`dpuagent.go` `Run`, `ReportLastStartupTime`) and sets its discovery condition
    later, in `HandleReboot` (`reboot.go` c=75d3fab2): no condition then says nothing about the
    discovery. Boot ID is a method decided without the condition."""
    from metalflow.site_readings import reboot_discovery

    def dpu(agent: dict[str, object]) -> dict[str, object]:
        return {"status": {"phase": "DPU Config", "agentStatus": agent}}

    started = {"lastStartupTime": "2026-11-29T07:00:00Z"}
    for agent in (started, {**started, "rebootMethod": "Unknown"}, {**started, "conditions": []}):
        assert reboot_discovery([dpu(agent)]).startswith("not reported yet"), agent
    assert reboot_discovery([dpu({**started, "rebootMethod": "NoAction"})]).startswith("boot ID")


def test_dpf_holding_several_dpu_bmcs_of_a_host_is_said_once_for_the_host_naming_them() -> None:
    """Issue 36 (low findings item 4): the Z1 reason, with its paragraph of advice, was repeated
    for each DPU of a host under each capability. Now one reason per host names its DPU BMCs and
    DPF's Secret for each; the site's verdict has one per host."""

    def held(host: str, i: int) -> BMCFinding:
        secret = f"Secret device-{host}-dpu-{i}-bmc-v1"
        return dpu_bmc(host, bmc_id=f"{host}-dpu-{i}", dpu=f"{host}-dpu-{i}", credentials_ok=False,
                       credentials_by="dpf", dpf_credentials=secret)  # fmt: skip

    findings = site(host_bmc("h1"), held("h1", 0), held("h1", 1), host_bmc("h2"), held("h2", 0))
    reasons = host_verdict(findings, "h1", "reset-dpu").reasons
    assert len(reasons) == 1 and reasons[0].rows == ("dpf Z1", "redfish F1")
    assert reasons[0].text.startswith(
        "h1: DPU BMCs h1-dpu-0, h1-dpu-1 refuse the site file's credentials, and DPF manages these BMCs' "
        "credentials (h1-dpu-0: Secret device-h1-dpu-0-bmc-v1; h1-dpu-1: Secret device-h1-dpu-1-bmc-v1): "
    )
    assert reasons[0].text.count("factory defaults once at onboarding") == 1
    site_wide = next(v for v in verdicts(findings) if v.capability == "firmware")
    assert [r.text.split(":", 1)[0] for r in site_wide.reasons] == ["h1", "h2"]  # once per host
    one = host_verdict(findings, "h2", "reset-dpu").reasons[0].text
    assert one.startswith(
        "h2: DPU BMC h2-dpu-0 refuses the site file's credentials, and DPF manages this BMC's"
    )


@pytest.mark.parametrize(
    ("value", "state"),
    [
        ("-0s", "on"),  # zero: KAI evicts a stale gang at once (it read "off": it starts with "-")
        ("0", "on"),
        ("-0.0h", "on"),
        ("-1s", "off"),
        ("-1h30m", "off"),
        ("-.5s", "off"),
        ("30s", "on"),
        ("-1", "unknown"),  # no unit: Go's time.ParseDuration refuses it, and so KAI's scheduler
        ("never", "unknown"),
    ],
)
def test_kai_grace_period_is_read_as_kais_scheduler_parses_it(value: str, state: str) -> None:
    """Issue 36 (low findings item 5): KAI's operator passes the shard's args to its scheduler as
    flags (`resources_for_shard.go` `buildArgsList`); `--default-staleness-grace-period` is a pflag
    `DurationVar` (`cmd/scheduler/app/options/options.go`: "Negative values means infinite"), and
    `stalegangeviction.go` `handleStaleJob` skips eviction only when `< 0`: `-0s` is zero, so
    eviction is on (at once); a value Go cannot parse is no "off"."""
    shard = {"metadata": {"name": "default"}, "spec": {"args": {"default-staleness-grace-period": value}}}
    found, detail = kai_eviction([shard])
    assert found == state, detail
    if state == "unknown":
        assert "is not a Go duration" in detail and "-1s" in detail
    if value in ("-0s", "0"):
        assert "evicted at once" in detail
