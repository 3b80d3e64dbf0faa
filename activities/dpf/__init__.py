"""DPF activities: every operation the bare-metal manager needs (`operations`), over the
Kubernetes driver (`drivers.kube`) and the DPF object bodies (`drivers.dpf`)."""

from activities.dpf.operations import DPFActivities

__all__ = ["DPFActivities"]
