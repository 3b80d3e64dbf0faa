"""DPF activities: the Kubernetes client set-up and limits (`kube`), the object bodies and state
reading (`objects`), the operations (`operations`), and async watch streams (`streams`)."""

from activities.dpf.kube import Kube
from activities.dpf.operations import DPFActivities

__all__ = ["DPFActivities", "Kube"]
