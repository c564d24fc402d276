"""The degenerate references `always_alarm` and `never_alarm`: what they forecast, and that the breach scores rank
both below a fitted model on the seed's flash sale."""

from __future__ import annotations

import json

import numpy as np

from infercast.cli import main
from predictors.base import History, future_grid
from predictors.reference import AlwaysAlarm, NeverAlarm, references
from predictors.registry import CLIP


def test_references_hold_the_last_value_and_put_the_upper_band_at_the_extremes():
    t = np.arange(0, 1800, 15.0)
    y = np.linspace(0.2, 0.6, len(t))
    y[-1] = np.nan  # the newest scrape failed: the last finite value is held
    h = History(t, y)
    always, never = references(0.75, CLIP["kv"])
    assert (always.name, never.name) == ("always_alarm", "never_alarm")
    for m in (always, never):
        f = m.fit([h]).forecast(h, 300.0)
        assert np.array_equal(f.t, future_grid(h, 300.0))
        assert np.all(f.yhat == y[-2])
        assert np.all(f.yhat_lower <= f.yhat) and np.all(f.yhat <= f.yhat_upper)
    # KV usage tops out at 1.0: always_alarm's band reaches it, so every threshold in range is crossed.
    assert np.all(always.forecast(h, 300.0).yhat_upper == 1.0)
    assert np.all(never.forecast(h, 300.0).yhat_upper == y[-2])
    # A series with no top (traffic) puts the ceiling at the threshold.
    assert AlwaysAlarm(references(5000.0, CLIP["rps"])[0].ceiling).ceiling == 5000.0
    assert NeverAlarm(0.0).forecast(h, 300.0).yhat_lower.min() == 0.0


def test_on_the_flash_sale_the_lstm_pages_better_than_always_or_never(capsys):
    """`infercast backtest --trace scenario:flash-sale` (the seed's 30-minute sale on the twin, ~40 s): the shipped
    LSTM's breach F1 over origins is above both references'.  A pager that always pages has a high recall and an
    F1 set by how often a crossing follows; one that never pages has F1 0."""
    rc = main(["backtest", "--trace", "scenario:flash-sale", "--models", "lstm", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    models = json.loads(out)["models"]
    assert set(models) == {"lstm", "always_alarm", "never_alarm"}, json.loads(out)["notes"]
    lstm, always, never = (models[k]["breach"] for k in ("lstm", "always_alarm", "never_alarm"))
    assert lstm["origins_scored"] == always["origins_scored"] == never["origins_scored"] > 30
    assert always["origin_recall"] == 1.0 and never["origin_recall"] == 0.0
    assert lstm["origin_f1"] > always["origin_f1"] > never["origin_f1"] == 0.0
    # Where the LSTM beats always-paging is precision: fewer of its pages are followed by nothing.
    assert lstm["origin_precision"] > always["origin_precision"]
