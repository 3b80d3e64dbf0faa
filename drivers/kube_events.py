"""Kubernetes Events (events.k8s.io/v1) written by the worker, and the reads they need.

Three calls, each bounded (`TIMEOUT`) and on a thread of its own (the `kubernetes` client
blocks), so an Event never waits behind an activity's call nor holds one up:

- `create` an Event (`EventsV1Api.create_namespaced_event`, RBAC `create events.events.k8s.io`);
- `patch` an Event's `series` (`patch_namespaced_event`, a JSON merge patch, RBAC `patch`), as
  client-go's events broadcaster does for an isomorphic Event seen again (it sends a strategic
  merge patch of the same content: `series` has no list to merge);
- `uid_of` the object an Event is regarding (a DPUNode or a PodCliqueSet), through `Kube.get`
  (RBAC `get`, already granted for the operations): `kubectl describe` finds an object's Events
  by `involvedObject.uid`, so an Event without it is not shown there.

Errors are not translated for callers to act on: the emitter logs and drops (Events are best
effort). The reads and writes never carry a credential in a body or a URL.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client as k8s

from drivers.grove import kinds as grove_kinds
from drivers.kube import DPUNODE, MERGE_PATCH, Kind, Kube
from drivers.settings import Settings

Object = dict[str, Any]
TIMEOUT = (2.0, 5.0)  # connect, read (seconds): an Event is never worth a long wait


class EventWriter:
    """The worker's Event calls, on one thread of their own."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.kube = Kube(settings, threads=1)
        self._api: k8s.ApiClient | None = None
        self._executor: ThreadPoolExecutor | None = None

    def _client(self) -> k8s.ApiClient:
        if self._api is None:
            self._api = k8s.ApiClient(self.kube.configuration)
        return self._api

    async def _run(self, fn: Any) -> Object:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="metalflow-events")
        loop = asyncio.get_running_loop()
        api = self._client()
        result: Object = await loop.run_in_executor(self._executor, fn, api)
        return result

    async def create(self, namespace: str, body: Object) -> Object:
        """Create the Event `body` (events.k8s.io/v1) in `namespace`."""
        return await self._run(
            lambda api: (
                k8s.EventsV1Api(api)
                .create_namespaced_event(
                    namespace,
                    body,  # type: ignore[arg-type]
                    _request_timeout=TIMEOUT,
                    _preload_content=False,
                )
                .json()
            )
        )

    async def patch(self, namespace: str, name: str, patch: Object) -> Object:
        """Merge-patch the Event `name` (its `series`)."""
        return await self._run(
            lambda api: (
                k8s.EventsV1Api(api)
                .patch_namespaced_event(
                    name,
                    namespace,
                    patch,
                    _content_type=MERGE_PATCH,
                    _request_timeout=TIMEOUT,
                    _preload_content=False,
                )
                .json()
            )
        )

    async def uid_of_node(self, host_id: str, namespace: str, name: str) -> str | None:
        """The uid of the host's DPUNode, None when it does not exist (yet, or any more)."""
        found = await self.kube.get(host_id, DPUNODE, namespace, name, missing_ok=True)
        return None if found is None else found["metadata"].get("uid")

    async def uid_of_podcliqueset(self, namespace: str, name: str) -> str | None:
        """The uid of a PodCliqueSet, None when it does not exist."""
        found = await self.kube.get(f"pcs/{name}", grove_kinds()[0], namespace, name, missing_ok=True)
        return None if found is None else found["metadata"].get("uid")

    def close(self) -> None:
        self.kube.close()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._api is not None:
            self._api.close()  # type: ignore[no-untyped-call]
            self._api = None


__all__ = ["EventWriter", "Kind"]
