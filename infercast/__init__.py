"""infercast: observability, forecasting and predictive alerting for LLM inference fleets."""

__version__ = "0.1.0"
