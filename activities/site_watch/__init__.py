"""The site watch: ONE list+watch of a DPF namespace's DPUs, DPUNodes and DPUNodeMaintenances that
signals each change of a host to the workflows registered for that host.

Where each part lives: `watch` (the activities `watch_site_dpf` and `join_site_dpf_watch`: one
attempt's streams, poll and flushes), `mirror` (the namespace's objects by host, and the
list+watch that keeps them), `waiters` (the registry as an attempt knows it, and the signals to
it), `start` (starting the watch, registering with it). The argument below spans them all.

Registration. A workflow that waits on a host's DPF objects (`workflows.parts.dpf_watch.DPFWatch`)
runs `join_site_dpf_watch`, which first registers the workflow's run for the host with the site
watch workflow (signal `dpf_waiter`; a signal-with-start when no watch runs), then reads the
host's state. The registry is that workflow's state (`workflows.site_watch.workflow`); the watch activity
learns it through a long-poll update on its own workflow (`next_waiters`), in a background task
beside its streams: the whole registry when an attempt starts (before its first flush), then each
new entry as it is added. Any workflow id can register: the routing knows no id forms.

How it routes. A change that matters (the `HostDPFState` of the host differs after the event:
phases, uids, conditions, the reboot-required and hold annotations, objects appearing or going)
marks its host dirty. A flush waits until changes have paused (`FLUSH_QUIET_SECONDS`, at most
`FLUSH_GATHER_SECONDS` after the first: a host's DPUs that move together, written apart, are one
signal), then signals each dirty host's state (`DPF_STATE_CHANGED_SIGNAL`,
`as_of` set, `sequence` 0) to the workflow ids registered for it, by id (the run now current);
a dirty host nobody waits on is dropped, its objects stay cached. A host whose content changes
and changes back between two flushes is still signalled, so a workflow that read the state in
between learns it. A signal that answers NotFound (the workflow has closed) removes the entry
here and in the workflow (signal `dpf_waiter` with `gone`), so the registry does not grow for
ever. A workflow's `DPFWatch.stop` does not deregister: that would cost every run an activity
or an external signal, and the removal on NotFound costs one RPC at the host's next change,
which every operation on the host brings; a newer run of the same id replaces the entry anyway.

Ordering: why no change is lost between a workflow's read and its registration. Every state
carries `as_of` (`DPFVersion`): per kind, the resourceVersion up to which it holds every change
of that kind, and the watch's epoch; the workflow keeps, per kind, the newer of what it has and
what arrives, so an older signal never undoes a newer read and vice versa. The join registers
BEFORE it lists. The activity learns of the registration at some moment L, and at L (no await
between) adds the entry and marks the host dirty, so the next flush sends the host's cached
state to the new waiter (its welcome signal). Take a change C of the host:
- C before the join's list: the read holds it.
- C after the list, applied to the cache before L: the welcome signal (sent after L) holds it.
- C applied after L: it marks the host dirty after the entry exists, and the flush that takes
  that mark routes to the registry of its own moment, which holds the entry.
So every change is in the read, in the welcome signal, or in a later signal. Flushes pair each
dirty set with the registry of the same moment, and a checkpoint records the registry's
sequence number of its flush (`waiters_seq`): a new attempt or run marks dirty the hosts of the
entries newer than its checkpoint, so a welcome lost with a dead worker is sent again.

Resuming and relisting. Each attempt heartbeats a `SiteWatchCheckpoint`: per stream, the
resourceVersion up to which every change has been signalled. A retried attempt (a worker that
died) lists to rebuild its cache, then watches from the checkpoint: events up to the listing
only mark their hosts dirty (their objects are older than the listing), later ones apply. 410
Gone lists again and signals the hosts whose state differs from the cache (every host when the
cache is new). When resourceVersions go backwards (a listing or event older than what the
stream saw: the API server restarted on another store), the epoch rises, every stream lists
again, and every host whose state differs is signalled with the new epoch, which a waiting
workflow takes whole. The workflow's next run (continue-as-new) resumes from the checkpoint the
activity last reported in its poll.

Starting. Whoever creates the watch (a join's signal-with-start, or the worker at start:
`ensure_site_watch`) first reads the API server's resourceVersions and gives them as
`start_from`; the watch's first attempt resumes from them as from a checkpoint. Every workflow
reads its own state after it registered, so the first listing signals only the registered hosts
that changed since, plus each registration's welcome.

Cost per site: 3 watch streams and 3 lists at start (each relist: 3 lists), one poll update in
flight. Per change of a host: 1 signal RPC per workflow registered for it (typically 1-2: the
operation and the monitor), 1 history event in each, no events in the site watch workflow. Per
registration: the join's 1 signal RPC (plus 3 lists and a start when no watch runs), 1 signal
RPC for its welcome, and the site watch workflow's events (`workflows.site_watch.workflow`); per closed
workflow 1 NotFound answer and 1 removal signal, at its host's next change. Per relist after 410
or a restart: one signal per waiter of every host whose state differs. Worker memory: the cache
keeps each object once, slimmed to the fields a state is built from (`mirror.slim`), the
registry (one small entry per waiter), plus one `HostDPFState` per dirty host with a waiter
while a flush runs (measured at 10,000 hosts: bench/README.md, "activities/site_watch"). CPU:
two `HostDPFState` builds of the host per event. One activity slot per site, not per host.
"""

from activities.site_watch.watch import SiteWatchActivities

__all__ = ["SiteWatchActivities"]
