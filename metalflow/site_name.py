"""The name of the site in use, for the host entities the CLI starts (`HostWorkflowInput.site`).

An entity started by `metalflow host ...` used to be given no site, so `host status` said
`(site default)` and `host list`'s SITE column `default` where the site file names its site (its
`name:`), which the worker's inventory puts on every operation (drivers/inventory.py
`site=site.name`) and the site check on its findings. Read from the site file in use (the one
operations use: METALFLOW_SITE_FILE, else the state dir's site.yaml); in cluster inventory mode
(`METALFLOW_INVENTORY=cluster`, a site per host on the DPF objects) or without a readable site
file, the entity's default, as before: the worker validates the file and says what is wrong.
"""

from __future__ import annotations

import os

from contracts.models.host import HostWorkflowInput
from drivers.site_file import SiteFileError, load_site
from metalflow.site_check import site_in_use

DEFAULT_SITE: str = HostWorkflowInput.model_fields["site"].default


def site_name() -> str:
    """The site file's `name`, or the entity's default where it cannot be told (the module)."""
    if os.environ.get("METALFLOW_INVENTORY", "site") != "site":
        return DEFAULT_SITE
    try:
        return load_site(site_in_use()).name
    except (SiteFileError, OSError):
        return DEFAULT_SITE


def entity_input(host_id: str) -> HostWorkflowInput:
    """A host's entity input as the CLI starts it: its site named (`site_name`)."""
    return HostWorkflowInput(host_id=host_id, site=site_name())
