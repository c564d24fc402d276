"""Backends of `actuators.admin.FleetAdmin`: where the actuator's actions land."""
