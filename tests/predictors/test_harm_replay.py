"""The replay that marks harm runs the twin exactly as `run_trace` does, and the fleet is sized as an operator sizes
one (`infercast.simulator.replay.sizing`, issue 37)."""

from __future__ import annotations

from infercast.config import load_config


def test_the_harm_replay_is_run_trace_s_frame_and_the_sized_fleet_runs_its_median_at_most_0_6(data_dir, repo_root):
    from infercast.simulator.replay.harm_replay import replay_trace
    from infercast.simulator.replay.sizing import MEDIAN_KV, median_kv, sized_fleet
    from infercast.simulator.replay.traces import load_trace
    from infercast.simulator.twin.run import run_trace

    trace = load_trace(data_dir / "traces" / "azure" / "AzureLLMInferenceTrace_conv.csv")
    cfg, rep, how = sized_fleet(trace, load_config(repo_root / "examples" / "flash-sale.yaml"), 15.0)
    # what the user sees in `infercast backtest --json`'s meta.sizing: the median at <= 0.6, and the harm it has
    assert round(median_kv(rep.timeseries), 4) == how["realised_median_kv"] <= MEDIAN_KV
    assert how["harm"]["episodes"] == len(rep.episodes()) and how["harm"]["samples"] == len(rep.t)
    # the same twin run as `run_trace` (the replay only reads what the run leaves in the fleet)
    again = replay_trace(trace, cfg, 15.0)
    assert again.timeseries.equals(run_trace(trace, cfg, seed=0, step_seconds=15.0).timeseries)
    assert (again.harm == rep.harm).all() and set(again.kinds) == {"kv", "oom", "urgent"}
    assert (again.harm == (again.kinds["kv"] | again.kinds["oom"] | again.kinds["urgent"])).all()
