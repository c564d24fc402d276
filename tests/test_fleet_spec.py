"""A fleet file for a real fleet names served models only (issue 23, item 1): the twin's model shape, the KV
manager and the batcher are optional; a known model fills its shape in; the twin refuses a model it cannot size,
naming where the shape goes; a key in the wrong section is told where it belongs."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from infercast.config import ConfigError, load_config, parse_config
from infercast.exporters.base import Sample
from infercast.exporters.derive import derive
from infercast.models import KNOWN_MODELS, known_model_names
from infercast.tools.check import check_config
from infercast.tools.cli import main

REPO = Path(__file__).resolve().parent.parent
FLASH_SALE = REPO / "examples" / "flash-sale.yaml"


def real_fleet(*models: str) -> dict:
    """A fleet file as a vLLM user writes it: pools, versions by served model name, nothing of the twin's."""
    versions = {f"v{i}": {"model": {"name": m}} for i, m in enumerate(models)}
    pools = {f"p{i}": {"version": f"v{i}", "nodes": 2} for i in range(len(models))}
    return {"versions": versions, "pools": pools}


def flash_sale_without_shapes() -> dict:
    """The shipped flash sale, its versions reduced to served names no table knows."""
    data = yaml.safe_load(FLASH_SALE.read_text())
    data["versions"] = {v: {"model": {"name": spec["model"]["name"]}} for v, spec in data["versions"].items()}
    return data


def test_a_real_fleet_version_is_just_its_served_model_name():
    cfg = parse_config(real_fleet("chat-v4"))
    v = cfg.versions["v0"]
    assert v.model.name == "chat-v4"
    assert v.model.missing_shape == ("layers", "kv_heads", "head_dim", "weights_gb")
    assert v.kv_manager == "paged"
    assert (v.batcher.kind, v.batcher.max_batch) == ("dynamic", 256)  # vLLM's default max_num_seqs


@pytest.mark.parametrize("name", ["meta-llama/Llama-3.1-8B-Instruct", "Llama-3.1-8B-Instruct", "llama-3.1-8b-instruct"])
def test_a_known_model_gets_its_published_shape(name):
    m = parse_config(real_fleet(name)).versions["v0"].model
    assert (m.layers, m.kv_heads, m.head_dim, m.dtype) == (32, 8, 128, "bfloat16")
    assert m.weights_gb == pytest.approx(8.03e9 * 2 / 1024**3, abs=0.05)
    assert m.kv_bytes_per_token == 2 * 32 * 8 * 128 * 2  # 128 KiB a token, as vLLM sizes Llama-3.1-8B's cache
    assert m.name == name  # the served name is kept as written


def test_what_the_fleet_file_gives_wins_over_the_table():
    data = real_fleet("Qwen/Qwen2.5-7B-Instruct")
    data["versions"]["v0"]["model"] |= {"weights_gb": 8.0, "dtype": "fp8"}
    m = parse_config(data).versions["v0"].model
    assert (m.weights_gb, m.dtype, m.layers, m.kv_heads) == (8.0, "fp8", 28, 4)


def test_every_known_model_fits_the_shape_schema():
    h100s = {"version": "v0", "nodes": 1, "gpus_per_node": 8, "gpu": {"memory_gb": 80}}
    for name in known_model_names():
        m = parse_config(real_fleet(name) | {"pools": {"p0": h100s}}).versions["v0"].model
        assert not m.missing_shape, name
        assert m.kv_bytes_per_token > 0 and m.weights_gb == KNOWN_MODELS[name]["weights_gb"]


def test_the_weights_check_still_refuses_weights_that_fill_the_cards():
    data = real_fleet("big")
    data["versions"]["v0"]["model"]["weights_gb"] = 200
    with pytest.raises(ConfigError, match=r"pools\.p0: weights of v0 \(200\.0 GiB\) leave no room for a KV cache"):
        parse_config(data)


def test_the_twin_refuses_a_model_it_cannot_size_and_says_where_the_shape_goes():
    from infercast.simulator.twin.fleet import build_fleet

    cfg = parse_config(flash_sale_without_shapes())  # loads: the real-fleet services need no shape
    with pytest.raises(ConfigError) as err:
        build_fleet(cfg)
    msg = str(err.value)
    assert msg.startswith("versions.v4.model: the twin needs the model's shape: layers, kv_heads, head_dim, weights_gb")
    assert "'chat-v4' is not a known model" in msg
    assert all(name in msg for name in known_model_names())


