"""Worker settings: where the site is and how hard metalflow may lean on it.

Read from the environment once, when the worker (or a CLI command that does I/O) starts; never
inside workflows. Secrets are not settings: BMC credentials are reached through references in
the inventory, and Temporal's own connection settings come from `temporalio.envconfig`.

| variable | meaning | default |
| --- | --- | --- |
| `METALFLOW_SITE_FILE` | the site file (YAML) the inventory reads | `site.yaml` in the state dir |
| `METALFLOW_INVENTORY` | `site` (the site file) or `cluster` (labels/annotations on DPF objects) | `site` |
| `KUBECONFIG` | the DPF cluster's kubeconfig (in a pod: in-cluster) | the state dir's `kubeconfig` if any |
| `METALFLOW_DPF_NAMESPACE` | namespace of the DPF objects | `dpf-operator-system` |
| `METALFLOW_BMC_MAX_IN_FLIGHT` | power cycles per BMC, fleet-wide; requests per BMC in a worker | `2` |
| `METALFLOW_DPF_MAX_IN_FLIGHT_PER_HOST` | concurrent DPF API calls per host, across the worker | `4` |
| `METALFLOW_BMC_LEASE_RECLAIM_SECONDS` | how often a contended BMC lease looks for closed holders | `30` |
| `METALFLOW_WORKER_TAKEOVER_SECONDS` | how soon another worker takes a dead worker's workflows | `10` |
| `METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS` | the site watch's idle cost and takeover | `150` |
| `METALFLOW_POWER_WATCH_SECONDS` | an entity's power reading at rest, every N s (0: none) | `900` |

`METALFLOW_POWER_WATCH_SECONDS` is read by the client that starts a host's entity
(`contracts/host_entity.py`), not by these settings: it goes into the entity's input.

The BMC limit is fleet-wide for power cycles (`workflows/bmc_lease/workflow.py`): a lease workflow per
BMC endpoint gives at most that many reboot runs a slot at once, whichever worker runs them; the
worker's own request cap stays as a second, local bound.

The takeover time is Temporal's sticky schedule-to-start timeout: a worker keeps the workflows it
ran in its cache and the server hands their next task to that worker first; when the worker died,
the task waits this long before any worker may take it (replaying the history). Shorter means a
faster takeover, and more replays on a worker too busy to take its own tasks in time (each costs
the CPU of the whole history); 10 s is the SDK's default.

The site watch's heartbeat timeout sets what the idle watch costs and how long a dead worker
holds it (`contracts.models.dpf.SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS`): it beats every third of
it (150 s: 1,728 Actions a day) and is taken over within it plus 10 s. It applies to a watch
started by this worker; a running watch keeps its own until it is started again.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from contracts.models.dpf import SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS
from contracts.models.inventory import DPF_NAMESPACE
from drivers.statedir import find_state_dir

DEFAULT_STATE_DIR = Path(".metalflow")  # kept for importers; the defaults below use `find_state_dir`


def _state_dir() -> Path:
    # Found when settings are made, never at import: workflows import this module in the sandbox.
    return find_state_dir()[0]


class Settings(BaseModel):
    model_config = ConfigDict(frozen=True)

    site_file: Path = Field(default_factory=lambda: _state_dir() / "site.yaml")
    inventory: Literal["site", "cluster"] = "site"
    kubeconfig: Path | None = None  # None: in-cluster config, or the client's default
    dpf_namespace: str = DPF_NAMESPACE
    bmc_max_in_flight: int = Field(default=2, ge=1)
    dpf_max_in_flight_per_host: int = Field(default=4, ge=1)
    bmc_lease_reclaim_seconds: float = Field(default=30.0, gt=0, le=3600)
    worker_takeover_seconds: float = Field(default=10.0, ge=1, le=600)
    site_watch_heartbeat_timeout_seconds: float = Field(
        default=SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS, ge=3, le=3600
    )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        """Settings from `env` (default: the process environment); a bad value raises ValueError."""
        env = os.environ if env is None else env
        values: dict[str, object] = {}
        if "METALFLOW_SITE_FILE" in env:
            values["site_file"] = Path(env["METALFLOW_SITE_FILE"])
        if "METALFLOW_INVENTORY" in env:
            values["inventory"] = env["METALFLOW_INVENTORY"]
        if env.get("KUBECONFIG"):
            values["kubeconfig"] = Path(env["KUBECONFIG"].split(os.pathsep)[0])
        elif (_state_dir() / "kubeconfig").exists() and "KUBERNETES_SERVICE_HOST" not in env:
            values["kubeconfig"] = _state_dir() / "kubeconfig"
        if "METALFLOW_DPF_NAMESPACE" in env:
            values["dpf_namespace"] = env["METALFLOW_DPF_NAMESPACE"]
        for key, field in (
            ("METALFLOW_BMC_MAX_IN_FLIGHT", "bmc_max_in_flight"),
            ("METALFLOW_DPF_MAX_IN_FLIGHT_PER_HOST", "dpf_max_in_flight_per_host"),
        ):
            if key in env:
                try:
                    values[field] = int(env[key])
                except ValueError:
                    raise ValueError(f"{key} must be a whole number, not {env[key]!r}") from None
        for key, field in (
            ("METALFLOW_BMC_LEASE_RECLAIM_SECONDS", "bmc_lease_reclaim_seconds"),
            ("METALFLOW_WORKER_TAKEOVER_SECONDS", "worker_takeover_seconds"),
            ("METALFLOW_SITE_WATCH_HEARTBEAT_TIMEOUT_SECONDS", "site_watch_heartbeat_timeout_seconds"),
        ):
            if key in env:
                try:
                    values[field] = float(env[key])
                except ValueError:
                    raise ValueError(f"{key} must be a number, not {env[key]!r}") from None
        try:
            return cls.model_validate(values)
        except ValueError as err:
            raise ValueError(f"invalid metalflow settings: {err}") from err
