"""The named scenario variants (`infercast/simulator/twin/variants.py`): each changes one thing of the shipped
scenario."""

from __future__ import annotations

import pytest

from infercast.config import ConfigError
from infercast.simulator.twin.variants import VARIANTS, load_scenario


def test_the_unannounced_sale_is_the_same_sale_with_an_empty_calendar():
    sale, blind = load_scenario("flash-sale"), load_scenario("flash-sale-unannounced")
    assert sale.events and not blind.events
    assert blind.scenario == sale.scenario and blind.pools == sale.pools and blind.protections == sale.protections


def test_the_calm_day_keeps_the_regular_customers_only():
    sale, calm = load_scenario("flash-sale"), load_scenario("calm-day")
    assert not calm.events and not calm.scenario.streams
    assert calm.scenario.phases == sale.scenario.phases  # the regular 200 req/s and its mix
    assert calm.pools == sale.pools


def test_an_unknown_scenario_names_the_shipped_ones_and_the_variants():
    with pytest.raises(ConfigError) as e:
        load_scenario("black-friday")
    assert "flash-sale" in str(e.value) and all(v in str(e.value) for v in VARIANTS)
