"""What a campaign brings its hosts to (`CampaignTarget`), and every target kind declared once.

`KINDS` is the one declaration of a target kind: what its value names, how the CLI asks for it,
which of the host entity's requests runs it, how a host is read at the target (and so whether
a completed operation is read back), which DPUDeployment field it points, whether the hosts must
be known to DPF, and whether the site's compatibility rules apply to its value. The model's
checks, the selection and the at-target reads (drivers/campaign.py), the request activity
(activities/campaign.py), the runbook (workflows/campaign/) and the CLI's options
(metalflow/cli/campaign_options.py) read it; none of them names a kind. A new kind is a member of
`TargetKind` and its row here (tests/fast/test_campaign_targets_table.py checks every member has
one).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, model_validator


class TargetKind(StrEnum):
    REPROVISION = "reprovision"
    BFB = "bfb"
    FLAVOR = "flavor"
    FIRMWARE = "firmware"


RequestedOperation = Literal["reprovision", "firmware"]
"""The host entity's operation a campaign kind asks each host for: the `operation` of a row of
`contracts.host_requests.ENTITY_REQUESTS` (`names.REPROVISION`, `names.FIRMWARE`: its workflow id
`<operation>/<host>`). Not `EntityRequest`: that is the row itself, a dataclass.
tests/fast/test_campaign_targets_table.py holds the two together."""

AtTarget = Literal["never", "dpf", "bmc"]
"""How a host reads at the target: never (a reprovision has no such state), from DPF's DPUs
(`KindSpec.dpu_field`), or from each DPU's BMC (its running NIC firmware)."""


@dataclass(frozen=True)
class KindSpec:
    """What one target kind needs, for every floor that handles a campaign."""

    help: str  # the CLI's help for its option
    value: str = ""  # what `CampaignTarget.value` names, in words ("": the kind takes no value)
    metavar: str = ""  # the CLI's placeholder for the value
    request: RequestedOperation = "reprovision"  # the entity operation it asks each host for
    at_target: AtTarget = "never"
    dpu_field: str = ""  # at_target "dpf": the DPU's `spec` field that names the value
    installed_file: str = ""  # at_target "dpf": the DPU `status` field naming the file DPF installed,
    installed_suffix: str = ""  # `<namespace>-<value><installed_suffix>`
    deployment_field: str = ""  # the DPUDeployment `spec.dpus.<field>` pointed at the value ("": none)
    dpf_object: str = ""  # the DPF kind the value names, which must exist before it is pointed
    image: bool = False  # the target needs an image URI (`--image`)
    needs_dpf: bool = True  # the operation reprovisions: hosts without a DPUNode are left out
    site_rules: bool = False  # the site file's compatibility rules for a BFB apply to the value

    @property
    def points_deployment(self) -> bool:
        return bool(self.deployment_field)


KINDS: Final[dict[TargetKind, KindSpec]] = {
    TargetKind.REPROVISION: KindSpec(help="reprovision every DPU of each host"),
    TargetKind.BFB: KindSpec(
        help="point the DPUDeployment at this BFB; upgrade host by host",
        value="BFB", metavar="NAME", at_target="dpf", dpu_field="bfb", installed_file="bfbFile",
        installed_suffix=".bfb", deployment_field="bfb", dpf_object="BFB", site_rules=True,
    ),
    TargetKind.FLAVOR: KindSpec(
        help="point the DPUDeployment at this DPUFlavor",
        value="flavor", metavar="NAME", at_target="dpf", dpu_field="dpuFlavor",
        deployment_field="flavor", dpf_object="DPUFlavor",
    ),
    TargetKind.FIRMWARE: KindSpec(
        help="DPU firmware version (with --image)",
        value="firmware version", metavar="VERSION", request="firmware", at_target="bmc",
        image=True, needs_dpf=False,
    ),
}  # fmt: skip


def pointing_kinds() -> list[TargetKind]:
    """The kinds that point a DPUDeployment (the CLI names them in its options' help)."""
    return [kind for kind, spec in KINDS.items() if spec.points_deployment]


def kind_of_field(field: str) -> KindSpec:
    """The kind that points the DPUDeployment field `field` (a `DeploymentChange`'s)."""
    return next(spec for spec in KINDS.values() if spec.deployment_field == field)


class CampaignTarget(BaseModel):
    """What every host is brought to."""

    # Unknown fields are ignored, never refused: a newer worker may add one (metalflow/runtime/versioning.py).
    model_config = ConfigDict(frozen=True)

    kind: TargetKind
    value: str = ""  # what the kind's `KindSpec.value` names; "" for a kind that takes none
    image_uri: str = ""  # a kind that needs an image (firmware)
    deployment: str = ""  # a kind that points: the fleet's DPUDeployment, pointed at `value` after the canary
    # a kind that points: the canary's own DPUDeployment (its hosts are the canary), pointed first
    canary_deployment: str = ""
    # a kind that points: the deployments, asked for by name, that may select hosts outside the
    # campaign (they turn Outdated); never one another running campaign holds (admission.py)
    whole_deployment: tuple[str, ...] = ()

    @property
    def spec(self) -> KindSpec:
        return KINDS[self.kind]

    @property
    def points_deployment(self) -> bool:
        return self.spec.points_deployment

    @model_validator(mode="before")
    @classmethod
    def _earlier_flag(cls, data: Any) -> Any:
        """`whole_deployment` of an earlier worker, a flag (a recorded or running campaign's
        input): True was both deployments, read as their names."""
        if isinstance(data, dict) and isinstance(data.get("whole_deployment"), bool):
            both = (data.get("canary_deployment"), data.get("deployment")) if data["whole_deployment"] else ()
            data = {**data, "whole_deployment": tuple(n for n in both if n)}
        return data

    @model_validator(mode="after")
    def _complete(self) -> CampaignTarget:
        spec = self.spec
        pointing = " or ".join(pointing_kinds())
        if self.canary_deployment and not spec.points_deployment:
            raise ValueError(f"a canary deployment goes with a {pointing} target")
        if self.canary_deployment and self.canary_deployment == self.deployment:
            raise ValueError(f"the canary deployment must not be the fleet's ({self.deployment})")
        ours = {self.deployment, self.canary_deployment} - {""}
        if unknown := [n for n in self.whole_deployment if n not in ours]:
            raise ValueError(
                f"whole deployment {', '.join(unknown)} is neither the campaign's deployment nor its canary "
                f"deployment ({', '.join(sorted(ours)) or 'none'})"
            )
        if spec.value and not self.value:
            raise ValueError(f"a {self.kind} target needs a value (the {self.kind} name or version)")
        if spec.image and not self.image_uri:
            raise ValueError(f"a {self.kind} target needs the image URI")
        if spec.points_deployment and not self.deployment:
            raise ValueError(f"a {self.kind} target needs the DPUDeployment to point at it")
        return self

    def describe(self) -> str:
        if not self.spec.value:
            return str(self.kind)
        where = f" on DPUDeployment {self.deployment}" if self.deployment else ""
        if self.canary_deployment:
            where += f" (canary on {self.canary_deployment})"
        return f"{self.kind} {self.value}{where}"
