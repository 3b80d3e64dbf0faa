"""The Grove contract of metalflow: names from DOMAIN.md section 3, and the frozen inputs,
results, signal payload, query and update models of the coherent rollout.

A rollout is named by its PodCliqueSet (`PCSRef`); its workflow id is
`contracts.names.rollout_workflow_id`. The rollout's own watcher signals the workflow with
`PCS_STATE_CHANGED_SIGNAL` and a `PCSState`; `read_pcs_state` returns the same model, so the
first read and every later change go through one code path.

Models ignore unknown fields (rather than refusing them) so a payload written by a newer worker
still loads in an older one while a rollout is in flight.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator

from contracts.models.control import OperatorRequest
from contracts.validation import Reason, Requester

GROVE_GROUP: Final = "grove.io"
SCHEDULER_GROUP: Final = "scheduler.grove.io"
GROVE_VERSION: Final = "v1alpha1"

REPLICA_INDEX_LABEL: Final = "grove.io/podcliqueset-replica-index"
GENERATION_HASH_LABEL: Final = "grove.io/podcliqueset-generation-hash"
PART_OF_LABEL: Final = "app.kubernetes.io/part-of"
MINIMUM_VIABLE_UNIT_LABEL: Final = "grove.io/minimum-viable-unit"
ROLLOUT_ANNOTATION: Final = "metalflow.io/rollout"
"""PodCliqueSet annotation metalflow writes: the rollout in flight (workflow id, step, in flight)."""

PCS_STATE_CHANGED_SIGNAL: Final = "pcs_state_changed"
ROLLBACK_UPDATE: Final = "rollback"
SUPERSEDE_UPDATE: Final = "supersede"
SCALE_UPDATE: Final = "scale"

ON_DELETE: Final = "OnDelete"

# An OCI reference: [registry[:port]/]path[:tag][@digest]; lower-case path, no spaces.
_IMAGE = re.compile(
    r"^(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(?:@sha256:[a-f0-9]{64})?$"
)


def image_problem(image: str) -> str | None:
    """Why `image` is not a usable container image reference, or None when it is."""
    if not image.strip():
        return "the image is empty"
    if not _IMAGE.fullmatch(image):
        return f"{image!r} is not a container image reference (registry/path[:tag][@sha256:digest])"
    return None


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class PCSRef(_Model):
    namespace: str = Field(min_length=1)
    name: str = Field(min_length=1)

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


# -- shape and plan ---------------------------------------------------------------------------------
class CliqueShape(_Model):
    name: str
    replicas: int = Field(ge=0)
    min_available: int = Field(ge=1)


class ScalingGroupShape(_Model):
    name: str
    cliques: tuple[str, ...]
    replicas: int = Field(ge=0)
    min_available: int = Field(ge=1)


class PCSShape(_Model):
    """What the plan needs of a PodCliqueSet: replicas, standalone cliques, scaling groups.

    Clique replicas of scaling-group members count pods per scaling-group replica.
    """

    name: str
    replicas: int = Field(ge=0)
    cliques: tuple[CliqueShape, ...]
    groups: tuple[ScalingGroupShape, ...] = ()


class PodGangPlan(_Model):
    """One PodGang of the plan and the pods it holds (`clique[i]` or `group[j]/clique[i]`)."""

    name: str
    replica: int
    minimum_viable: bool
    pods: tuple[str, ...]


class ReplicaRollout(_Model):
    """One PodCliqueSet replica: its MPGs, rolled one at a time, then its TPGs together."""

    replica: int
    mpgs: tuple[PodGangPlan, ...]
    tpgs: tuple[PodGangPlan, ...]

    def steps(self) -> list[tuple[PodGangPlan, ...]]:
        """The steps of this replica in order: one per MPG, then one with every TPG."""
        out: list[tuple[PodGangPlan, ...]] = [(m,) for m in self.mpgs]
        if self.tpgs:
            out.append(self.tpgs)
        return out


# -- the world, as the watcher and the reads see it -------------------------------------------------
class PodGangState(_Model):
    name: str
    uid: str
    replica: int
    hash: str
    available: bool
    ready: bool
    deleting: bool = False


class PCSState(_Model):
    """One PodCliqueSet and its PodGangs; the watcher's signal payload (numbered by `sequence`)."""

    namespace: str
    name: str
    exists: bool = True
    generation: int = 0
    observed_generation: int = 0
    current_hash: str = ""
    update_strategy: str = ""
    images: dict[str, str] = Field(default_factory=dict)  # clique -> first container's image
    shape: PCSShape | None = None
    gangs: tuple[PodGangState, ...] = ()
    updated_replicas: int = 0  # Grove's `status.updatedReplicas`
    available_replicas: int = 0
    # PodCliques and scaling groups reporting the current hash (reads only; the watcher omits them)
    members_updated: int | None = None
    members_total: int | None = None
    attempt: int = 0  # the watcher's activity attempt (0: a read, not a signal)
    sequence: int = 0

    def gang(self, name: str) -> PodGangState | None:
        return next((g for g in self.gangs if g.name == name), None)


