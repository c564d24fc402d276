"""The names of the series alertrules/rules.py records from the exporter's (and the predictor's) series, named
`level:metric:operations` (Prometheus' recording-rule convention) from the catalog's metric names.  The alerts and
the dashboards read these (dashboards/queries.py as `rec.*`); alertrules/sources.py maps the serving figures among
them to the engine rules'.  Data only.
"""

from __future__ import annotations

from infercast.catalog import (
    BATCH_SATURATION_RATIO,
    DEGRADATIONS_TOTAL,
    FORECAST_KV_CACHE_USAGE_RATIO,
    GPU_MEMORY_USED_BYTES,
    KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    KV_CACHE_FRAGMENTATION_RATIO,
    KV_CACHE_USAGE_RATIO,
    ROUTER_REQUESTS_TOTAL,
)

REQ_RATE = f"pool_version:{ROUTER_REQUESTS_TOTAL}:rate5m"
REQ_SHARE = f"version:{ROUTER_REQUESTS_TOTAL}:share_rate5m"
KV_USAGE_AVG = f"pool_version:{KV_CACHE_USAGE_RATIO}:avg"
KV_USAGE_MAX = f"pool_version:{KV_CACHE_USAGE_RATIO}:max"
KV_USAGE_FLEET = f"fleet:{KV_CACHE_USAGE_RATIO}:avg"
FRAG_AVG = f"pool_version:{KV_CACHE_FRAGMENTATION_RATIO}:avg"
FRAG_FULL = f"pool_version:{KV_CACHE_FRAGMENTATION_RATIO}:max_over_trigger"
FAILURE_RATE = f"pool_version:{KV_BLOCK_ALLOCATION_FAILURES_TOTAL}:rate5m"
DEGRADATION_RATE = f"from_version_to_version_reason:{DEGRADATIONS_TOTAL}:rate5m"
BATCH_SAT_AVG = f"pool_version:{BATCH_SATURATION_RATIO}:avg"
FORECAST_UPPER = f"pool_version:{FORECAST_KV_CACHE_USAGE_RATIO}:max_yhat_upper"
GPU_MEM_RATIO = f"node_gpu:{GPU_MEMORY_USED_BYTES}:ratio"
