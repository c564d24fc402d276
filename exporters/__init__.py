"""infercast exporters: engines, GPUs and the router to the metric catalog (docs/exporters.md).

base (samples, targets, the strict text parser) · vllm sglang tgi trtllm dcgm nvml (one source each: pure `parse`
plus a thin fetch) · twin (the in-process fleet twin as a source) · router (the router SDK and ingest format) ·
windows (state between scrapes) · derive (pure: risk and health scores) · server (scrape cycle, `/metrics`) · cli.
"""
