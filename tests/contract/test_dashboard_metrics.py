"""Every metric the Grafana dashboard queries is one the gateway or a worker really exports."""

import json
import re
from pathlib import Path

from prometheus_client import REGISTRY, CollectorRegistry

import gateway.metrics  # noqa: F401 - registers the gateway's metrics
from gateway.autoscale import AutoscaleCollector, TtftWindow
from gateway.config import Settings
from gateway.policy.loader import parse_policy
from serving.engine_api import EngineStats
from serving.worker_metrics import EngineCollector

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana-dashboard.json"
DEFAULT_POLICY = Path(__file__).parents[2] / "policies" / "default.yaml"


class _StatsOnly:
    """Just enough of an engine for its collector to describe the worker's metrics."""

    def stats(self) -> EngineStats:
        return EngineStats(model_id="m", kind="cloud", execution_provider="torch-cpu", max_context_tokens=1)


class _NoBackends:
    def all(self) -> list:
        return []


def exported_names() -> set[str]:
    worker = CollectorRegistry()
    worker.register(EngineCollector(_StatsOnly()))
    autoscale = CollectorRegistry()  # the gateway registers it at start-up, over its live backends
    policy = parse_policy(DEFAULT_POLICY.read_text(), str(DEFAULT_POLICY))
    settings = Settings(model_dir=Path("unused"))
    autoscale.register(
        AutoscaleCollector(settings, _NoBackends(), lambda: policy.model_copy(update={"pools": {}}), TtftWindow(60))
    )
    names = set()
    for registry in (REGISTRY, worker, autoscale):
        for family in registry.collect():
            suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}.get(family.type, [""])
            names |= {family.name + s for s in suffixes}
    return names


def test_the_dashboard_only_queries_metrics_that_exist():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {name for e in exprs for name in re.findall(r"\btandem_[a-z_]+\b", e)}
    assert len(used) >= 15
    assert used <= exported_names(), sorted(used - exported_names())
