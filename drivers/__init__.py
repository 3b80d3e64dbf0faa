"""The I/O drivers, with no Temporal in them: Redfish BMCs (`redfish`), Kubernetes (`kube`,
`kube_streams`) with the DPF and Grove object views (`dpf`, `grove`), the site file
(`site_file`), the inventory (`inventory`), BMC credentials (`credentials`) and the worker's
settings (`settings`, `statedir`). Activities adapt them to Temporal; the CLI uses them for
direct BMC and inventory checks."""
