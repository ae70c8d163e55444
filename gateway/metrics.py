"""The gateway's Prometheus metrics (names documented in docs/operations.md)."""

from prometheus_client import Counter, Gauge, Histogram

REQUESTS = Counter("tandem_gateway_requests_total", "Requests by outcome", ["pool", "rule", "tenant", "status"])
PROMPT_TOKENS = Counter("tandem_gateway_prompt_tokens_total", "Prompt tokens routed", ["pool", "rule", "tenant"])
COMPLETION_TOKENS = Counter(
    "tandem_gateway_completion_tokens_total", "Completion tokens streamed", ["pool", "rule", "tenant"]
)
TTFT = Histogram(
    "tandem_gateway_ttft_seconds",
    "Time to first token",
    ["pool"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
TPOT = Histogram(
    "tandem_gateway_time_per_output_token_seconds",
    "Time per output token after the first, per request",
    ["pool"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1),
)
E2E = Histogram(
    "tandem_gateway_request_seconds",
    "Request latency, end to end",
    ["pool"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
FALLBACKS = Counter(
    "tandem_gateway_fallbacks_total", "Requests served by a backend other than the first choice", ["rule"]
)
PRIVACY_BLOCKS = Counter(
    "tandem_gateway_privacy_blocks_total", "Cloud pools removed from a private request's candidates", ["rule"]
)
POLICY_RELOADS = Counter(
    "tandem_gateway_policy_reloads_total",
    "Policy file changes, by result (ok: now serving; error: rejected)",
    ["result"],
)
TENANTS_RELOADS = Counter(
    "tandem_gateway_tenants_reloads_total",
    "Tenants file changes, by result (ok: now serving; error: refused, the tenants before it serve)",
    ["result"],
)
RATE_LIMITED = Counter("tandem_gateway_rate_limited_total", "Requests refused with 429", ["tenant", "limit"])
INFLIGHT = Gauge(
    "tandem_gateway_inflight_requests", "Requests admitted and not finished (the tenant's concurrency)", ["tenant"]
)
BACKEND_INFLIGHT = Gauge("tandem_gateway_backend_inflight", "Generate calls open to each backend", ["backend"])
RATE_LIMIT_MODE = Gauge(
    "tandem_gateway_rate_limit_mode",
    "1 for the active mode: redis (shared by replicas) or local (per replica)",
    ["mode"],
)
PREFIX_HINT_MODE = Gauge(
    "tandem_gateway_prefix_hint_mode",
    "1 for the active prefix-hint source: redis (the workers' own hints) or approximate (this gateway's history)",
    ["mode"],
)
PREFIX_TOKENS = Counter(
    "tandem_gateway_prefix_tokens_total",
    "Prompt tokens of cloud requests: prompt, predicted (the picked backend's hinted match), actual (cached, per usage)",
    ["pool", "kind"],
)
ROUTING_DECISION = Histogram(
    "tandem_gateway_routing_decision_seconds",
    "Time to plan a request's route: gathering candidates (hashing, hint lookup), rules, scoring, pick",
    buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05),
)
ROUTING_PLUGIN = Histogram(
    "tandem_gateway_routing_plugin_seconds",
    "Time one routing plugin took for one request's pool (filter:<type>, <scorer type>, picker:<type>)",
    ["plugin"],
    buckets=(0.000005, 0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.001, 0.005),
)
_plugin_children: dict[str, object] = {}


def observe_plugins(plan) -> None:
    """Each plugin's time in a route plan (gateway.policy.route_plan.RoutePlan), into ROUTING_PLUGIN."""
    for pool in plan.pools:
        for label, seconds in pool.plugin_seconds.items():
            child = _plugin_children.get(label)
            if child is None:
                child = _plugin_children[label] = ROUTING_PLUGIN.labels(label)
            child.observe(seconds)


DECISION_LOG_DROPPED = Counter(
    "tandem_gateway_decision_log_dropped_total",
    "TANDEM_DECISION_LOG records that could not be written (its folder gone, a full disk): the gateway's log says why",
)
CLIENTS_LET_GO = Counter(
    "tandem_gateway_clients_let_go_total",
    "Streamed answers ended because their client took no data for TANDEM_CLIENT_STALL_S (not the backend's fault)",
)
