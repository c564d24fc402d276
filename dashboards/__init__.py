"""infercast dashboards."""
