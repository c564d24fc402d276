"""infercast's Prometheus rules and Alertmanager configuration, generated from one place.

`settings.py` holds every number (read from `infercast.config` defaults where they live there), `rules.py` and
`alertmanager.py` turn them into configuration (pure), and `python -m infercast.alertrules.generate` writes the
committed YAML.  A test checks that the committed files equal what the generator writes.
"""
