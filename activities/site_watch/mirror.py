"""The site's mirror: the DPF objects of one namespace, by host, kept by one list+watch per kind.

A change matters when the `HostDPFState` of its host differs after the event (phases, uids,
conditions, the reboot-required and hold annotations, objects appearing or going): only then is
the host marked dirty, for the next flush to signal (see `activities.site_watch`, "How it
routes"). Objects are kept slimmed to what a state is built from, so a site of thousands of hosts
fits in a worker (bench/README.md).

A fresh stream lists, then watches from the listing. A resumed one (a retried attempt, a new run)
lists to rebuild the cache, then watches from its checkpoint: events up to the listing only mark
their hosts dirty (their objects are older than the listing), later ones apply. 410 Gone lists
again; since what changed meanwhile is then unknown, a resumed stream marks every host dirty.
resourceVersions that go backwards (the API server restarted on another store) raise
`Restarted`: the attempt raises its epoch and lists every stream again (see
`activities.site_watch`, "Resuming and relisting").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

from contracts import metrics
from contracts.errors import InvalidInput, KubernetesUnavailable
from contracts.models.dpf import DPUNODE_NAME_LABEL, DPFVersion, HostDPFState, SiteWatchCheckpoint
from drivers import dpf as states
from drivers.kube import DPU, DPUNODE, MAINTENANCE, Kind
from drivers.kube_streams import OPENED, WatchExpired, WatchFailed, WatchRejected, list_objects, watch_events

log = logging.getLogger("activities.site_watch")

Object = dict[str, Any]
FAILURE_BACKOFF = (0.1, 0.2, 0.5, 1.0, 2.0, 3.0)  # seconds between failed attempts of one stream


@dataclass
class Stream:
    """One watched kind of the site, and how far the cache holds it."""

    name: str  # "dpus", "node", "hold": the `DPFVersion` field it sets
    kind: Kind
    rv: int = 0  # every change up to this is in the cache
    position: int = 0  # every change up to this has been seen (and marked dirty): the checkpoint
    replay_until: int = 0  # resuming: events up to this (the listing) only mark hosts dirty
    listed: bool = False
    objects: dict[str, Object] = field(default_factory=dict)


def resource_version(obj: Object) -> int:
    """The object's (or a list's) `metadata.resourceVersion`, 0 when it has none."""
    return int((obj.get("metadata") or {}).get("resourceVersion") or 0)


def slim(obj: Object) -> Object:
    """Only what `HostDPFState` is built from (and the routing reads), DPF v26's fields included
    (`drivers.dpf.watched`): a cached object keeps a fraction of what the API returned."""
    return states.watched(obj)


def host_of(stream: str, obj: Object) -> str | None:
    """The host an object belongs to: DPUNode `node-<host>`, hold `node-<host>-hold`, a DPU by its
    `spec.dpuNodeName` (or DPF's label); None for objects that are no host's."""
    if stream == "dpus":
        node = (obj.get("spec") or {}).get("dpuNodeName") or (
            (obj.get("metadata") or {}).get("labels") or {}
        ).get(DPUNODE_NAME_LABEL, "")
    else:
        node = (obj.get("metadata") or {}).get("name", "")
        if stream == "hold":
            if not node.endswith("-hold"):
                return None
            node = node[: -len("-hold")]
    return node[len("node-") :] if node.startswith("node-") and len(node) > len("node-") else None


class SiteCache:
    """The objects of one namespace, indexed by host, and the hosts whose state changed."""

    def __init__(self, checkpoint: SiteWatchCheckpoint | None = None) -> None:
        self.streams = {
            s.name: s for s in (Stream("dpus", DPU), Stream("node", DPUNODE), Stream("hold", MAINTENANCE))
        }
        self.dpus_of: dict[str, set[str]] = {}
        self.dirty: set[str] = set()
        self.epoch = checkpoint.epoch if checkpoint else 0
        self.fresh = True  # no listing yet: the first one signals every host
        if checkpoint is not None:
            for name, rv in checkpoint.resource_versions.items():
                if name in self.streams:
                    self.streams[name].rv = self.streams[name].position = rv

    def state(self, host_id: str) -> HostDPFState:
        node = self.streams["node"].objects.get(f"node-{host_id}")
        hold = self.streams["hold"].objects.get(f"node-{host_id}-hold")
        dpus = self.streams["dpus"].objects
        return states.host_state(
            host_id, node, [dpus[n] for n in sorted(self.dpus_of.get(host_id, ()))], hold
        )

    def version(self) -> DPFVersion:
        s = self.streams
        return DPFVersion(epoch=self.epoch, dpus=s["dpus"].rv, node=s["node"].rv, hold=s["hold"].rv)

    def hosts(self) -> set[str]:
        found = set(self.dpus_of)
        for name in ("node", "hold"):
            found |= {h for o in self.streams[name].objects.values() if (h := host_of(name, o))}
        return found

    def _contents(self, hosts: Iterable[str]) -> dict[str, HostDPFState]:
        """Each host's state as it is now, without its version (`HostDPFState.content`)."""
        return {h: self.state(h).content() for h in hosts}

    def _changed(self, before: dict[str, HostDPFState], hosts: Iterable[str]) -> set[str]:
        """Those of `hosts` whose state differs from `before` (a host new since, too)."""
        return {h for h in hosts if self.state(h).content() != before.get(h)}

    def _put(self, stream: Stream, name: str, obj: Object | None) -> set[str]:
        """Store (or drop) one object; the hosts it touched."""
        old = stream.objects.pop(name, None)
        touched = {h for o in (old, obj) if o is not None and (h := host_of(stream.name, o))}
        if obj is not None:
            stream.objects[name] = obj = slim(obj)
        if stream.name == "dpus":
            for host in touched:
                self.dpus_of.get(host, set()).discard(name)
            owner = host_of("dpus", obj) if obj is not None else None
            if owner is not None:
                self.dpus_of.setdefault(owner, set()).add(name)
        return touched

    def apply(self, stream: Stream, event_type: str, obj: Object) -> None:
        """One watch event; a host whose state changed becomes dirty."""
        name = obj["metadata"]["name"]
        touched = {
            h for o in (stream.objects.get(name), obj) if o is not None and (h := host_of(stream.name, o))
        }
        before = self._contents(touched)
        self._put(stream, name, None if event_type == "DELETED" else obj)
        self.dirty |= self._changed(before, touched)

    def replace(self, stream: Stream, items: list[Object], *, resuming: bool = False) -> None:
        """A listing of one stream: hosts whose state differs become dirty (all, when fresh;
        none when resuming: replaying the events since the checkpoint finds them)."""
        before = self._contents(self.hosts())
        stream.objects = {}
        if stream.name == "dpus":
            self.dpus_of = {}
        for obj in items:
            self._put(stream, obj["metadata"]["name"], obj)
        after = self.hosts()
        if resuming:
            return
        if self.fresh:
            self.dirty |= after
        else:
            self.dirty |= self._changed(before, after | set(before))


class Restarted(Exception):
    """A stream saw resourceVersions go backwards: the API server restarted on another store."""


async def follow_stream(
    http: httpx.AsyncClient,
    configuration: Any,
    namespace: str,
    cache: SiteCache,
    stream: Stream,
    changed: asyncio.Event,
) -> None:
    """List and watch `stream` into `cache` until cancelled, setting `changed` at each step.

    Raises:
        Restarted: resourceVersions went backwards.
        InvalidInput: the API server refused the watch for good (RBAC, a bad namespace).
        KubernetesUnavailable: the API server could not be reached after `FAILURE_BACKOFF`.
    """
    failures = 0
    watch_from = stream.rv
    while True:
        try:
            if not stream.listed:
                listed = await list_objects(http, configuration, stream.kind, namespace)
                rv = resource_version(listed)
                if rv < stream.rv:
                    raise Restarted(f"{stream.name}: listed at {rv}, after {stream.rv}")
                cache.replace(stream, list(listed.get("items") or []), resuming=stream.replay_until == -1)
                if stream.replay_until == -1:  # resuming: replay from the checkpoint
                    stream.replay_until, watch_from = rv, stream.position
                else:
                    stream.replay_until, watch_from, stream.position = 0, rv, rv
                stream.rv, stream.listed = rv, True
                changed.set()
            async for event in watch_events(
                http, configuration, stream.kind, namespace, resource_version=str(watch_from)
            ):
                failures = 0
                kind = event.get("type")
                if kind == OPENED:
                    continue
                obj = event.get("object") or {}
                rv = resource_version(obj)
                if rv and rv < stream.position:
                    raise Restarted(f"{stream.name}: event at {rv}, after {stream.position}")
                if rv <= stream.replay_until:  # older than the listing: only its host counts
                    if kind != "BOOKMARK" and (host := host_of(stream.name, obj)) is not None:
                        cache.dirty.add(host)
                elif kind in ("ADDED", "MODIFIED", "DELETED"):
                    cache.apply(stream, kind, obj)
                    stream.rv = rv
                elif kind == "BOOKMARK":
                    stream.rv = max(stream.rv, rv)
                stream.position = watch_from = max(stream.position, rv)
                changed.set()
            metrics.activity_dpf_watch_reconnect()  # the server ended the stream: resume
        except WatchExpired:
            log.info("site watch of %s expired (410); listing again", stream.kind.plural)
            if stream.replay_until == -1 or stream.replay_until > 0:
                cache.dirty |= cache.hosts()  # what changed since the checkpoint is unknown
            stream.listed, stream.replay_until = False, 0
        except WatchRejected as err:
            raise InvalidInput(f"the API server refused to watch {stream.kind.kind}: {err}") from None
        except WatchFailed as err:
            if failures >= len(FAILURE_BACKOFF):
                raise KubernetesUnavailable(
                    f"cannot keep the site watch of {stream.kind.kind}: {err}"
                ) from None
            await asyncio.sleep(FAILURE_BACKOFF[failures])
            failures += 1
            metrics.activity_dpf_watch_reconnect()
