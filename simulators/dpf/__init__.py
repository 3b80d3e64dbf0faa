"""DPF behaviour of the simulated site (docs/DOMAIN.md section 2): see `controller` and `provisioning`."""

from simulators.dpf.controller import DPFController
from simulators.dpf.model import GROUP_LABEL, HOLD_ANNOTATION, REBOOT_ANNOTATION

__all__ = ["GROUP_LABEL", "HOLD_ANNOTATION", "REBOOT_ANNOTATION", "DPFController"]
