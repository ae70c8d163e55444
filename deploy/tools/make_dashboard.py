"""Writes deploy/grafana-dashboard.json (run from the repository root; edit panels here, not in the JSON)."""

import json

panels = []


def panel(title, exprs, unit="short", kind="timeseries"):
    panels.append(
        {
            "type": kind,
            "title": title,
            "gridPos": {"h": 8, "w": 12, "x": 12 * (len(panels) % 2), "y": 8 * (len(panels) // 2)},
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "targets": [
                {"refId": chr(65 + i), "expr": e, "legendFormat": legend} for i, (e, legend) in enumerate(exprs)
            ],
        }
    )


panel(
    "Requests per second by pool and status",
    [("sum by (pool, status) (rate(tandem_gateway_requests_total[1m]))", "{{pool}} {{status}}")],
    "reqps",
)
panel(
    "Time to first token (p50, p90, p99)",
    [
        (f"histogram_quantile({q}, sum by (le) (rate(tandem_gateway_ttft_seconds_bucket[5m])))", f"p{int(q * 100)}")
        for q in (0.5, 0.9, 0.99)
    ],
    "s",
)
panel(
    "Time per output token (p50, p90)",
    [
        (
            f"histogram_quantile({q}, sum by (le) (rate(tandem_gateway_time_per_output_token_seconds_bucket[5m])))",
            f"p{int(q * 100)}",
        )
        for q in (0.5, 0.9)
    ],
    "s",
)
panel(
    "Tokens per second by tenant (gateway)",
    [("sum by (tenant) (rate(tandem_gateway_completion_tokens_total[1m]))", "{{tenant}}")],
    "short",
)
panel(
    "Output tokens per second (workers)",
    [("sum by (instance) (tandem_worker_tokens_per_second)", "{{instance}}")],
    "short",
)
panel(
    "Queue backlog and running sequences",
    [
        ("sum by (instance) (tandem_worker_queue_depth)", "queued {{instance}}"),
        ("sum by (instance) (tandem_worker_running)", "running {{instance}}"),
    ],
)
panel("KV cache use", [("tandem_worker_kv_blocks_used / tandem_worker_kv_blocks_total", "{{instance}}")], "percentunit")
panel(
    "Prefix cache hit rate: actual (workers) and predicted (gateway)",
    [
        (
            "sum(rate(tandem_worker_prefix_hit_tokens_total[5m])) / sum(rate(tandem_worker_prefix_query_tokens_total[5m]))",
            "actual (workers)",
        ),
        (
            'sum(rate(tandem_gateway_prefix_tokens_total{kind="predicted"}[5m])) / sum(rate(tandem_gateway_prompt_tokens_total[5m]))',
            "predicted (gateway)",
        ),
    ],
    "percentunit",
)
panel(
    "Memory in use and watermark",
    [
        ("tandem_worker_memory_bytes", "in use {{instance}}"),
        ("tandem_worker_memory_watermark_bytes", "watermark {{instance}}"),
    ],
    "bytes",
)
panel(
    "Routing decision time (p99)",
    [("histogram_quantile(0.99, sum by (le) (rate(tandem_gateway_routing_decision_seconds_bucket[5m])))", "p99")],
    "s",
)
panel("Prefix hint source (1 = active)", [("tandem_gateway_prefix_hint_mode", "{{mode}}")])
panel(
    "Fallbacks, privacy blocks, rate limits",
    [
        ("sum(rate(tandem_gateway_fallbacks_total[5m]))", "fallbacks"),
        ("sum(rate(tandem_gateway_privacy_blocks_total[5m]))", "privacy blocks"),
        ("sum by (limit) (rate(tandem_gateway_rate_limited_total[5m]))", "429 {{limit}}"),
    ],
    "reqps",
)
panel(
    "Autoscaling: saturation by pool (scale to ceil(replicas x this))",
    [
        ("max by (pool) (tandem_autoscale_saturation)", "{{pool}}"),
        ("max by (pool, signal) (tandem_autoscale_signal_ratio)", "{{pool}} {{signal}}"),
    ],
)
panel(
    "Healthy backends by pool (0: the pool has none; its saturation then reads 0)",
    [("min by (pool) (tandem_gateway_pool_healthy_backends)", "{{pool}}")],
)
panel(
    "Open circuit breakers",
    [('sum by (backend) (tandem_gateway_backend_circuit_state{state!="closed"})', "{{backend}}")],
)
panel("Policy reloads", [("sum by (result) (increase(tandem_gateway_policy_reloads_total[1h]))", "{{result}}")])
dashboard = {
    "title": "Tandem",
    "uid": "tandem-overview",
    "schemaVersion": 39,
    "version": 1,
    "editable": True,
    "time": {"from": "now-1h", "to": "now"},
    "refresh": "30s",
    "tags": ["tandem"],
    "templating": {
        "list": [{"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"}]
    },
    "panels": panels,
}
open("deploy/grafana-dashboard.json", "w").write(json.dumps(dashboard, indent=2) + "\n")