def test_infercast_twin_run_exits_2_with_the_refusal(tmp_path, capsys):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(flash_sale_without_shapes()))
    assert main(["twin", "run", "--scenario", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert re.search(r"^infercast: versions\.(v4|v3\.5)\.model: the twin needs the model's shape: layers", err), err
    assert not (tmp_path / "out").exists()


def test_the_twin_runs_a_known_model_named_alone():
    from infercast.simulator.twin.fleet import build_fleet

    data = flash_sale_without_shapes()
    data["versions"] = {v: {"model": {"name": "Llama-3.1-8B-Instruct"}} for v in data["versions"]}
    fleet = build_fleet(parse_config(data))
    fleet.advance(5.0)
    assert fleet.nodes and all(n.kv_capacity_tokens > 0 for n in fleet.nodes)


def test_risk_without_a_model_shape_leaves_the_capacity_term_out():
    cfg = parse_config(flash_sale_without_shapes())
    samples = [Sample("infercast_kv_cache_usage_ratio", {"pool": "v4-main", "version": "v4", "instance": f"v4-{i}"},
                      0.98) for i in range(3)]  # fmt: skip
    samples += [Sample("infercast_kv_cache_usage_ratio", {"pool": "v3.5-fallback", "version": "v3.5",
                                                           "instance": "v35-0"}, 0.5)]  # fmt: skip
    out = derive(cfg, samples)
    risk = {s.labels["pool"]: s.value for s in out if s.name == "infercast_avalanche_risk_score"}
    assert risk and all(math.isfinite(s.value) for s in out)
    full = derive(load_config(FLASH_SALE), samples)
    full_risk = {s.labels["pool"]: s.value for s in full if s.name == "infercast_avalanche_risk_score"}
    # no cascade term: the pool's own pressure only, at least the shaped fleet's figure
    assert risk["v4-main"] >= full_risk["v4-main"] > 0


def test_a_twin_key_in_a_pool_is_told_it_belongs_in_the_model_shape():
    data = real_fleet("chat-v4")
    data["pools"]["p0"]["layers"] = 40
    with pytest.raises(ConfigError) as err:
        parse_config(data)
    assert (
        "pools.p0.layers: not a field here; 'layers' belongs in versions.<version>.model (the twin's model shape)"
        in str(err.value)
    )


def test_a_twin_constant_at_the_top_level_is_told_it_belongs_in_twin():
    with pytest.raises(ConfigError, match=r"tick_seconds: not a field here; 'tick_seconds' belongs in twin "):
        parse_config(real_fleet("chat-v4") | {"tick_seconds": 0.5})


def test_a_key_that_is_a_field_nowhere_is_still_a_typo():
    data = real_fleet("chat-v4")
    data["pools"]["p0"]["nodez"] = 3
    with pytest.raises(ConfigError, match=r"pools\.p0\.nodez: unknown key \(typo\?\)"):
        parse_config(data)


def test_infercast_check_prints_where_a_wrong_key_belongs(tmp_path):
    data = real_fleet("chat-v4")
    data["versions"]["v0"]["max_batch"] = 64
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    result = check_config(path)
    assert result.status == "FAILED"
    assert "versions.v0.max_batch: not a field here; 'max_batch' belongs in versions.<version>.batcher" in result.detail


def test_the_shipped_fleet_files_load_unchanged():
    for path in sorted((REPO / "examples").glob("*.yaml")):
        cfg = load_config(path)
        for name, v in cfg.versions.items():
            assert v.model._where == f"versions.{name}.model"


def test_the_docs_known_model_table_is_the_modules():
    text = (REPO / "docs" / "fleet-file.md").read_text()
    rows = {}
    for line in text.split("<!-- known-models:")[1].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 6 and "/" in cells[0]:
            rows[cells[0]] = (int(cells[1]), int(cells[2]), int(cells[3]), cells[4], float(cells[5]))
    want = {
        n: (s["layers"], s["kv_heads"], s["head_dim"], s["dtype"], s["weights_gb"]) for n, s in KNOWN_MODELS.items()
    }
    assert rows == want


def test_a_trace_run_that_sizes_its_fleet_is_refused_before_sizing(tmp_path, capsys):
    """`--size-fleet` computes from the weights before any engine is built: the CLI refuses first."""
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(flash_sale_without_shapes()))
    trace = REPO / "tests" / "data" / "traces" / "mooncake" / "conversation_trace.jsonl"
    argv = ["twin", "run", "--trace", str(trace), "--config", str(path), "--size-fleet", "--out", str(tmp_path / "o")]
    assert main(argv) == 2
    assert re.search(r"^infercast: versions\.(v4|v3\.5)\.model: the twin needs", capsys.readouterr().err)
    assert not (tmp_path / "o").exists()
