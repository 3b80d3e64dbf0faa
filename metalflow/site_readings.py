"""What `metalflow site check` makes of the cluster's answers: pure, no I/O (the reads are
metalflow/site_check.py's).

- DPF (simulators/dpf/BEHAVIOUR.md Z1): the trust mode from the DPUs (`trust_mode`), each
  DPUDeployment's DPUSet strategy (`dpuset_strategies`), and whether DPF holds a DPU BMC's
  credentials (`dpf_credentials`);
- Grove (simulators/grove/BEHAVIOUR.md K1-K5): Grove's default scheduler profile from its operator
  ConfigMap (`grove_default_backend`), KAI's stale-gang eviction from its SchedulingShards
  (`kai_eviction`), each PodCliqueSet's backend and the pods a migration to PodGangMap left on
  their legacy PodGroup (`pcs_findings`).
"""

from __future__ import annotations

import re
from typing import Any

from metalflow.site_verdicts import KAI_BACKEND, KUBE_BACKEND, VOLCANO_BACKEND, PCSFinding

PROVISIONING = "/apis/provisioning.dpu.nvidia.com/v1alpha1"
SHARED_SECRET = "bmc-shared-password"


def trust_mode(dpus: list[dict[str, Any]]) -> tuple[str, str]:
    """(DPF's trust mode, what decided it) from its DPUs: `status.deploymentMode` (v26), else the
    install interface (`status.dpuInstallInterface` redfish: zero trust, as DPF's
    `ZeroTrustProvisioningFlow` decides without a mode); ("", why) with no DPU or a mixed answer."""
    modes: dict[str, int] = {}
    for dpu in dpus:
        status = dpu.get("status") or {}
        mode = str(status.get("deploymentMode") or "")
        if not mode and status.get("dpuInstallInterface"):
            mode = "zero-trust" if status["dpuInstallInterface"] == "redfish" else "host-trusted"
        if mode:
            modes[mode] = modes.get(mode, 0) + 1
    if not modes:
        return "", "no DPU shows a deploymentMode or an install interface"
    if len(modes) > 1:
        return "", "DPUs disagree: " + ", ".join(f"{n} {m}" for m, n in sorted(modes.items()))
    mode = next(iter(modes))
    field = (
        "status.deploymentMode"
        if any((d.get("status") or {}).get("deploymentMode") for d in dpus)
        else ("status.dpuInstallInterface")
    )
    return mode, f"{modes[mode]} DPU(s), {field}"


UNKNOWN_METHOD = "Unknown"  # the agent's rebootMethod from its start until HandleReboot (dpuagent.go Run)
DISCOVERY_CONDITION = "RebootMethodDiscovery"  # the DPU agent's condition (dpf R4)


def reboot_discovery(dpus: list[dict[str, Any]]) -> str:
    """How the DPU agents find their reboot method, from the DPUs already listed (dpf R4; DOMAIN.md
    2.5): device query where the agent's report (`status.agentStatus.conditions`) carries
    `RebootMethodDiscovery=True`, boot ID where it decided a method (`rebootMethod`, not
    `Unknown`) without it (an MFT older than 4.36.0-95: a first `SystemLevelReset` whatever the
    model, and DPF goes on from `Rebooting` without asking the agent again); not reported yet
    where neither: no agent report, or an agent that started (`lastStartupTime`, `rebootMethod:
    Unknown`) but has not reached its reboot step (upstream each start writes the start time and
    `Unknown` first and sets the condition in `HandleReboot` later: `dpuagent.go` `Run`,
    `reboot.go` c=75d3fab2 `getRebootMethodDeviceQuery`); "" with no DPU."""
    counts = {"device-query": 0, "boot-id": 0, "not reported": 0}
    for dpu in dpus:
        agent = (dpu.get("status") or {}).get("agentStatus") or {}
        conditions = agent.get("conditions") or []
        if any(c.get("type") == DISCOVERY_CONDITION and c.get("status") == "True" for c in conditions):
            counts["device-query"] += 1
        elif agent.get("rebootMethod") not in (None, "", UNKNOWN_METHOD):
            counts["boot-id"] += 1
        else:
            counts["not reported"] += 1
    if not dpus:
        return ""
    words = {
        "device-query": "device query (RebootMethodDiscovery=True: after a host reboot DPF asks the "
        "agent again, in DPU Config)",
        "boot-id": "boot ID (a reboot method reported without RebootMethodDiscovery: an agent MFT older "
        "than 4.36.0-95; one SystemLevelReset per provisioning, DPF goes on from Rebooting without "
        "asking again)",
        "not reported": "not reported yet (no agent has decided its reboot method since it started: "
        "read again once they report)",
    }
    return "; ".join(f"{words[k]} on {n} DPU(s)" for k, n in counts.items() if n)


