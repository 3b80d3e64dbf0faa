"""Redfish: one client per worker (`client`, `answers`), the ComputerSystem and its power
(`system`, `power`), the power cycle that never happens twice (`powercycle`), DPU firmware
(`firmware`)."""
