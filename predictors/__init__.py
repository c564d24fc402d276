"""infercast predictors."""
