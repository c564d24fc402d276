"""The fleet file: what a user sees when it is wrong."""

from __future__ import annotations

import textwrap

import pytest

from infercast.config import ConfigError, load_config, parse_config, resolve_scenario


def test_example_fleet_loads_and_derives_kv_bytes_per_token(repo_root):
    cfg = load_config(repo_root / "examples" / "flash-sale.yaml")
    # 40 layers x 40 KV heads x 128 dims x 2 (K and V) x 2 bytes: the seed's 13B-class model.
    assert cfg.versions["v4"].model.kv_bytes_per_token == 819_200
    assert cfg.pools["v4-main"].failover == ("v3.5-fallback",)
    assert cfg.thresholds.kv_forecast_trigger == 0.75


def _minimal(**over):
    data = {
        "versions": {
            "v4": {
                "model": {"name": "m", "layers": 2, "kv_heads": 2, "head_dim": 64, "weights_gb": 1},
                "kv_manager": "paged",
                "batcher": {"kind": "dynamic", "max_batch": 8},
            }
        },
        "pools": {"p": {"version": "v4", "nodes": 1}},
    }
    data.update(over)
    return data


def test_unknown_key_is_named():
    with pytest.raises(ConfigError) as e:
        parse_config(_minimal(thresholds={"memory_braker": 0.8}), "fleet.yaml")
    assert "thresholds.memory_braker: unknown key" in str(e.value)


def test_out_of_range_ratio_is_named():
    with pytest.raises(ConfigError) as e:
        parse_config(_minimal(thresholds={"memory_breaker": 1.8}))
    assert "thresholds.memory_breaker" in str(e.value)
    assert "less than or equal to 1" in str(e.value)


def test_dangling_references_are_all_reported():
    data = _minimal(pools={"p": {"version": "v9", "nodes": 1, "failover": ["nowhere"]}})
    with pytest.raises(ConfigError) as e:
        parse_config(data)
    msg = str(e.value)
    assert "pools.p.version: unknown version 'v9'" in msg
    assert "pools.p.failover: unknown pool 'nowhere'" in msg


def test_weights_that_fill_the_node_are_refused():
    data = _minimal()
    data["versions"]["v4"]["model"]["weights_gb"] = 500
    with pytest.raises(ConfigError, match="leave no room for a KV cache"):
        parse_config(data)


def test_bad_yaml_and_missing_file(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("versions: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "missing.yaml")
    top = tmp_path / "list.yaml"
    top.write_text(textwrap.dedent("- a\n- b\n"))
    with pytest.raises(ConfigError, match="expected a mapping"):
        load_config(top)


def test_target_needs_url_unless_twin():
    with pytest.raises(ConfigError, match="needs a url"):
        parse_config(_minimal(targets=[{"name": "a", "kind": "vllm"}]))
    cfg = parse_config(_minimal(targets=[{"name": "a", "kind": "twin"}]))
    assert cfg.targets[0].kind == "twin"


def test_unknown_scenario_lists_known_ones():
    with pytest.raises(ConfigError, match="flash-sale"):
        resolve_scenario("no-such-scenario")


def test_one_listen_parser():
    from infercast.config import parse_listen

    assert parse_listen("127.0.0.1:9400") == ("127.0.0.1", 9400)
    assert parse_listen("[::1]:9400") == ("::1", 9400)
    assert parse_listen(":9401", default_host="127.0.0.1") == ("127.0.0.1", 9401)
    for bad in ("9400", "host:", "host:http", "host:70000", ":9400"):
        with pytest.raises(ValueError, match="expected host:port"):
            parse_listen(bad)
