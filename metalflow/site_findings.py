"""What `metalflow site check` found: the findings it keeps per site file and the verdicts it
gives, as data (no rules, no I/O). metalflow/site_check.py reads the site into `SiteFindings`;
metalflow/site_verdicts.py turns them into a `Verdict` per capability (and re-exports these)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Literal

Status = Literal["ready", "degraded", "blocked"]
STATUSES: Final[tuple[Status, ...]] = ("ready", "degraded", "blocked")


@dataclass(frozen=True)
class BMCFinding:
    """One BMC as the check read it (host BMC: `dpu` None)."""

    bmc_id: str
    host_id: str
    dpu: str | None = None
    reachable: bool = True
    credentials_ok: bool = True
    error: str = ""
    reset_types: tuple[str, ...] = ()
    last_reset_time: bool = False
    boot_progress: bool = False
    update_service: bool = False
    # A DPU BMC's credentials: "dpf" (DPF in zero trust manages them: `dpf_credentials` says how),
    # "ours" (the site file's, DPF does not touch them), "" not known (DPF not read).
    credentials_by: str = ""
    dpf_credentials: str = ""

    @property
    def usable(self) -> bool:
        return self.reachable and self.credentials_ok

    def trouble(self) -> str:
        what = "unreachable" if not self.reachable else "refuses the stored credentials"
        return f"BMC {self.bmc_id} {what}" + (f" ({self.error})" if self.error else "")


@dataclass(frozen=True)
class DPFFinding:
    readable: bool = True
    error: str = ""
    # The cluster did not answer (no connection, a timeout, a 5xx): the check kept nothing (exit 3).
    unreachable: bool = False
    dpu_served: bool = True
    version: str = ""  # "25.10", "26.4-rc.3", "26" (rebootStatus), "" unknown
    template_privileged: bool = False  # DPUServiceTemplate spec.security.privileged served
    trust_mode: str = ""  # "zero-trust", "host-trusted", "" unknown (dpf Z1)
    trust_detail: str = ""  # what decided it, or why unknown
    strategies: tuple[str, ...] = ()  # "ns/name: OnDelete" per DPUDeployment (spec.dpus.dpuSetStrategy)
    reboot_discovery: str = ""  # how the DPU agents find their reboot method, in words (dpf R4)


KAI_BACKEND: Final = "kai-scheduler"
KUBE_BACKEND: Final = "default-scheduler"
VOLCANO_BACKEND: Final = "volcano"


@dataclass(frozen=True)
class PCSFinding:
    """One PodCliqueSet's scheduling, as the check read it (grove BEHAVIOUR.md K1, K5)."""

    name: str  # namespace/name
    backend: str = ""  # its scheduler backend; "" unknown
    legacy_count: int = 0  # pods whose scheduler PodGroup annotation is not their PodGang
    legacy_pods: tuple[str, ...] = ()  # the first few of them
    migrating: bool = False  # condition PodGangMigrationInProgress True


@dataclass(frozen=True)
class GroveFinding:
    readable: bool = True
    error: str = ""
    pcs_served: bool = True
    podgangmap_served: bool = True
    gated: tuple[str, ...] = ()  # PodCliqueSets (ns/name) whose scale-out is gated
    default_backend: str = ""  # Grove's default scheduler profile; "" unknown
    backend_detail: str = ""  # where it was read, or why it could not be
    kai_eviction: str = ""  # KAI's stale-gang eviction: "off", "on", "unknown"; "" not read (no KAI use)
    kai_detail: str = ""  # what decided it (the SchedulingShard and its setting), or why unknown
    podcliquesets: tuple[PCSFinding, ...] = ()


@dataclass(frozen=True)
class SiteFindings:
    site: str
    checked_at: str
    bmcs: tuple[BMCFinding, ...] = ()
    dpf: DPFFinding = field(default_factory=DPFFinding)
    grove: GroveFinding = field(default_factory=GroveFinding)
    # The site file checked (its absolute path) and its content's sha256: the findings are that
    # file's (metalflow/site_check.py keeps each site file's apart); "" in a check kept before.
    site_file: str = ""
    site_digest: str = ""

    def hosts(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(b.host_id for b in self.bmcs))

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SiteFindings:
        bmcs = tuple(
            BMCFinding(**{**b, "reset_types": tuple(b.get("reset_types") or ())})
            for b in data.get("bmcs") or ()
        )
        grove = dict(data.get("grove") or {})
        grove["gated"] = tuple(grove.get("gated") or ())
        grove["podcliquesets"] = tuple(
            PCSFinding(**{**p, "legacy_pods": tuple(p.get("legacy_pods") or ())})
            for p in grove.get("podcliquesets") or ()
        )
        return cls(
            site=str(data["site"]),
            checked_at=str(data["checked_at"]),
            bmcs=bmcs,
            dpf=DPFFinding(
                **{
                    **(data.get("dpf") or {}),
                    "strategies": tuple((data.get("dpf") or {}).get("strategies") or ()),
                }
            ),
            grove=GroveFinding(**grove),
            site_file=str(data.get("site_file") or ""),
            site_digest=str(data.get("site_digest") or ""),
        )


@dataclass(frozen=True)
class Reason:
    status: Status
    text: str
    rows: tuple[str, ...]


@dataclass(frozen=True)
class Verdict:
    capability: str
    status: Status
    reasons: tuple[Reason, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "capability": self.capability,
            "status": self.status,
            "reasons": [{"status": r.status, "text": r.text, "rows": list(r.rows)} for r in self.reasons],
        }