# -- activities' inputs and results -------------------------------------------------------------------
class SetImagesInput(_Model):
    pcs: PCSRef
    images: dict[str, str]


class TemplateInput(_Model):
    """Restore a whole template (rollback): the JSON of `spec.template` as read at the start."""

    pcs: PCSRef
    template: dict[str, object]


class TemplateResult(_Model):
    """The template after a read or write, and the generation that holds it."""

    generation: int
    changed: bool
    template: dict[str, object]


class ScalePCSInput(_Model):
    pcs: PCSRef
    replicas: int = Field(ge=0)


class RollPodGangsInput(_Model):
    """Delete each named PodGang that is not at `target_hash` (or, with `recreate_unavailable`,
    that is not Available), pinned by the uid read, so Grove recreates it at the current hash."""

    pcs: PCSRef
    podgangs: tuple[str, ...]
    target_hash: str
    recreate_unavailable: bool = False
    # Checked just before deleting: each must be present with its condition True, else nothing
    # is deleted (the workflow's read may be a moment old; a gang can fall back meanwhile).
    require_healthy: tuple[str, ...] = ()
    condition: Literal["Available", "Ready"] = "Available"


class RollPodGangsResult(_Model):
    deleted: tuple[str, ...]
    already_done: tuple[str, ...]
    blocked_by: tuple[str, ...] = ()


class ProgressInput(_Model):
    pcs: PCSRef
    workflow_id: str
    phase: str
    replicas: tuple[int, ...] = ()
    in_flight: tuple[str, ...] = ()
    done: int = 0
    total: int = 0
    started_at: datetime | None = None
    ended: bool = False


class WatchPCSInput(_Model):
    pcs: PCSRef
    heartbeat_seconds: float = 1.0


# -- the workflow ------------------------------------------------------------------------------------
class RolloutPolicy(_Model):
    replica_concurrency: int = Field(default=1, ge=1)
    condition: Literal["Available", "Ready"] = "Available"
    step_deadline_seconds: float = Field(default=600.0, gt=0)


class RolloutInput(_Model):
    pcs: PCSRef
    images: dict[str, str]
    requested_by: Requester
    reason: Reason = ""
    policy: RolloutPolicy = RolloutPolicy()

    @field_validator("images")
    @classmethod
    def _images_usable(cls, images: dict[str, str]) -> dict[str, str]:
        if not images:
            raise ValueError("name at least one clique and its new image")
        for clique, image in images.items():
            if (problem := image_problem(image)) is not None:
                raise ValueError(f"clique {clique}: {problem}")
        return images


class SupersedeRequest(OperatorRequest):
    images: dict[str, str]


class ScaleRequest(OperatorRequest):
    replicas: int = Field(ge=0)


class StepRecord(_Model):
    replica: int
    podgangs: tuple[str, ...]
    minimum_viable: bool
    target_hash: str
    started_at: datetime
    finished_at: datetime | None = None
    deleted: tuple[str, ...] = ()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def seconds(self) -> float | None:
        if self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


class RolloutStatus(_Model):
    pcs: PCSRef
    phase: str
    target_hash: str = ""
    previous_hash: str = ""
    rolling_back: bool = False
    paused_reason: str | None = None
    replicas: tuple[int, ...] = ()
    in_flight: tuple[str, ...] = ()
    done: int = 0
    total: int = 0
    steps: tuple[StepRecord, ...] = ()
    pending_scale: int | None = None
    updated_replicas: int = 0
    members_updated: int | None = None
    members_total: int | None = None


class RolloutResult(_Model):
    pcs: PCSRef
    outcome: Literal["completed", "rolled-back"]
    target_hash: str
    steps: tuple[StepRecord, ...]
    started_at: datetime
    finished_at: datetime
