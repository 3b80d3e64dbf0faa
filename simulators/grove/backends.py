"""Grove's scheduler backends, as far as the simulated site plays them (BEHAVIOUR.md K1-K5).

What a site has set up around Grove, chosen at `serve` (`--grove-scheduler`, `--kai-stale-eviction`,
`--grove-migrated`), and what `metalflow site check` reads of it:
- Grove's operator configuration, in the ConfigMap the Helm chart writes (`grove-operator-cm-<hash>`,
  key `config.yaml`, `scheduler.profiles` / `scheduler.defaultProfileName`) [K1];
- each pod prepared by its backend as Grove's `PreparePod` does: `spec.schedulerName`, and under KAI
  the `pod-group-name` annotation naming the pod's PodGang [K3];
- KAI's default SchedulingShard (`kai.scheduler/v1`, cluster-scoped), with or without the argument
  that turns stale-gang eviction off [K4];
- a cluster migrated to the epoch-based PodGang scheme under KAI: the pods that existed before keep
  the `pod-group-name` of their legacy PodGang [K5].

The simulated scheduler itself gang-schedules under every backend and never evicts (P5): what
these settings would do on a real site is what the check says, not what the simulation plays.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Final

import yaml

Object = dict[str, Any]

KAI: Final = "kai-scheduler"
KUBE: Final = "default-scheduler"
SCHEDULERS: Final = (KAI, KUBE)
EVICTION_OFF, EVICTION_ON, EVICTION_NONE = "off", "on", "none"
EVICTIONS: Final = (EVICTION_OFF, EVICTION_ON, EVICTION_NONE)

KAI_POD_GROUP: Final = "pod-group-name"  # operator/internal/scheduler/kai/backend.go L60 @P
KAI_SKIP_PODGROUPER: Final = "kai.scheduler/skip-podgrouper"
KAI_SUBGROUP: Final = "kai.scheduler/subgroup-name"
STALENESS_ARG: Final = "default-staleness-grace-period"  # KAI cmd/scheduler/app/options/options.go L128
GROVE_NAMESPACE: Final = "grove-system"
CONFIG_LABELS: Final = {  # operator/charts/values.yaml `configMap.labels` @P
    "app.kubernetes.io/component": "operator-configmap",
    "app.kubernetes.io/name": "grove-operator",
    "app.kubernetes.io/part-of": "grove",
}


@dataclass(frozen=True)
class GroveSetup:
    scheduler: str = KAI  # Grove's default scheduler profile
    kai_eviction: str = EVICTION_OFF  # KAI's stale-gang eviction in its default SchedulingShard
    migrated: bool = False  # the workloads' first pods keep their legacy PodGroup annotation

    def __post_init__(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise ValueError(
                f"unknown Grove scheduler {self.scheduler!r}; choose one of {', '.join(SCHEDULERS)}"
            )
        if self.kai_eviction not in EVICTIONS:
            raise ValueError(
                f"unknown KAI stale-gang eviction {self.kai_eviction!r}; choose one of {', '.join(EVICTIONS)}"
            )


def operator_config(setup: GroveSetup) -> Object:
    """The operator ConfigMap as the chart renders it: profiles default-scheduler and kai-scheduler
    (values.yaml @P); `defaultProfileName` only when the site made KAI the default (unset, Grove
    defaults it to default-scheduler: `SetDefaults_SchedulerConfiguration`)."""
    scheduler: Object = {"profiles": [{"name": KUBE}, {"name": KAI}]}
    if setup.scheduler == KAI:
        scheduler["defaultProfileName"] = KAI
    config = yaml.safe_dump(
        {
            "apiVersion": "operator.config.grove.io/v1alpha1",
            "kind": "OperatorConfiguration",
            "scheduler": scheduler,
        },
        sort_keys=False,
    )
    digest = hashlib.sha256(config.encode()).hexdigest()[:8]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"grove-operator-cm-{digest}",
            "namespace": GROVE_NAMESPACE,
            "labels": dict(CONFIG_LABELS),
        },
        "immutable": True,
        "data": {"config.yaml": config},
    }


def scheduling_shard(setup: GroveSetup) -> Object | None:
    """KAI's default SchedulingShard (deployments/kai-scheduler/templates/default-shard.yaml), with
    eviction off as KAI's scheduler takes it (`scheduler.args.default-staleness-grace-period=-1s`: a
    negative Go duration; Grove's installation docs write `-1`, which the scheduler's flag parsing
    refuses, BEHAVIOUR.md K4); None: no KAI SchedulingShard on the site."""
    if setup.kai_eviction == EVICTION_NONE:
        return None
    spec: Object = {"partitionLabelValue": ""}
    if setup.kai_eviction == EVICTION_OFF:
        spec["args"] = {STALENESS_ARG: "-1s"}
    return {
        "apiVersion": "kai.scheduler/v1",
        "kind": "SchedulingShard",
        "metadata": {"name": "default"},
        "spec": spec,
    }


def prepare_pod(body: Object, backend: str) -> Object:
    """What the backend's `PreparePod` adds to a new pod (kube/backend.go, kai/backend.go L124-145 @P)."""
    body["spec"]["schedulerName"] = backend
    if backend == KAI:
        meta = body["metadata"]
        gang = meta["labels"].get("grove.io/podgang", "")
        meta.setdefault("annotations", {}).update({KAI_SKIP_PODGROUPER: "true", KAI_POD_GROUP: gang})
        meta["labels"][KAI_SUBGROUP] = meta["labels"].get("grove.io/podclique", "")
    return body


def legacy_gang(pod: Object, pcs_name: str) -> str:
    """The PodGang a pod belonged to before the epoch-based scheme: its PodCliqueSet replica's base
    gang `<pcs>-<r>`, or for a scaling-group replica above minAvailable `<pcsg>-<j - minAvailable>`
    (`CreatePodGangNameFromPCSGFQN`, operator/api/common/namegen.go L95-101 @P). The simulated
    groups' minAvailable is the site's; index 0 is taken as in the base gang, which is what the
    check needs (a name that is not the pod's PodGang now)."""
    labels = pod["metadata"]["labels"]
    replica = labels.get("grove.io/podcliqueset-replica-index", "0")
    group = labels.get("grove.io/podcliquescalinggroup")
    index = int(labels.get("grove.io/podcliquescalinggroup-replica-index", "0") or 0)
    if group and index > 0:
        return f"{group}-{index - 1}"
    return f"{pcs_name}-{replica}"
