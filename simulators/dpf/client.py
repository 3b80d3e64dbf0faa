"""The DPF controller's view of the store: its resource types and conflict-safe writes.

The controller is a client of the store like any other: every write carries the
resourceVersion it read, and a 409 Conflict (a client edited the object in between) is met by
reading again and re-applying the change.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from simulators.dpf.model import PROVISIONING, SVC, VERSION, Object
from simulators.kube.store import AlreadyExists, Conflict, NotFound, ResourceType, Store

log = logging.getLogger(__name__)

# A mutation returns False when the object already is as wanted (nothing to write).
Mutation = Callable[[Object], bool]
_ATTEMPTS = 8


class Client:
    """Typed access to the DPF kinds in one namespace."""

    def __init__(self, store: Store, namespace: str) -> None:
        self.store = store
        self.namespace = namespace
        self.dpu = store.resource_type(PROVISIONING, VERSION, "dpus")
        self.dpuset = store.resource_type(PROVISIONING, VERSION, "dpusets")
        self.dpudevice = store.resource_type(PROVISIONING, VERSION, "dpudevices")
        self.dpunode = store.resource_type(PROVISIONING, VERSION, "dpunodes")
        self.maintenance = store.resource_type(PROVISIONING, VERSION, "dpunodemaintenances")
        self.bfb = store.resource_type(PROVISIONING, VERSION, "bfbs")
        self.flavor = store.resource_type(PROVISIONING, VERSION, "dpuflavors")
        self.deployment = store.resource_type(SVC, VERSION, "dpudeployments")
        self.service_template = store.resource_type(SVC, VERSION, "dpuservicetemplates")
        self.service_configuration = store.resource_type(SVC, VERSION, "dpuserviceconfigurations")

    def get(self, rt: ResourceType, name: str) -> Object | None:
        try:
            return self.store.get(rt, self.namespace, name)
        except NotFound:
            return None

    def list(self, rt: ResourceType, label_selector: str | None = None) -> list[Object]:
        return self.store.list(rt, self.namespace, label_selector=label_selector)[0]

    def create(self, rt: ResourceType, body: Object) -> Object | None:
        """Create; None when an object of that name exists already."""
        body.setdefault("apiVersion", rt.api_version)
        body.setdefault("kind", rt.kind)
        body.setdefault("metadata", {})["namespace"] = self.namespace
        try:
            return self.store.create(rt, self.namespace, body)
        except AlreadyExists:
            return None

    def delete(self, rt: ResourceType, name: str) -> None:
        try:
            self.store.delete(rt, self.namespace, name)
        except NotFound:
            pass

    def mutate(self, rt: ResourceType, name: str, change: Mutation, *, status: bool = False) -> Object | None:
        """Read, change, write (status subresource when `status`), again on Conflict.

        Returns the object written, the object unchanged when `change` said there was nothing
        to do, or None when it does not exist (any more).
        """
        for _ in range(_ATTEMPTS):
            obj = self.get(rt, name)
            if obj is None:
                return None
            if not change(obj):
                return obj
            try:
                return self.store.update(
                    rt, self.namespace, name, obj, subresource="status" if status else None
                )
            except Conflict:
                continue
            except NotFound:
                return None
        log.warning("gave up writing %s %s after %d conflicts", rt.kind, name, _ATTEMPTS)
        return None

    def remove_finalizer(self, rt: ResourceType, name: str, finalizer: str) -> None:
        def change(obj: Object) -> bool:
            finalizers = obj["metadata"].get("finalizers") or []
            if finalizer not in finalizers:
                return False
            obj["metadata"]["finalizers"] = [f for f in finalizers if f != finalizer]
            return True

        self.mutate(rt, name, change)

    def add_finalizer(self, rt: ResourceType, name: str, finalizer: str) -> None:
        def change(obj: Object) -> bool:
            finalizers = obj["metadata"].get("finalizers") or []
            if finalizer in finalizers or obj["metadata"].get("deletionTimestamp"):
                return False
            obj["metadata"]["finalizers"] = [*finalizers, finalizer]
            return True

        self.mutate(rt, name, change)
