"""A scheduled event never seen before: the KV upper band says "possible breach" from its onset, a horizon ahead,
so the page (and the actuator's pre-warm) comes before the sale rather than during it."""

from __future__ import annotations

import numpy as np

from infercast.predictors.base import History
from infercast.predictors.calendar import EventPrior
from infercast.predictors.naive import LastValue
from infercast.predictors.prophet_model import EventWindow

SALE = EventWindow("event_flash_sale", 600.0, 1500.0)


def _calm(t_end: float, start: float = 0.0) -> History:
    t = np.arange(start, t_end + 1, 15.0)
    return History(t, np.full(len(t), 0.45))


def test_an_unseen_event_raises_the_upper_band_from_its_onset():
    m = EventPrior(LastValue(clip=(0, 1)), [SALE], ceiling=1.0, onset_s=60.0)
    far = m.forecast(_calm(300.0), 300.0)
    assert far.yhat_upper.max() < 0.75  # the onset (660 s) is beyond this forecast's horizon (600 s)
    near = m.forecast(_calm(420.0), 300.0)
    assert near.yhat_upper[near.t >= 660].min() == 1.0
    assert near.yhat_upper[near.t < 660].max() < 0.75
    assert np.allclose(near.yhat, 0.45)  # the path stays the model's


def test_once_watched_for_a_horizon_the_model_speaks_again():
    m = EventPrior(LastValue(clip=(0, 1)), [SALE], ceiling=1.0, onset_s=60.0)
    assert m.forecast(_calm(975.0), 300.0).yhat_upper.max() < 0.75  # the onset (660 s) + a horizon have passed


def test_an_event_already_in_the_history_is_learned_not_feared():
    again = EventWindow("event_flash_sale", 86400 + 600.0, 86400 + 1500.0)
    m = EventPrior(LastValue(clip=(0, 1)), [SALE, again], ceiling=1.0, onset_s=60.0)
    fc = m.forecast(_calm(86400 + 420.0), 300.0)
    assert fc.yhat_upper.max() < 0.75
