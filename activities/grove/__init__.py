"""Grove activities of the coherent rollout: reading and rolling PodCliqueSets (`operations`),
the raw-object view (`objects`), and the per-rollout watcher (`watcher`)."""

from activities.grove.operations import GroveActivities
from activities.grove.watcher import RolloutWatcherActivities

__all__ = ["GroveActivities", "RolloutWatcherActivities"]
