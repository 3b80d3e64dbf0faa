"""The site file: what a (simulated) site holds, as YAML.

The simulator serves the site it is given (`--site FILE`) or a generated one (`--hosts N
--dpus-per-host K`), and writes the site it serves to `<state-dir>/site.yaml` with every BMC
endpoint filled in, so the product reads the same file to find hosts, BMCs and credentials.

Example:

    name: default
    namespace: dpf-operator-system
    hosts:
      - id: host-001
        groups: [gpu-compute]
        labels: {rack: r01}
        instance: null                      # or the id of the instance assigned to the host
        bmc:
          endpoint: http://127.0.0.1:40123   # the BMC's own address: Redfish at /redfish/v1
          profile: powercycle               # simulator only: how this BMC behaves
          credentials: {file: /abs/.metalflow/credentials/host-001.json}
          insecure: false
          auth: auto                        # session | basic | auto (session where offered)
          system: null                      # the System's id or path (filled in when null)
        dpus:
          - id: host-001-dpu-0
            model: BF3
            firmware: 32.43.1014
            bmc: {endpoint: ..., profile: dpu, credentials: {env: {username: U, password: P}}}
    workloads:
      - namespace: default
        name: inference
        replicas: 2
        ...

Every BMC is served at the root of an address of its own (a port per BMC on 127.0.0.1), as
a real BMC is: `<endpoint>/redfish/v1`. Hosts whose BMCs have profile `multi-system` and the
same `group` share one BMC service (one endpoint, one account), each its own System (`system`
is filled in with the host id; any other host's `system`, when null, with its System's path, as
an inventory exported from a provisioning system names it). A BMC with profile
`self-signed-tls` is served over https with a certificate from a CA made at simulator start;
`ca_bundle` is filled in with the CA's path.

A DPU whose `bmc` is `null` has no BMC the product can reach (its BMC is not on the management
network metalflow uses, or the inventory does not list it): the simulator serves none for it,
and the product refuses its firmware updates with a clear error. Generated sites give every DPU
a BMC unless asked not to (`default_site(..., dpu_bmcs=False)`, `serve --no-dpu-bmcs`): each
BMC service is a listening socket of the simulator's one process, and the file-descriptor limit
(20,000 here, soft and hard) cannot hold 10,000 hosts' BMCs and their DPUs' besides.

Credential references never hold a secret: `{file: PATH}` (a JSON file with `username` and
`password`), `{env: {username: VAR, password: VAR}}`, or `{secret: {namespace: NS, name: N}}`
(a Kubernetes Secret with keys `username` and `password`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

# The profiles a generated site rotates through (host i gets DEFAULT_ROTATION[i % 5]).
DEFAULT_ROTATION = ("powercycle", "no-powercycle", "task-monitor", "etag-required", "reset-cooldown")
# Every host BMC profile; the ones after the rotation are chosen by name in a site file.
HOST_BMC_PROFILES = (
    *DEFAULT_ROTATION,
    "basic-only",  # no SessionService: HTTP basic auth only
    "power-lag",  # PowerState keeps its old value for seconds after a reset, no Powering* states
    "powercycle-501",  # advertises PowerCycle, answers 501 Not Implemented to it
    "multi-system",  # several hosts behind one BMC service (hosts of one `group`)
    "self-signed-tls",  # https with a certificate from the simulator's own CA
)
DPUModel = Literal["BF3", "BF4"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EnvCredentials(_Model):
    username: str
    password: str


class SecretRef(_Model):
    namespace: str
    name: str


class CredentialRef(_Model):
    """Where a BMC's username and password are; exactly one of the three."""

    file: str | None = None
    env: EnvCredentials | None = None
    secret: SecretRef | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> CredentialRef:
        given = [k for k in ("file", "env", "secret") if getattr(self, k) is not None]
        if len(given) != 1:
            raise ValueError("a credential reference names exactly one of file, env, secret")
        return self


class BMC(_Model):
    endpoint: str = ""  # filled in by the simulator when it serves the site
    profile: str = "powercycle"
    credentials: CredentialRef | None = None  # filled in by the simulator when absent
    insecure: bool = False
    ca_bundle: str | None = None  # filled in by the simulator for self-signed-tls BMCs
    auth: Literal["session", "basic", "auto"] = "auto"
    system: str | None = None  # filled in by the simulator: the host id on multi-system BMCs, else the path
    group: str | None = None  # simulator only: multi-system BMCs of one group share a service


class DPU(_Model):
    id: str
    model: DPUModel = "BF3"
    serial: str | None = None
    firmware: str = "32.43.1014"
    # None (`bmc: null` in the file): no BMC is reachable for this DPU, and none is served.
    bmc: BMC | None = Field(default_factory=lambda: BMC(profile="dpu"))


