"""The Kubernetes side of the DPF activities: client set-up, typed errors, bounded load.

The official `kubernetes` client is blocking, so every call runs on a small thread pool of its
own (never the event loop, never the default executor the SDK and other activities share), and
at most `dpf_max_in_flight_per_host` calls per host are in flight across the worker (one
`asyncio.Semaphore` per host; site-wide objects count under the key `SITE_KEY`).

Errors map onto `contracts.errors`: 404 -> `ObjectNotFound` (only where the object must
exist; callers pass `missing_ok` otherwise), 400/422 -> `InvalidInput` with the API's causes,
401/403 -> `KubernetesAccessDenied` naming the RBAC problem (retrying cannot help), 409 on a write ->
re-read and retry up to `CONFLICT_RETRIES` times, then `ConflictRetriesExhausted`; 429, 5xx,
timeouts and refused connections -> `KubernetesUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from contracts.errors import (
    ConflictRetriesExhausted,
    InvalidInput,
    KubernetesAccessDenied,
    KubernetesUnavailable,
    ObjectNotFound,
)
from contracts.models.dpf import DPF_VERSION, PROVISIONING_GROUP, SVC_GROUP
from drivers.settings import Settings

if TYPE_CHECKING:
    from kubernetes import client as k8s

# The `kubernetes` client (~0.3 s of CPU to import) is imported by the first call that needs it,
# not with this module: every `metalflow` command that can reach the cluster imports this module,
# most of them (and `metalflow --help`) never call it.

log = logging.getLogger(__name__)

Object = dict[str, Any]

CONFLICT_RETRIES = 5
REQUEST_TIMEOUT = (5.0, 30.0)  # connect, read (seconds)
SITE_KEY = "<site>"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str
    plural: str
    version: str = DPF_VERSION


DPU = Kind("DPU", PROVISIONING_GROUP, "dpus")
DPUNODE = Kind("DPUNode", PROVISIONING_GROUP, "dpunodes")
DPUDEVICE = Kind("DPUDevice", PROVISIONING_GROUP, "dpudevices")
MAINTENANCE = Kind("DPUNodeMaintenance", PROVISIONING_GROUP, "dpunodemaintenances")
BFB = Kind("BFB", PROVISIONING_GROUP, "bfbs")
FLAVOR = Kind("DPUFlavor", PROVISIONING_GROUP, "dpuflavors")
DEPLOYMENT = Kind("DPUDeployment", SVC_GROUP, "dpudeployments")
SERVICE_TEMPLATE = Kind("DPUServiceTemplate", SVC_GROUP, "dpuservicetemplates")
SERVICE_CONFIGURATION = Kind("DPUServiceConfiguration", SVC_GROUP, "dpuserviceconfigurations")
KINDS = {k.kind: k for k in (DPU, DPUNODE, DPUDEVICE, MAINTENANCE, BFB, FLAVOR, DEPLOYMENT,
                             SERVICE_TEMPLATE, SERVICE_CONFIGURATION)}  # fmt: skip


def load_configuration(settings: Settings) -> k8s.Configuration:
    """A client configuration from the settings' kubeconfig, or the in-cluster one.

    Raises:
        InvalidInput: No usable configuration (the message says what was tried).
    """
    import yaml
    from kubernetes import client as k8s
    from kubernetes import config as k8s_config
    from kubernetes.config.config_exception import ConfigException

    configuration = k8s.Configuration()
    try:
        if settings.kubeconfig is not None:
            k8s_config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=str(settings.kubeconfig), client_configuration=configuration
            )
        else:
            try:
                k8s_config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            except ConfigException:
                k8s_config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    except (ConfigException, OSError) as err:
        where = settings.kubeconfig or "in-cluster config or ~/.kube/config"
        raise InvalidInput(f"no usable Kubernetes configuration ({where}): {err}") from None
    except yaml.YAMLError as err:  # not YAML at all: where it broke, on one line
        where = settings.kubeconfig or "~/.kube/config"
        said = " ".join(str(err).split())[:300]
        raise InvalidInput(f"the Kubernetes configuration {where} is not valid YAML: {said}") from None
    except (TypeError, AttributeError, KeyError, ValueError) as err:  # YAML, but not a kubeconfig's shape
        where = settings.kubeconfig or "~/.kube/config"
        raise InvalidInput(
            f"the Kubernetes configuration {where} is not a kubeconfig (a mapping with clusters, users "
            f"and contexts): {type(err).__name__}: {err}"[:400]
        ) from None
    return configuration


def _causes(body: str | None) -> str:
    try:
        status = json.loads(body or "")
    except ValueError:
        return (body or "").strip()[:500]
    message = str(status.get("message", ""))
    causes = [
        f"{c.get('field', '')}: {c.get('message', '')}"
        for c in (status.get("details") or {}).get("causes") or []
    ]
    return message if not causes or all(c in message for c in causes) else f"{message} ({'; '.join(causes)})"


def translate(err: Exception, what: str) -> Exception:
    """The metalflow error for a failed API call on `what` (e.g. "DPUNode node-h1")."""
    import urllib3
    from kubernetes.client.exceptions import ApiException

    if isinstance(err, ApiException):
        status = err.status or 0
        if status == 404:
            return ObjectNotFound(f"{what} not found")
        if status in (400, 422):
            return InvalidInput(f"the API server rejected {what}: {_causes(err.body)}")
        if status in (401, 403):
            return KubernetesAccessDenied(
                f"the API server refused access to {what} ({status} {err.reason}): "
                "check the worker's credentials and RBAC"
            )
        if status == 409:
            return ConflictRetriesExhausted(f"{what}: conflict: {_causes(err.body)}")
        return KubernetesUnavailable(f"the API server failed on {what}: {status} {err.reason}")
    if isinstance(err, urllib3.exceptions.HTTPError | OSError | TimeoutError):
        return KubernetesUnavailable(
            f"the API server cannot be reached for {what}: {type(err).__name__}: {err}"
        )
    return err


class Kube:
    """Custom-object calls on the DPF kinds, off the event loop and per-host bounded."""

    def __init__(
        self,
        settings: Settings,
        *,
        threads: int = 8,
        request_timeout: tuple[float, float] = REQUEST_TIMEOUT,
        retries: int | None = None,
    ) -> None:
        """`request_timeout`: (connect, read) seconds of one request; `retries`: urllib3's retries
        of a request (None: the client's default). A command that must answer within seconds
        (`host versions`) gives short ones: a frozen API server accepts the connection and never
        answers, and each retry waits the read timeout again."""
        self.settings = settings
        self.request_timeout = request_timeout
        self._retries = retries
        self._threads = threads
        self._executor: ThreadPoolExecutor | None = None
        self._api: k8s.CustomObjectsApi | None = None
        self._configuration: k8s.Configuration | None = None
        self._limits: dict[str, asyncio.Semaphore] = {}
        self.in_flight: dict[str, int] = {}
        self.peak_in_flight: dict[str, int] = {}  # per key, since start: what the limit allowed
        # Called with each object read before a conditional write: tests make a real concurrent
        # edit here to prove the conflict path; tracing could hook in the same way.
        self.after_read: Callable[[Kind, Object], None] | None = None

    @property
    def configuration(self) -> k8s.Configuration:
        if self._configuration is None:
            self._configuration = load_configuration(self.settings)
        return self._configuration

    def _client(self) -> k8s.CustomObjectsApi:
        if self._api is None:
            configuration = self.configuration
            configuration.connection_pool_maxsize = self._threads
            if self._retries is not None:
                configuration.retries = self._retries
            from kubernetes import client as k8s

            self._api = k8s.CustomObjectsApi(k8s.ApiClient(configuration))
        return self._api

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._api is not None:
            self._api.api_client.close()
            self._api = None

    @contextlib.asynccontextmanager
    async def limit(self, key: str) -> AsyncIterator[None]:
        """Hold one of the `dpf_max_in_flight_per_host` slots of `key` (a host id)."""
        semaphore = self._limits.get(key)
        if semaphore is None:
            semaphore = self._limits[key] = asyncio.Semaphore(self.settings.dpf_max_in_flight_per_host)
        async with semaphore:
            self.in_flight[key] = now = self.in_flight.get(key, 0) + 1
            self.peak_in_flight[key] = max(self.peak_in_flight.get(key, 0), now)
            try:
                yield
            finally:
                self.in_flight[key] -= 1

    async def _call(self, key: str, what: str, fn: Callable[[k8s.CustomObjectsApi], Any]) -> Any:
        api = self._client()
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self._threads, thread_name_prefix="metalflow-kube")
        loop = asyncio.get_running_loop()
        async with self.limit(key):
            try:
                # In the caller's context (a trace's current span, when tracing is on), which the
                # executor's thread would not have by itself.
                return await loop.run_in_executor(self._executor, contextvars.copy_context().run, fn, api)
            except Exception as err:
                raise translate(err, what) from None

    # -- single calls ---------------------------------------------------------------------------
    async def get(
        self, key: str, kind: Kind, ns: str, name: str, *, missing_ok: bool = False
    ) -> Object | None:
        try:
            obj: Object = await self._call(
                key,
                f"{kind.kind} {ns}/{name}",
                lambda api: api.get_namespaced_custom_object(
                    kind.group, kind.version, ns, kind.plural, name, _request_timeout=self.request_timeout
                ),
            )
        except ObjectNotFound:
            if missing_ok:
                return None
            raise
        return obj

    async def list(self, key: str, kind: Kind, ns: str, *, label_selector: str = "",
                   field_selector: str = "") -> Object:  # fmt: skip
        """The list response (`items` and `metadata.resourceVersion`)."""
        listed: Object = await self._call(
            key,
            f"{kind.kind} list in {ns}",
            lambda api: api.list_namespaced_custom_object(
                kind.group,
                kind.version,
                ns,
                kind.plural,
                label_selector=label_selector,
                field_selector=field_selector,
                _request_timeout=self.request_timeout,
            ),  # fmt: skip
        )
        return listed

    async def create(self, key: str, kind: Kind, ns: str, body: Object) -> Object | None:
        """Create `body`; None when an object of that name already exists."""
        name = body["metadata"]["name"]
        try:
            created: Object = await self._call(
                key,
                f"{kind.kind} {ns}/{name}",
                lambda api: api.create_namespaced_custom_object(
                    kind.group, kind.version, ns, kind.plural, body, _request_timeout=self.request_timeout
                ),
            )
        except ConflictRetriesExhausted:  # 409 on create: AlreadyExists
            return None
        return created

    async def patch(
        self, key: str, kind: Kind, ns: str, name: str, patch: Object, *, field_manager: str | None = None
    ) -> Object:
        """A JSON merge patch (a `metadata.resourceVersion` in it makes it conditional), recorded
        in managedFields as `field_manager`'s when given (else the client's User-Agent)."""
        return await self._patch(key, kind, ns, name, patch, MERGE_PATCH, field_manager)

    async def json_patch(self, key: str, kind: Kind, ns: str, name: str, ops: Sequence[Object]) -> Object:
        """An RFC 6902 JSON patch, applied by the API server to the object as it is then: a
        `test` operation makes it conditional in the same request (one that fails is 422,
        `InvalidInput`, and nothing is written: k8s.io/apiserver `handlers/patch.go` applies
        it with evanphx/json-patch, which implements `test`)."""
        return await self._patch(key, kind, ns, name, [*ops], JSON_PATCH, None)

    async def _patch(
        self, key: str, kind: Kind, ns: str, name: str, body: Any, content_type: str, manager: str | None
    ) -> Object:
        """One PATCH of a custom object, `body` sent as `content_type` (`patch`, `json_patch`)."""
        patched: Object = await self._call(
            key,
            f"{kind.kind} {ns}/{name}",
            lambda api: api.patch_namespaced_custom_object(
                kind.group,
                kind.version,
                ns,
                kind.plural,
                name,
                body,
                _content_type=content_type,
                field_manager=manager,
                _request_timeout=self.request_timeout,
            ),  # fmt: skip
        )
        return patched

    async def delete(
        self, key: str, kind: Kind, ns: str, name: str, *, uid: str | None = None
    ) -> Object | None:
        """Delete (with a uid precondition when given); None when it was already gone."""
        from kubernetes import client as k8s

        options = k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=uid) if uid else None)
        try:
            result: Object = await self._call(
                key,
                f"{kind.kind} {ns}/{name}",
                lambda api: api.delete_namespaced_custom_object(
                    kind.group,
                    kind.version,
                    ns,
                    kind.plural,
                    name,
                    body=options,
                    _request_timeout=self.request_timeout,
                ),  # fmt: skip
            )
        except ObjectNotFound:
            return None
        return result

    # -- conflict-safe edit ---------------------------------------------------------------------
    async def edit(
        self, key: str, kind: Kind, ns: str, name: str, change: Callable[[Object], Object | None],
        *, missing_ok: bool = False, field_manager: str | None = None,
    ) -> tuple[Object | None, bool]:  # fmt: skip
        """Read, ask `change` for a merge patch (None: nothing to do), write it conditionally.

        A 409 (someone wrote in between) re-reads and asks again, up to `CONFLICT_RETRIES` times.

        Returns:
            The object as written (or as read when nothing changed; None when missing and
            `missing_ok`), and whether a write happened.
        """
        for _ in range(CONFLICT_RETRIES + 1):
            obj = await self.get(key, kind, ns, name, missing_ok=missing_ok)
            if obj is None:
                return None, False
            if self.after_read is not None:
                self.after_read(kind, obj)
            patch = change(obj)
            if patch is None:
                return obj, False
            meta = dict(patch.get("metadata") or {})
            meta["resourceVersion"] = obj["metadata"]["resourceVersion"]
            try:
                patched = await self.patch(
                    key, kind, ns, name, {**patch, "metadata": meta}, field_manager=field_manager
                )
                return patched, True
            except ConflictRetriesExhausted:
                log.info("%s %s/%s changed while we edited it; reading it again", kind.kind, ns, name)
            except ObjectNotFound:
                if missing_ok:
                    return None, False
                raise
        raise ConflictRetriesExhausted(
            f"{kind.kind} {ns}/{name} kept changing under us: {CONFLICT_RETRIES + 1} writes met a conflict"
        )
