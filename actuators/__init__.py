"""infercast actuators."""
