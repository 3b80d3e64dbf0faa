"""Grove behaviour for the simulated site (DOMAIN.md section 3); see `controller.py`."""

from simulators.grove.controller import GroveController
from simulators.grove.model import pcs_for_workload

__all__ = ["GroveController", "pcs_for_workload"]
