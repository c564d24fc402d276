"""Traffic forecasts anchored to the current level: after the flash sale's surge to 12,000 req/s the forecast five
minutes ahead stays near 12,000 (Prophet alone extrapolated 153,655), and a level shift Prophet has not refitted on
is followed at once."""

from __future__ import annotations

import numpy as np
import pytest

from infercast.predictors.base import History

pytest.importorskip("prophet")


def test_after_the_surge_the_forecast_stays_within_the_historys_bound():
    from infercast.predictors.anchored import AnchoredProphet

    t = np.arange(0.0, 780.0, 15.0)
    y = np.where(t < 600, 200.0, np.minimum(12000.0, 200 + (t - 600) * 590))  # the sale's 20 s ramp to 12,000
    h = History(t, y)
    m = AnchoredProphet(bound_factor=1.5).fit([h])
    fc = m.forecast(h, 300.0)
    assert fc.yhat_upper.max() <= 1.5 * 12000 + 1e-6
    assert fc.yhat[-1] == pytest.approx(12000, rel=0.35)


def test_a_level_shift_since_the_last_fit_is_followed():
    from infercast.predictors.anchored import AnchoredProphet

    t = np.arange(0.0, 3 * 86400, 600.0)
    shape = 300 + 100 * np.sin(2 * np.pi * t / 86400)
    m = AnchoredProphet().fit([History(t, shape)])
    later = np.arange(0.0, 3 * 86400 + 6 * 600, 600.0)
    y = 300 + 100 * np.sin(2 * np.pi * later / 86400)
    y[-6:] *= 1.3  # the last hour runs 30% above the shape Prophet learned
    fc = m.forecast(History(later, y), 600.0)
    truth = 1.3 * (300 + 100 * np.sin(2 * np.pi * fc.t[-1] / 86400))
    prophet_alone = 300 + 100 * np.sin(2 * np.pi * fc.t[-1] / 86400)
    assert abs(fc.yhat[-1] - truth) < 0.5 * abs(prophet_alone - truth)
