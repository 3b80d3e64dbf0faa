"""Grove activities of the coherent rollout: reading and rolling PodCliqueSets (`operations`)
and the per-rollout watcher (`watcher`), over the Grove object view of `drivers.grove`."""

from activities.grove.operations import GroveActivities
from activities.grove.watcher import RolloutWatcherActivities

__all__ = ["GroveActivities", "RolloutWatcherActivities"]
