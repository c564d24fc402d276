"""infercast exporters."""