def dpuset_strategies(deployments: list[dict[str, Any]]) -> tuple[str, ...]:
    """`namespace/name: <type>` of each DPUDeployment's `spec.dpus.dpuSetStrategy` (unset: "unset")."""
    out = []
    for d in deployments:
        meta = d.get("metadata") or {}
        kind = (((d.get("spec") or {}).get("dpus") or {}).get("dpuSetStrategy") or {}).get("type") or "unset"
        out.append(f"{meta.get('namespace', '')}/{meta.get('name', '')}: {kind}")
    return tuple(sorted(out))


def dpf_credentials(
    devices: list[dict[str, Any]], mode: str, *, device_name: str, serial: str | None, bmc_host: str
) -> tuple[str, str]:
    """("dpf" | "ours", how) for one DPU BMC (dpf Z1): in zero trust DPF authenticates to the BMC
    of every DPUDevice it has (its `bmcCredentialSecretName`, else the shared bmc-shared-password)
    and, from 26.8, factory-resets it once at onboarding; host-trusted DPF never uses the BMC. The
    DPUDevice is ours by name (`device-<dpu>`), else by serial number, else by a BMC address no
    other device has."""
    if mode != "zero-trust":
        return "ours", ""
    by_name = [d for d in devices if (d.get("metadata") or {}).get("name") == device_name]
    by_serial = [d for d in devices if serial and (d.get("spec") or {}).get("serialNumber") == serial]
    by_ip = [
        d for d in devices
        if bmc_host and bmc_host in ((d.get("spec") or {}).get("bmcIp"), (d.get("status") or {}).get("bmcIp"))
    ]  # fmt: skip
    found = by_name or by_serial or (by_ip if len(by_ip) == 1 else [])
    if not found:
        return "ours", "no DPUDevice of DPF names it"
    device = found[0]
    meta, spec, status = device.get("metadata") or {}, device.get("spec") or {}, device.get("status") or {}
    secret = status.get("bmcCredentialSecretName") or spec.get("bmcCredentialSecretName") or SHARED_SECRET
    said = [f"DPUDevice {meta.get('namespace', '')}/{meta.get('name', '')}, Secret {secret}"]
    for c in status.get("conditions") or []:
        if c.get("type") in ("BMCFactoryResetReady", "BMCCredentialsReady"):
            said.append(f"{c['type']} {c.get('status')} {c.get('reason', '')}".rstrip())
    return "dpf", "; ".join(said)


GROVE_CONFIG_SELECTOR = "app.kubernetes.io/name=grove-operator,app.kubernetes.io/component=operator-configmap"
STALENESS_ARG = "default-staleness-grace-period"
# The pod annotations naming a pod's scheduler PodGroup, per backend (`PreparePod`, grove K3, K5).
GROUP_ANNOTATIONS = {
    KAI_BACKEND: ("pod-group-name",),
    VOLCANO_BACKEND: ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name"),
}
SHOWN_PODS = 3


def grove_default_backend(configmaps: list[dict[str, Any]]) -> tuple[str, str]:
    """(Grove's default scheduler profile, where read) from the operator ConfigMaps the chart
    writes (`grove-operator-cm-<hash>`, `config.yaml`): `scheduler.defaultProfileName`, defaulted
    to default-scheduler when unset (`SetDefaults_SchedulerConfiguration`, grove K1); ("", why)
    when none or several disagree or the YAML is unreadable."""
    import yaml

    found: dict[str, tuple[str, str]] = {}  # where -> (the profile, in words)
    for cm in configmaps:
        meta = cm.get("metadata") or {}
        where = f"ConfigMap {meta.get('namespace', '')}/{meta.get('name', '')}"
        try:
            config = yaml.safe_load(((cm.get("data") or {}).get("config.yaml")) or "") or {}
        except yaml.YAMLError:
            return "", f"{where}: config.yaml is not YAML"
        scheduler = (config.get("scheduler") or {}) if isinstance(config, dict) else {}
        if set_name := scheduler.get("defaultProfileName"):
            found[where] = str(set_name), f"scheduler.defaultProfileName {set_name}"
        else:  # one truth: it is unset, and what Grove then uses
            unset = f"scheduler.defaultProfileName unset, so Grove's default {KUBE_BACKEND}"
            found[where] = KUBE_BACKEND, unset
    if not found:
        return "", f"no ConfigMap labelled {GROVE_CONFIG_SELECTOR}"
    if len({name for name, _ in found.values()}) > 1:
        disagree = "; ".join(f"{where}: {words}" for where, (_, words) in sorted(found.items()))
        return "", "operator ConfigMaps disagree: " + disagree
    where, (name, words) = sorted(found.items())[0]
    return name, f"{where}, {words}"


_GO_DURATION = re.compile(r"(?:(?:\d+(?:\.\d*)?|\.\d+)(?:ns|us|µs|μs|ms|s|m|h))+")


