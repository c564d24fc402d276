"""`infercast.exposition.families`: the one path from catalog samples to what a scrape returns (the exporter, the
router recorder and the predictor service all serve through it)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from infercast import catalog
from infercast.exposition import families


class _Collector:
    def __init__(self, fams) -> None:
        self.fams = fams

    def collect(self):
        return self.fams


def _text(samples) -> str:
    reg = CollectorRegistry()
    reg.register(_Collector(families(samples)))
    return generate_latest(reg).decode()


def test_types_help_counter_names_and_extra_labels_come_out_as_prometheus_parses_them():
    kv = catalog.KV_CACHE_USAGE_RATIO
    labels = {k: "x" for k in catalog.spec(kv).labels}
    req = catalog.ROUTER_REQUESTS_TOTAL
    req_labels = {k: "y" for k in catalog.spec(req).labels}
    text = _text([(kv, labels, 0.5), (kv, labels, 0.6), (req, req_labels, 3), (kv, {**labels, "pod": "p"}, 0.7)])
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    assert parsed[kv].type == "gauge" and parsed[kv].documentation == catalog.spec(kv).help
    # the duplicate series is kept once (the first); extra labels (dcgm's pod) are allowed
    assert [s.value for s in parsed[kv].samples] == [0.5, 0.7]
    counter = parsed[req.removesuffix("_total")]
    assert counter.type == "counter" and counter.samples[0].name == req and counter.samples[0].value == 3


def test_a_sample_without_a_catalog_label_or_with_an_unknown_name_is_refused():
    kv = catalog.KV_CACHE_USAGE_RATIO
    with pytest.raises(ValueError, match="lacks the catalog's label"):
        families([(kv, {"pool": "a"}, 0.5)])
    with pytest.raises(KeyError):
        families([("infercast_no_such_metric", {}, 1.0)])  # an unknown name on purpose
