"""Redfish: one client per worker (`client`), its connection to one BMC and the BMC's session
(`connection`), TLS per BMC (`tls`), what a BMC's answers mean (`answers`), task monitors
(`tasks`), the ComputerSystem and its power (`system`, `power`), the power cycle that never
happens twice (`powercycle`), a DPU's own reset (`dpu_reset`), DPU firmware (`firmware`)."""
