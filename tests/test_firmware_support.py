"""The old name of `site_worker_support.py`, kept only for the modules another branch is changing
(the host entity, monitor, removal and host CLI tests) until they import `site_worker_support`
themselves; then this file goes. It holds no tests: nothing else imports it."""

from site_worker_support import (
    DPU,
    DPUDEVICE,
    DPUNODE,
    FAST_POLICY,
    SiteView,
    eventually,
    settings_for,
    site_file_with_prefix,
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