class Host(_Model):
    id: str
    groups: list[str] = Field(default_factory=lambda: ["gpu-compute"])
    labels: dict[str, str] = Field(default_factory=dict)
    instance: str | None = None
    bmc: BMC = Field(default_factory=BMC)
    dpus: list[DPU] = Field(default_factory=list)

    @model_validator(mode="after")
    def _known_profile(self) -> Host:
        if self.bmc.profile not in HOST_BMC_PROFILES:
            raise ValueError(
                f"host {self.id}: unknown BMC profile {self.bmc.profile!r}; "
                f"choose one of {', '.join(HOST_BMC_PROFILES)}"
            )
        return self


class ScalingGroup(_Model):
    name: str
    cliques: list[str]
    replicas: int = 3
    min_available: int = 1


class Workload(_Model):
    """A Grove PodCliqueSet to create when the site is initialised."""

    namespace: str = "default"
    name: str
    replicas: int = 2
    cliques: list[str] = Field(default_factory=list)  # standalone cliques
    scaling_groups: list[ScalingGroup] = Field(default_factory=list)
    update_strategy: Literal["RollingRecreate", "OnDelete"] = "OnDelete"
    image: str = "registry.local/inference:1.0"


class Site(_Model):
    name: str = "default"  # the name HostWorkflowInput.site defaults to: one site name everywhere
    namespace: str = "dpf-operator-system"
    hosts: list[Host] = Field(default_factory=list)
    workloads: list[Workload] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_ids(self) -> Site:
        seen: set[str] = set()
        for host in self.hosts:
            for ident in [host.id, *(d.id for d in host.dpus)]:
                if ident in seen:
                    raise ValueError(f"id {ident!r} appears twice in the site")
                seen.add(ident)
        return self

    def host(self, host_id: str) -> Host:
        for host in self.hosts:
            if host.id == host_id:
                return host
        raise KeyError(host_id)


def default_site(hosts: int, dpus_per_host: int, *, name: str = "default", dpu_bmcs: bool = True) -> Site:
    """The generated site: BMC profiles and DPU models mixed across hosts, one Grove workload.

    Host i gets profile `DEFAULT_ROTATION[i % 5]`; every third host carries BF4 DPUs (which
    ask for a second reboot), the others BF3. `dpu_bmcs=False` gives the DPUs no BMC (`bmc:
    null`): a site of 10,000 hosts whose benchmarks never use a DPU's BMC fits the simulator's
    file-descriptor limit that way (see the module docstring).
    """
    if hosts < 0 or dpus_per_host < 0:
        raise ValueError("--hosts and --dpus-per-host must be zero or more")
    site_hosts = []
    for i in range(hosts):
        host_id = f"host-{i + 1:03d}"
        model: DPUModel = "BF4" if i % 3 == 2 else "BF3"
        site_hosts.append(
            Host(
                id=host_id,
                labels={"rack": f"r{i // 16 + 1:02d}"},
                bmc=BMC(profile=DEFAULT_ROTATION[i % len(DEFAULT_ROTATION)]),
                dpus=[
                    DPU(
                        id=f"{host_id}-dpu-{k}",
                        model=model,
                        serial=f"MT{i + 1:04d}{k:02d}",
                        bmc=BMC(profile="dpu") if dpu_bmcs else None,
                    )
                    for k in range(dpus_per_host)
                ],
            )
        )
    workload = Workload(
        name="inference",
        replicas=2,
        cliques=["router"],
        scaling_groups=[
            ScalingGroup(name="workers", cliques=["prefill", "decode"], replicas=3, min_available=1)
        ],
        update_strategy="OnDelete",
    )
    return Site(name=name, hosts=site_hosts, workloads=[workload])


def load_site(path: Path) -> Site:
    """Read a site file; a clear ValueError names the file and what is wrong."""
    try:
        # libyaml's parser where PyYAML has it (a 60-host site: ~10 ms against ~80 ms of CPU, at
        # every simulator start), else PyYAML's own; both safe loaders.
        data = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    except (OSError, yaml.YAMLError) as err:
        raise ValueError(f"cannot read site file {path}: {err}") from err
    try:
        return Site.model_validate(data or {})
    except ValueError as err:
        raise ValueError(f"site file {path} is not valid: {err}") from err


def dump_site(site: Site) -> str:
    data = site.model_dump(mode="json", exclude_none=True)
    # A DPU without a BMC says so (`bmc: null`): left out, the key would read back as the default BMC.
    for host, host_data in zip(site.hosts, data.get("hosts", []), strict=True):
        for dpu, dpu_data in zip(host.dpus, host_data.get("dpus", []), strict=True):
            if dpu.bmc is None:
                dpu_data["bmc"] = None
    return yaml.safe_dump(data, sort_keys=False)
