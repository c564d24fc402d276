"""The one place catalog samples become Prometheus metric families (what every `/metrics` of infercast serves).

The exporter (`exporters/server.py`), the router recorder (`exporters/router.py`) and the predictor service
(`predictors/publish.py`) each hold their readings as plain `(name, labels, value)` samples and hand them to
`families()` for a scrape.  Here, and only here:
- the family's type and help come from the catalog (`infercast.catalog.spec`), so an unknown name fails;
- a sample missing one of the catalog's labels for its metric is refused (`ValueError`); extra labels are allowed
  (dcgm-exporter adds `pod`, `namespace`, `container` to GPU series);
- a counter family is named without `_total` and its samples with it, as the text format wants;
- a series given twice is kept once (two targets reporting the same GPU).

Families are `prometheus_client.metrics_core.Metric` filled with `Metric.add_sample`, the custom-collector API that
allows a different label set per sample (the `*MetricFamily` helpers fix one list of label names per family).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from prometheus_client.metrics_core import Metric

from infercast.catalog import Kind, spec

log = logging.getLogger(__name__)


def families(samples: Iterable[tuple[str, Mapping[str, str], float]]) -> list[Metric]:
    """`(name, labels, value)` samples -> metric families, in order of first appearance."""
    by_name: dict[str, Metric] = {}
    required: dict[str, tuple[str, ...]] = {}
    seen: set[tuple] = set()
    dup = 0
    for name, labels, value in samples:
        key = (name, tuple(labels.items()))
        if key in seen:
            dup += 1
            continue
        seen.add(key)
        fam = by_name.get(name)
        if fam is None:
            m = spec(name)
            if m.kind is Kind.COUNTER:
                fam = Metric(name.removesuffix("_total"), m.help, "counter")
            else:
                fam = Metric(name, m.help, m.kind.value)
            by_name[name], required[name] = fam, m.labels
        missing = [k for k in required[name] if k not in labels]
        if missing:
            raise ValueError(f"{name}: sample {dict(labels)} lacks the catalog's label(s) {', '.join(missing)}")
        fam.add_sample(name, dict(labels), float(value))
    if dup:
        log.debug("dropped %d duplicate series", dup)
    return list(by_name.values())


__all__ = ["families"]