def go_duration_sign(text: str) -> int | None:
    """-1, 0 or 1: the sign of `text` as Go's `time.ParseDuration` reads it (KAI's scheduler takes
    `--default-staleness-grace-period` as a pflag `DurationVar`); None where Go refuses it (a
    number without its unit, e.g. `-1`: only a bare `0` needs none). `-0s` is zero, not negative."""
    sign, body = (-1 if text[:1] == "-" else 1), text[1:] if text[:1] in "+-" else text
    if body == "0":
        return 0
    if not body or not _GO_DURATION.fullmatch(body):
        return None
    return sign if any(c in "123456789" for c in body) else 0


def kai_eviction(shards: list[dict[str, Any]]) -> tuple[str, str]:
    """("on" | "off" | "unknown", why) from KAI's SchedulingShards (grove K4). KAI's operator passes
    a shard's `spec.args` to its scheduler as flags (`buildArgsList`), and the scheduler reads
    `--default-staleness-grace-period` as a Go duration (`options.go` `DurationVar`, default 60s);
    its `stalegangeviction` action evicts nothing only when the duration is negative
    (`handleStaleJob`: `defaultGracePeriod < 0`), and a stale gang at once when it is zero. So a
    shard's eviction is off when that value is a negative Go duration or its
    `spec.actions.stalegangeviction.enabled` is false; on when unset (60 s), zero (`0s`, `-0s`: at
    once) or positive; unknown when Go refuses the value (`-1`: no unit), which the scheduler does
    at its start. On when any shard has it on, else unknown when any is unknown."""
    if not shards:
        return "unknown", "no KAI SchedulingShard found"
    on, unknown = [], []
    for shard in shards:
        name = str((shard.get("metadata") or {}).get("name", ""))
        spec = shard.get("spec") or {}
        value = str((spec.get("args") or {}).get(STALENESS_ARG, "")).strip()
        action = ((spec.get("actions") or {}).get("stalegangeviction") or {}).get("enabled")
        sign = go_duration_sign(value) if value else 1
        if action is False or sign == -1:
            continue
        said = f"SchedulingShard {name}: {STALENESS_ARG} "
        if sign is None:
            unknown.append(
                f"{said}{value!r} is not a Go duration (KAI's scheduler refuses it at its start: "
                "time.ParseDuration needs a unit, e.g. -1s)"
            )
            continue
        at_once = " (zero: a stale gang is evicted at once)" if value and sign == 0 else ""
        on.append(said + (value or "unset, KAI's default 60s") + at_once)
    if on:
        return "on", "; ".join(on)
    if unknown:
        return "unknown", "; ".join(unknown)
    names = ", ".join(sorted(str((s.get("metadata") or {}).get("name", "")) for s in shards))
    return "off", f"SchedulingShard {names}: off"


def pcs_backend(pcs: dict[str, Any], default: str) -> str:
    """A PodCliqueSet's backend as Grove resolves it: the first clique's `podSpec.schedulerName`
    set, else Grove's default profile (`getSchedulerNameForPCS`, grove K1)."""
    for clique in ((pcs.get("spec") or {}).get("template") or {}).get("cliques") or []:
        name = (((clique or {}).get("spec") or {}).get("podSpec") or {}).get("schedulerName")
        if name:
            return str(name)
    return default


def pcs_findings(
    pcs_items: list[dict[str, Any]], default: str, pods: list[dict[str, Any]]
) -> tuple[PCSFinding, ...]:
    """Each PodCliqueSet's backend, migration condition and the pods still naming a legacy
    PodGroup: a scheduler annotation of the backend that is not the pod's `grove.io/podgang`
    label, or the pre-PodGangMap `grove.io/base-podgang` label (grove K5, grove#837)."""
    legacy: dict[tuple[str, str], list[str]] = {}
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels, notes = meta.get("labels") or {}, meta.get("annotations") or {}
        gang = labels.get("grove.io/podgang", "")
        keys = GROUP_ANNOTATIONS.get(str((pod.get("spec") or {}).get("schedulerName") or ""), ())
        stale = any(k in notes and notes[k] != gang for k in keys) or "grove.io/base-podgang" in labels
        if stale and (owner := labels.get("app.kubernetes.io/part-of")):
            legacy.setdefault((str(meta.get("namespace", "")), str(owner)), []).append(
                str(meta.get("name", ""))
            )
    out = []
    for pcs in pcs_items:
        meta = pcs.get("metadata") or {}
        key = (str(meta.get("namespace", "")), str(meta.get("name", "")))
        names = sorted(legacy.get(key, []))
        conditions = (pcs.get("status") or {}).get("conditions") or []
        migrating = any(
            c.get("type") == "PodGangMigrationInProgress" and c.get("status") == "True" for c in conditions
        )
        out.append(PCSFinding(name=f"{key[0]}/{key[1]}", backend=pcs_backend(pcs, default),
                              legacy_count=len(names), legacy_pods=tuple(names[:SHOWN_PODS]),
                              migrating=migrating))  # fmt: skip
    return tuple(sorted(out, key=lambda p: p.name))
