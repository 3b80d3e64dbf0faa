"""The simulated site as one aiohttp application: the pieces composed, served, and described.

`SimulatedSite.start()` binds 127.0.0.1 (the Kubernetes-compatible API and the control API on
the port asked for, every BMC on a free port of its own), fills every BMC endpoint in, and
writes what the product needs to reach the site into the state dir:

- `site.yaml`: the site served, endpoints and credential references filled in;
- `kubeconfig`: a context `metalflow-sim` pointing at the Kubernetes-compatible API, with the
  admin's bearer token (the API refuses requests without a valid token, see `kube/rbac.py`);
- `credentials/<bmc-id>.json` (mode 0600): each BMC's username and password;
- `tls/bmc-ca.pem`: the CA of the https BMCs (`self-signed-tls`), when the site has one;
- `tls/apiserver.crt`, `tls/apiserver.key`: the Kubernetes API's HTTPS serving certificate;
- `sim.json`: `{"url", "kube_url", "pid", "kubeconfig", "site"}`, written last, once requests
  are served. `kube_url` serves the same routes over HTTPS, which the kubeconfig names:
  kubectl sends a bearer token only over TLS.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from simulators import control
from simulators.dpf import DPFController
from simulators.dpf import versions as dpf_versions
from simulators.events import Hub
from simulators.faults import Faults
from simulators.grove import GroveController
from simulators.grove import backends as grove_backends
from simulators.kube.cel import RuleValidator
from simulators.kube.crds import load_resource_types, make_validator
from simulators.kube.events import RESOURCE_TYPES as EVENT_TYPES
from simulators.kube.events import serve_events
from simulators.kube.http import add_kube_routes
from simulators.kube.rbac import RESOURCE_TYPES as RBAC_TYPES
from simulators.kube.rbac import Auth
from simulators.kube.store import AlreadyExists, NotFound, Store
from simulators.kube.tls import make_serving_certificate
from simulators.measure import RequestCounts, Timeline
from simulators.persist import StoreSnapshots
from simulators.redfish import BMCs, service_groups
from simulators.site import BMC, CredentialRef, Site, dump_site
from simulators.timings import Timings
from simulators.violations import Violations

log = logging.getLogger(__name__)

NAMESPACES = ("default", "dpf-operator-system")


@dataclass(frozen=True)
class ServeOptions:
    state_dir: Path
    crd_dir: Path
    port: int = 0
    faults: str = "none"
    seed: int = 0
    timings: Timings = Timings()
    initialised: bool = False
    persist: bool = False  # keep the store in <state-dir>/sim-store.json (simulators.persist)
    dpf_version: str = dpf_versions.V25  # the DPF release played (simulators/dpf/versions.py)
    dpf_deployment_mode: str = "zero-trust"  # DPF v26: zero-trust | host-trusted (BEHAVIOUR.md P1)
    grove: grove_backends.GroveSetup = grove_backends.GroveSetup()  # Grove's scheduler set-up (K1-K5)
    dpf_bmc_credentials: str = "ours"  # "per-dpu": DPF 26.8 onboarded the DPU BMCs (dpf BEHAVIOUR.md Z1)
    dpf_reboot_discovery: str = "device-query"  # DPF v26 agent: device-query | boot-id (dpf BEHAVIOUR.md R4)


class SimulatedSite:
    """Everything the simulator serves, started and stopped together."""

    def __init__(self, site: Site, options: ServeOptions) -> None:
        self.site = site
        self.options = options
        self.hub = Hub()
        self.violations = Violations()
        self.faults = Faults(options.faults, options.seed)
        types = dpf_versions.apply(load_resource_types(options.crd_dir), options.dpf_version)
        types += list(RBAC_TYPES) + list(EVENT_TYPES)
        self.store = Store(types, validate=make_validator(types), validate_rules=RuleValidator())
        self.auth = Auth(self.store)
        self.credentials = _resolve_credentials(site, options.state_dir)
        self.bmcs = BMCs(site, self.hub, self.faults, options.timings, self.violations, self.credentials)
        self.dpf = DPFController(
            self.store, self.hub, options.timings, self.violations, site, version=options.dpf_version,
            deployment_mode=options.dpf_deployment_mode, bmc_credentials=options.dpf_bmc_credentials,
            reboot_discovery=options.dpf_reboot_discovery,
        )  # fmt: skip
        self.dpf.provisioner.arm_state = self.bmcs.dpu_system_state  # DPF reads the DPU BMCs (R2)
        self.grove = GroveController(self.store, options.timings, self.violations, options.grove)
        self.request_counts = RequestCounts()
        self.timeline = Timeline()
        self.bmcs.request_counts = self.request_counts
        self.bmcs.power.on_reset = self.timeline.reset_accepted
        self.dpf.provisioner.on_reboot_asked = self.timeline.reboot_asked
        self.app = web.Application(
            client_max_size=16 * 1024 * 1024, middlewares=[self.request_counts.middleware()]
        )
        self.kube_api = add_kube_routes(self.app, self.store, self.faults, auth=self.auth)
        serve_events(self.store, self.kube_api)  # core/v1 Events and their events.k8s.io/v1 view
        control.add_control_routes(self.app, self)
        self._runner: web.AppRunner | None = None
        self.url = ""
        host_ids = [h.id for h in site.hosts]
        self.snapshots = (
            StoreSnapshots(
                self.store,
                options.state_dir,
                host_ids,
                self.bmcs.kept_state,
                self.bmcs.restore_kept,
            )
            if options.persist
            else None
        )
        self.restored: int | None = None  # objects restored from the snapshot, None: started empty
        self.kube_url = ""

    async def start(self) -> str:
        """Serve, then write the state files; returns the base URL.

        Raises:
            SnapshotMismatch: `persist` and the state dir's snapshot is of another site.
        """
        if self.snapshots is not None:
            self.options.state_dir.mkdir(parents=True, exist_ok=True)
            self.restored = self.snapshots.load()
        self._create_namespaces()
        self._create_credential_secrets()
        self._create_scheduler_setup()
        # The port asked for first: the BMCs then take thousands of free ports (10,000 at 10,000
        # hosts), and one of them was the port a caller had picked free for the API moments before.
        # Nothing knows the site is up until sim.json is written, last.
        self._runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        tcp = web.TCPSite(self._runner, "127.0.0.1", self.options.port, reuse_address=True)
        await tcp.start()
        port = tcp._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        await self.bmcs.start()
        await self.bmcs.serve(self.options.state_dir / "tls")
        await self.dpf.start()
        await self.grove.start()
        if self.options.initialised:
            await self.dpf.initialise()
            if self.options.dpf_bmc_credentials == "per-dpu":  # DPF set passwords nobody stored (Z1)
                for host in self.site.hosts:
                    for dpu in host.dpus:
                        if dpu.bmc is not None:
                            await self.bmcs.bmc_fault(dpu.id, "wrong-credentials")
        # The site's Grove workloads run whether or not the hosts' DPUs are provisioned yet (they
        # are not placed on the simulated hosts), so the demo can roll one after provisioning.
        await self.grove.initialise(self.site.workloads)
        # The same routes over HTTPS for Kubernetes clients: kubectl sends a token only over TLS.
        self._certificate = make_serving_certificate(self.options.state_dir / "tls")
        tls = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self._certificate.server_context())
        await tls.start()
        tls_port = tls._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.kube_url = f"https://127.0.0.1:{tls_port}"
        self._fill_endpoints()
        self.bmcs.resume()  # a power transition the snapshot kept goes on, now that DPF listens
        self._write_state_files()
        if self.snapshots is not None:
            self.snapshots.start()
        return self.url

    async def stop(self) -> None:
        (self.options.state_dir / "sim.json").unlink(missing_ok=True)
        await self.grove.stop()
        await self.dpf.stop()
        await self.bmcs.stop()
        if self.snapshots is not None:
            await self.snapshots.stop()
        if self._runner is not None:
            await self._runner.cleanup()

    def _create_namespaces(self) -> None:
        for name in sorted({*NAMESPACES, self.site.namespace, *(w.namespace for w in self.site.workloads)}):
            self._ensure_namespace(name)

    def _create_scheduler_setup(self) -> None:
        """Grove's operator ConfigMap and KAI's default SchedulingShard, as the site was set up
        (`serve --grove-scheduler`, `--kai-stale-eviction`; grove BEHAVIOUR.md K1, K4)."""
        self._ensure_namespace(grove_backends.GROVE_NAMESPACE)
        bodies = [
            (
                self.store.resource_type("", "v1", "configmaps"),
                grove_backends.operator_config(self.options.grove),
            )
        ]
        if (shard := grove_backends.scheduling_shard(self.options.grove)) is not None:
            bodies.append((self.store.resource_type("kai.scheduler", "v1", "schedulingshards"), shard))
        for rt, body in bodies:
            with contextlib.suppress(AlreadyExists):
                self.store.create(rt, body["metadata"].get("namespace"), body)

    def _ensure_namespace(self, name: str) -> None:
        namespace_type = self.store.resource_type("", "v1", "namespaces")
        try:
            self.store.get(namespace_type, None, name)
        except NotFound:
            body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            self.store.create(namespace_type, None, body)

    def _create_credential_secrets(self) -> None:
        """Serve the Secrets that `secret:` credential references name."""
        secret_type = self.store.resource_type("", "v1", "secrets")
        for bmc_id, bmc in _all_bmcs(self.site):
            if bmc.credentials is None or bmc.credentials.secret is None:
                continue
            ref = bmc.credentials.secret
            username, password = self.credentials[bmc_id]
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": ref.name, "namespace": ref.namespace},
                "type": "Opaque",
                "data": {
                    "username": base64.b64encode(username.encode()).decode(),
                    "password": base64.b64encode(password.encode()).decode(),
                },
            }
            self._ensure_namespace(ref.namespace)
            try:
                self.store.create(secret_type, ref.namespace, body)
            except AlreadyExists:
                self.store.update(secret_type, ref.namespace, ref.name, body)

    def _fill_endpoints(self) -> None:
        bmcs = self.bmcs
        for host in self.site.hosts:
            host.bmc.endpoint = bmcs.endpoint(host.id)
            service = bmcs.service_of(host.id)
            if service.tls and bmcs.ca_path is not None and not host.bmc.insecure:
                host.bmc.ca_bundle = str(bmcs.ca_path)
            if len(service.hosts) > 1 or host.bmc.profile == "multi-system":
                host.bmc.system = next(sid for sid, h in service.hosts.items() if h.host_id == host.id)
            elif host.bmc.system is None:
                # Named by its path, as an inventory exported from a provisioning system names it
                # (Metal3's `redfish://<bmc>/redfish/v1/Systems/<id>`): the product then reads the
                # System without the Systems collection. A site file's own name is kept.
                host.bmc.system = bmcs.system_path(host.id)
            if not service.sessions:
                host.bmc.auth = "basic" if host.bmc.auth == "session" else host.bmc.auth
            for dpu in host.dpus:
                if dpu.bmc is not None:
                    dpu.bmc.endpoint = bmcs.endpoint(dpu.id)

    def _write_state_files(self) -> None:
        state = self.options.state_dir
        # Private by default: the state directory is 0700 and what the simulator writes 0600.
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
        state.chmod(0o700)
        _write_private(state / "site.yaml", dump_site(self.site))
        kubeconfig = state / "kubeconfig"
        _write_private(
            kubeconfig,
            yaml.safe_dump(
                _kubeconfig(self.kube_url, self.auth.admin_token, self._certificate.cert_pem), sort_keys=False
            ),
        )
        info: dict[str, Any] = {
            "url": self.url,
            "kube_url": self.kube_url,
            "pid": os.getpid(),
            "kubeconfig": str(kubeconfig.resolve()),
            "site": str((state / "site.yaml").resolve()),
            "faults": self.options.faults,
            "seed": self.options.seed,
            "restored": self.restored,
        }
        tmp = state / "sim.json.tmp"
        _write_private(tmp, json.dumps(info, indent=2))
        tmp.replace(state / "sim.json")


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)  # narrow a file an older release left readable
        out.write(text)


def _kubeconfig(url: str, token: str, ca_pem: bytes) -> dict[str, Any]:
    # The admin's token: the API answers 401 to any request without it (or another valid one).
    cluster = {"server": url, "certificate-authority-data": base64.b64encode(ca_pem).decode()}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "metalflow-sim", "cluster": cluster}],
        "users": [{"name": "metalflow-sim", "user": {"token": token}}],
        "contexts": [
            {
                "name": "metalflow-sim",
                "context": {
                    "cluster": "metalflow-sim",
                    "user": "metalflow-sim",
                    "namespace": "dpf-operator-system",
                },
            }
        ],
        "current-context": "metalflow-sim",
    }


def _all_bmcs(site: Site) -> list[tuple[str, BMC]]:
    pairs = []
    for host in site.hosts:
        pairs.append((host.id, host.bmc))
        pairs.extend((dpu.id, dpu.bmc) for dpu in host.dpus if dpu.bmc is not None)
    return pairs


def _resolve_credentials(site: Site, state_dir: Path) -> dict[str, tuple[str, str]]:
    """Each BMC's username and password: read through its reference, or made up and written.

    A BMC with no reference gets a fresh random password in `credentials/<bmc-id>.json` (0600),
    and its reference is filled in, so the site file the product reads never holds a secret.
    """
    folder = state_dir / "credentials"
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o700)
    found: dict[str, tuple[str, str]] = {}
    groups = service_groups(site)
    for bmc_id, bmc in _all_bmcs(site):
        ref = bmc.credentials
        shared = groups.get(bmc_id, bmc_id)
        if shared != bmc_id:
            # One BMC service serves the group: one account, the first host's.
            first = site.host(shared).bmc
            bmc.credentials, found[bmc_id] = first.credentials, found[shared]
            continue
        if ref is None:
            path = folder / f"{bmc_id}.json"
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            pair = ("admin", make_password())
            with os.fdopen(fd, "w") as out:
                json.dump({"username": pair[0], "password": pair[1]}, out)
            bmc.credentials = CredentialRef(file=str(path.resolve()))
            found[bmc_id] = pair
        elif ref.file is not None:
            try:
                data = json.loads(Path(ref.file).read_text())
                found[bmc_id] = (str(data["username"]), str(data["password"]))
            except (OSError, ValueError, KeyError) as err:
                raise ValueError(f"BMC {bmc_id}: cannot read credentials file {ref.file}: {err}") from err
        elif ref.env is not None:
            try:
                found[bmc_id] = (os.environ[ref.env.username], os.environ[ref.env.password])
            except KeyError as err:
                raise ValueError(f"BMC {bmc_id}: environment variable {err.args[0]} is not set") from err
        else:
            # A Secret reference: the simulator cannot read a Secret it does not hold, so it makes
            # the credentials up and serves the Secret itself (created in `SimulatedSite`).
            found[bmc_id] = ("admin", make_password())
    return found


def make_password() -> str:
    """A random password that never starts with `-` (command-line tools read that as an option)."""
    return "p" + secrets.token_urlsafe(18)
