"""The old name of `site_worker_support.py` (`site_file_with_prefix` is in `sim_support.py` now),
kept only for the modules another branch is changing (the host entity, monitor, removal and host
CLI tests) until they import from those two themselves; then this file goes. It holds no tests:
nothing else imports it."""

from sim_support import site_file_with_prefix
from site_worker_support import (
    DPU,
    DPUDEVICE,
    DPUNODE,
    FAST_POLICY,
    SiteView,
    eventually,
    settings_for,
    site_worker,
)

__all__ = [
    "DPU",
    "DPUDEVICE",
    "DPUNODE",
    "FAST_POLICY",
    "SiteView",
    "eventually",
    "settings_for",
    "site_file_with_prefix",
    "site_worker",
]
