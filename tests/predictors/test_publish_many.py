"""The batched tick's samples, built with the templates written out (issue 41 item 4), are the samples the one-series
functions build: the same names, labels in the same order, the same values, for any groups and values."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.predictors.base import Forecast
from infercast.predictors.publish import breach_eta_sample, forecast_samples, kv_forecast_samples_many

names = st.text(alphabet="abcxyz-.09", min_size=1, max_size=8)
values = st.floats(allow_nan=False, allow_infinity=False, min_value=-1e6, max_value=1e6)


@settings(max_examples=100, deadline=None)
@given(
    groups=st.lists(st.tuples(names, st.text(alphabet="v0123.", max_size=4)), max_size=6),
    data=st.data(),
    aggregate=st.sampled_from(["mean", "max"]),
    trigger=st.sampled_from([0.75, 0.9]),
)
def test_the_batched_samples_are_the_one_series_samples(groups, data, aggregate, trigger):
    n = len(groups)
    at_h = np.array(data.draw(st.lists(st.tuples(values, values, values), min_size=n, max_size=n))).reshape(n, 3)
    eta = np.array(data.draw(st.lists(st.one_of(values, st.just(np.inf)), min_size=n, max_size=n)), dtype=float)
    got = kv_forecast_samples_many(groups, "lstm_aci", at_h, 300.0, aggregate, trigger, eta)
    want = []
    for (pool, version), (y, lo, hi), e in zip(groups, at_h.tolist(), eta.tolist(), strict=True):
        fc = Forecast(np.array([1.0]), np.array([y]), np.array([lo]), np.array([hi]), model="lstm_aci")
        want += [*forecast_samples("kv", pool, version, fc, 300.0, aggregate)]
        want.append(breach_eta_sample(pool, version, trigger, e, aggregate))
    assert got == want
    assert all(type(s.value) is float for s in got)
