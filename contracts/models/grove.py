"""The Grove contract of metalflow: names from DOMAIN.md section 3, the frozen inputs, results,
signal payload, query and update models of the coherent rollout, and the data of its state
(`RolloutStateData`: mutable, the one model here that is).

A rollout is named by its PodCliqueSet (`PCSRef`); its workflow id is
`contracts.names.rollout_workflow_id`. The rollout's own watcher signals the workflow with
`PCS_STATE_CHANGED_SIGNAL` and a `PCSChange` (only what changed); `read_pcs_state` returns the
whole `PCSState` the changes apply to.

Models ignore unknown fields (rather than refusing them) so a payload written by a newer worker
still loads in an older one while a rollout is in flight.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_serializer, field_validator

from contracts.models.control import OperatorRequest
from contracts.validation import Reason, Requester

GROVE_GROUP: Final = "grove.io"
SCHEDULER_GROUP: Final = "scheduler.grove.io"
GROVE_VERSION: Final = "v1alpha1"

REPLICA_INDEX_LABEL: Final = "grove.io/podcliqueset-replica-index"
GENERATION_HASH_LABEL: Final = "grove.io/podcliqueset-generation-hash"
PART_OF_LABEL: Final = "app.kubernetes.io/part-of"
POD_TEMPLATE_HASH_LABEL: Final = "grove.io/pod-template-hash"
PODGANG_LABEL: Final = "grove.io/podgang"
PODCLIQUE_LABEL: Final = "grove.io/podclique"
PODGANG_ROLE_LABEL: Final = "grove.io/podgang-role"
EPOCH_LABEL: Final = "grove.io/epoch"
PCSG_LABEL: Final = "grove.io/podcliquescalinggroup"
PCSG_REPLICA_INDEX_LABEL: Final = "grove.io/podcliquescalinggroup-replica-index"
ROLLING_RECREATE: Final = "RollingRecreate"
FIELD_MANAGER: Final = "metalflow-rollout"
"""The field manager of the rollout's writes (managedFields tell its edits from others')."""
ROLLOUT_ANNOTATION: Final = "metalflow.io/rollout"
"""PodCliqueSet annotation metalflow writes: the rollout in flight (workflow id, step, in flight)."""
ROLLOUT_DORMANT_ANNOTATION: Final = "metalflow.io/rollout-dormant"
"""PodCliqueSet annotation a rollback writes with its restore: the cliques someone else edited,
as they edited them (JSON), taken out while the pods go back and put back after, dormant."""

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


# -- the world, as the watcher and the reads see it -------------------------------------------------
class GroupState(_Model):
    """One podgroup of a PodGang: the pods of one PodClique in it, counted by pod-template hash.

    `pods`/`ready`: pod-template hash -> pods (Ready pods) of that hash, terminating ones left out."""

    pclq: str
    clique: str  # the template clique
    min_replicas: int = 1  # the PodClique's minAvailable
    expected: int = 0  # the PodClique's spec.replicas
    pcsg: str | None = None  # PodCliqueScalingGroup of a member PodClique
    pcsg_replica: int | None = None
    pods: dict[str, int] = Field(default_factory=dict)
    ready: dict[str, int] = Field(default_factory=dict)
    gated: int = 0
    terminating: int = 0


class GangState(_Model):
    """One PodGang, from its PodGangMap role and the pods it holds (not from its labels' hash,
    which is the PodCliqueSet's current hash whatever the pods run)."""

    name: str
    replica: int
    role: str  # Anchor, Tail or ScaleOut
    epoch: str = ""
    uid: str = ""
    groups: tuple[GroupState, ...] = ()


class PCSSummary(_Model):
    """The PodCliqueSet itself: template identity, strategy, Grove's own progress."""

    namespace: str
    name: str
    exists: bool = True
    generation: int = 0
    observed_generation: int = 0
    current_hash: str = ""
    update_strategy: str = ""
    replicas: int = 0
    images: dict[str, str] = Field(default_factory=dict)  # "clique/container" -> image
    clique_hashes: dict[str, str] = Field(default_factory=dict)  # clique -> its PodCliques' hash label
    scaling_groups: dict[str, int] = Field(default_factory=dict)  # PCSG object -> minAvailable
    termination_delay_seconds: float = 4 * 3600.0
    updated_replicas: int = 0  # Grove's `status.updatedReplicas`
    available_replicas: int = 0
    update_started_at: str | None = None  # Grove's `status.updateProgress`
    update_ended_at: str | None = None
    currently_updating: tuple[int, ...] = ()
    # replica -> the hash its PodGangMap's AnchorIndex-0 anchor entry carries (BEHAVIOUR.md G5):
    # read by `read_pcs_state` only (the watcher does not watch PodGangMaps)
    anchor_hashes: dict[int, str] = Field(default_factory=dict)


class PCSState(_Model):
    """A PodCliqueSet and its PodGangs: what `read_pcs_state` returns, and what the workflow
    keeps up to date from the watcher's `PCSChange` signals. `cliques`: the template's cliques
    as read (a read only; the watcher's changes do not carry them)."""

    summary: PCSSummary
    gangs: tuple[GangState, ...] = ()
    cliques: tuple[dict[str, Any], ...] = ()

    @property
    def exists(self) -> bool:
        return self.summary.exists

    def gang(self, name: str) -> GangState | None:
        return next((g for g in self.gangs if g.name == name), None)


class PCSChange(_Model):
    """The watcher's signal: the summary when it changed, the PodGangs that changed, the names
    of PodGangs gone. `full`: a fresh listing (replaces everything the workflow holds).
    Numbered by (attempt, sequence) so a late signal of a replaced attempt is dropped."""

    summary: PCSSummary | None = None
    gangs: tuple[GangState, ...] = ()
    removed: tuple[str, ...] = ()
    full: bool = False
    attempt: int = 0
    sequence: int = 0


# -- activities' inputs and results -------------------------------------------------------------------
class SetImagesInput(_Model):
    """`images`: "clique/container" (or "clique" when it has one container) -> image."""

    pcs: PCSRef
    images: dict[str, str]


class FieldChange(_Model):
    """One template field the rollout set: its path ("clique/container"), before and after."""

    path: str
    before: str
    after: str


class TemplateResult(_Model):
    """The template after a write: the generation that holds it, and the fields changed.

    A restore (`restore_pcs_template`) also says which fields it put back over someone else's
    value (`overwritten`), and which cliques someone else had edited (`dormant`: each as it was,
    with the rollout's fields at their recorded values), to be put back once every pod runs the
    original again (`put_back_foreign_edits`), where they stay dormant."""

    generation: int
    changed: tuple[FieldChange, ...] = ()
    skipped: tuple[str, ...] = ()  # what was left alone (someone else changed it since)
    overwritten: tuple[str, ...] = ()
    dormant: dict[str, dict[str, Any]] = Field(default_factory=dict)
    template: dict[str, object] = Field(default_factory=dict)


class RestoreInput(_Model):
    """Write every clique back as it was before the rollout (`original`, its first read of the
    template's cliques); `fields` are the rollout's own (named, and told from someone else's)."""

    pcs: PCSRef
    fields: tuple[FieldChange, ...]
    original: tuple[dict[str, Any], ...] = ()


class ForeignEditsInput(_Model):
    """Put back `dormant` (clique -> its entry as someone else edited it), each only where the
    clique still holds its `original` entry (what the restore wrote)."""

    pcs: PCSRef
    dormant: dict[str, dict[str, Any]]
    original: tuple[dict[str, Any], ...]


class TemplateChangeInput(_Model):
    pcs: PCSRef
    written: dict[str, object]  # the template as the rollout last wrote or adopted it
    since: datetime


class TemplateChange(_Model):
    """A template edit the rollout did not make: the fields and who changed them (managedFields);
    and the update strategy, with who set it (a switch away from OnDelete pauses the rollout)."""

    generation: int
    fields: tuple[str, ...]
    managers: tuple[str, ...]
    template: dict[str, object] = Field(default_factory=dict)
    strategy: str = ""
    strategy_set_by: tuple[str, ...] = ()


class ScalePCSInput(_Model):
    pcs: PCSRef
    replicas: int = Field(ge=0)


class RollGangInput(_Model):
    """Replace the pods of `podgang` whose clique is in `targets` and whose pod-template hash is
    not its target: Grove recreates them from the PodCliques' current spec (OnDelete)."""

    pcs: PCSRef
    podgang: str
    targets: dict[str, str]  # clique -> pod-template hash
    # Checked just before deleting: each must still be healthy, else nothing is deleted.
    require_healthy: tuple[str, ...] = ()
    # The PodCliqueSet generation the targets belong to: another one (a template edit the
    # workflow has not seen yet) deletes nothing. 0: not checked.
    generation: int = 0


class RollGangResult(_Model):
    deleted: tuple[str, ...] = ()
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
    settle_seconds: float = 0.2  # changes within this are sent as one signal


# -- the workflow ------------------------------------------------------------------------------------
class StepRecord(_Model):
    """One step: one PodGang of one replica replaced (pods deleted, recreated by Grove)."""

    replica: int
    podgangs: tuple[str, ...]
    role: str  # the PodGang's role: Anchor (its replica's minimum-viable gang), Tail, ScaleOut
    target_hash: str
    started_at: datetime
    finished_at: datetime | None = None
    deleted: tuple[str, ...] = ()  # the pods deleted
    kind: Literal["roll", "repair", "rollback"] = "roll"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def seconds(self) -> float | None:
        if self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


class RolloutPolicy(_Model):
    replica_concurrency: int = Field(default=1, ge=1)
    step_deadline_seconds: float = Field(default=600.0, gt=0)
    # Roll a step that leaves a PodClique or scaling group below its minAvailable (a replica
    # outage: always so when a standalone clique changes, Grove puts all its pods in the anchor).
    allow_replica_outage: bool = False
    # Continue as new past this many history events (at a safe point between steps).
    history_limit: int = Field(default=10_000, ge=500)


class Wake(_Model):
    """A timer a run waits on: when it wakes, and why it waits."""

    at: datetime
    reason: str


class SupersedeRequest(OperatorRequest):
    images: dict[str, str]


class ScaleRequest(OperatorRequest):
    replicas: int = Field(ge=0)


class RolloutStateData(BaseModel):
    """Everything a rollout run knows, as data. `workflows/rollout/state.py`'s `RolloutState`
    derives from it and adds the decisions; the run continues as new with this object as
    `RolloutInput.state`, so nothing is copied field by field.

    Mutable (the run updates it in place), unlike the other models. What belongs to one run is
    not serialized (`exclude`): the watcher's view and its (attempt, sequence) ordering (the next
    run's watcher lists afresh from attempt 1). Unknown fields are ignored, so a newer worker's
    state loads.
    """

    model_config = ConfigDict(extra="ignore")

    started_at: datetime
    runs: int = 1
    site_check: tuple[str, ...] = ()  # RolloutInput.site_check, kept across continue-as-new
    # -- the template: what it was, what the rollout wrote, what it rolls to ----------------------
    original: dict[str, str] = Field(default_factory=dict)  # clique -> pod-template hash before
    targets: dict[str, str] = Field(default_factory=dict)  # clique -> pod-template hash rolled to
    target_hash: str = ""
    previous_hash: str = ""
    fields: tuple[FieldChange, ...] = ()  # the template fields the rollout set
    original_cliques: tuple[dict[str, Any], ...] = ()  # the template's cliques at the first read
    written: dict[str, object] = Field(default_factory=dict)  # the template as last written or adopted
    written_at: datetime
    generation: int = 0  # the PodCliqueSet generation the rollout wrote or adopted last
    anchor_hashes: dict[int, str] = Field(default_factory=dict)  # PCSSummary's, at the first read
    # -- direction and the operator's requests ---------------------------------------------------
    rolling_back: bool = False
    # Every target the rollout rolled to before its current one (a superseding write, an edit
    # adopted on `resume`, a rollback): a PodGang whole at one of them is the rollout's own.
    earlier: list[dict[str, str]] = Field(default_factory=list)
    # Cliques someone else edited, as they edited them: taken out by the rollback's restore, put
    # back once every pod runs the original, where they stay dormant (`dormant_back`).
    dormant: dict[str, dict[str, Any]] = Field(default_factory=dict)
    dormant_back: bool = False
    dormant_left: tuple[str, ...] = ()  # cliques not put back: someone else changed them again
    overwritten: tuple[str, ...] = ()  # the rollout's fields it put back over someone else's value
    reverting_for_abort: bool = False  # the abort is being acted on: everything goes back, then it ends
    aborting: OperatorRequest | None = None  # the kernel's `abort_request`, handed to the next run
    paused_by: OperatorRequest | None = None  # the kernel's `paused_by`, handed to the next run
    paused_reason: str | None = None
    rollback_request: OperatorRequest | None = None
    supersede: SupersedeRequest | None = None
    scale: ScaleRequest | None = None
    # -- steps -----------------------------------------------------------------------------------
    steps: list[StepRecord] = Field(default_factory=list)  # the latest ones (`steps_done` counts all)
    steps_done: int = 0
    repairs: int = 0
    in_flight: dict[int, str] = Field(default_factory=dict)  # replica -> PodGang whose step is not done
    interrupted: set[str] = Field(default_factory=set)  # PodGangs whose step missed its deadline
    # -- this run only ---------------------------------------------------------------------------
    watched: PCSState | None = Field(default=None, exclude=True)
    watched_at: tuple[int, int] = Field(default=(-1, -1), exclude=True)  # (attempt, sequence) applied
    timer: Wake | None = Field(default=None, exclude=True)  # the runbook's wait, while it waits

    @field_serializer("interrupted")
    def _sorted(self, interrupted: set[str]) -> list[str]:
        return sorted(interrupted)  # the same payload whatever the set's order


class RolloutInput(_Model):
    """`images`: "clique/container" (or "clique" when it has one container) -> new image."""

    pcs: PCSRef
    images: dict[str, str]
    requested_by: Requester
    reason: Reason = ""
    policy: RolloutPolicy = RolloutPolicy()
    state: RolloutStateData | None = None  # set by continue-as-new only: the run's state
    # What the kept `metalflow site check` said of this rollout at its start when it was degraded
    # (the CLI's words); the status's and result's warnings carry it (issue 36 deliver 4).
    site_check: tuple[str, ...] = ()

    @field_validator("images")
    @classmethod
    def _images_usable(cls, images: dict[str, str]) -> dict[str, str]:
        if not images:
            raise ValueError("name at least one clique and its new image")
        for clique, image in images.items():
            if (problem := image_problem(image)) is not None:
                raise ValueError(f"clique {clique}: {problem}")
        return images


class RolloutStatus(_Model):
    """Where a rollout is. `steps` holds the latest steps only (`steps_done` counts them all)."""

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
    steps_done: int = 0
    repairs: int = 0
    pending_scale: int | None = None
    updated_replicas: int = 0
    fields: tuple[FieldChange, ...] = ()
    runs: int = 1
    # Liveness: what the run does now, one of `in-flight` (a step, until its deadline), `timer`
    # (a wait with `wake_at` and its reason), `next` (a move it makes at once), `paused` (an
    # operator's decision), `ended`; `activity` says which and why.
    doing: Literal["in-flight", "timer", "next", "paused", "ended"] = "next"
    activity: str = ""
    wake_at: datetime | None = None
    dormant: tuple[str, ...] = ()  # cliques whose edit by someone else the rollback leaves dormant
    overwritten: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()  # what the PodCliqueSet is left with: a gated scale-out (G5)
    # Set by the CLI for a run that did not end by itself (`doing` then `ended`): "<id> was
    # terminated: ...", "was aborted: ...", "failed: ...", "timed out"; the rest is what it last showed.
    ended: str = ""


class PlannedStep(_Model):
    """One step `rollout plan` shows: a PodGang, the pods it replaces, why it is an outage."""

    replica: int
    podgang: str
    role: str
    pods: int
    outage: tuple[str, ...] = ()


class RolloutPlan(_Model):
    """What `rollout start` would do, starting nothing: the cliques it changes, its steps in
    order (`concurrency` replicas at once), or why it would refuse (`refusal`)."""

    pcs: PCSRef
    images: dict[str, str]
    changed: tuple[str, ...] = ()
    concurrency: int = 1
    steps: tuple[PlannedStep, ...] = ()
    refusal: str | None = None
    warnings: tuple[str, ...] = ()  # what the rollout would leave: a gated scale-out (G5)


class RolloutResult(_Model):
    """How a rollout ended: every PodGang at the target (`completed`), back at the original
    (`rolled-back`), or `aborted`: an operator's abort took every PodGang back, or (off OnDelete)
    ended the run taking nothing back (`aborted` says who, why, what is left); the run completes,
    as an abort is asked for (a run of older code failed with `RolloutAborted`)."""

    pcs: PCSRef
    outcome: Literal["completed", "rolled-back", "aborted"]
    aborted: str = ""  # "rollout of ns/x aborted by <who>: <reason>; <what it left>"
    target_hash: str
    steps: tuple[StepRecord, ...]
    steps_done: int = 0
    started_at: datetime
    finished_at: datetime
    dormant: tuple[str, ...] = ()  # rolled back: cliques whose edit by someone else stays dormant
    warnings: tuple[str, ...] = ()  # what the PodCliqueSet is left with: a gated scale-out (G5)
