"""Autoscaling signals: how loaded each pool is against its targets, as metrics an HPA or KEDA acts on.

Three signals per pool, each a ratio to its target (1.0 = at target):

- queue: requests waiting per healthy worker (Stats.queue_depth), against `autoscale_queue_per_worker`;
- kv: the pool's KV blocks in use over its total, against `autoscale_kv_usage`;
- ttft: this gateway's TTFT p90 over the last `autoscale_window_s`, against `autoscale_ttft_p90_s`.

`tandem_autoscale_saturation{pool}` is the largest of the three. Kubernetes' HPA, given it as an
External metric with a target value of 1, computes replicas = ceil(replicas * saturation): it adds
workers when any signal is over target and removes them when all are under (deploy/k8s/, docs/operations.md).
"""

import math
import time
from collections import deque
from collections.abc import Callable, Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gateway.backends.registry import BackendRegistry
from gateway.config import Settings
from gateway.policy.schema import Policy

MAX_SAMPLES = 4096  # TTFT samples kept per pool: enough for a p90 at high request rates, bounded memory


class TtftWindow:
    """Recent time-to-first-token samples per pool, for a windowed p90 (histograms cannot give one per replica)."""

    def __init__(self, window_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s, self._clock = window_s, clock
        self._samples: dict[str, deque[tuple[float, float]]] = {}

    def add(self, pool: str, seconds: float) -> None:
        self._samples.setdefault(pool, deque(maxlen=MAX_SAMPLES)).append((self._clock(), seconds))

    def p90(self, pool: str) -> float | None:
        samples = self._samples.get(pool)
        if not samples:
            return None
        cutoff = self._clock() - self.window_s
        while samples and samples[0][0] < cutoff:
            samples.popleft()
        if not samples:
            return None
        values = sorted(s for _, s in samples)
        return values[min(len(values) - 1, math.ceil(0.9 * len(values)) - 1)]


class AutoscaleCollector(Collector):
    """Computes the signals at scrape time from the backends' last Stats and the TTFT window."""

    def __init__(
        self, settings: Settings, registry: BackendRegistry, policy: Callable[[], Policy], ttft: TtftWindow
    ) -> None:
        self._settings, self._registry, self._policy, self._ttft = settings, registry, policy, ttft

    def signals(self) -> dict[str, dict[str, float]]:
        """Per pool: each signal's ratio to its target (missing where there is nothing to measure)."""
        s = self._settings
        out: dict[str, dict[str, float]] = {}
        policy = self._policy()
        for name in policy.pools:
            # Backends whose Stats carry a load: an OpenAI-compatible server's say nothing of its queue, which read as
            # an empty one (a review: a busy HTTP pool's saturation was 0.21, its upstream's 1.5)
            reporting = [b for b in self._registry.backends(policy, name) if b.is_reporting and b.reports_load]
            signals: dict[str, float] = {}
            if reporting:
                waiting = sum(b.stats.queue_depth for b in reporting) / len(reporting)
                signals["queue"] = waiting / s.autoscale_queue_per_worker
                total = sum(b.stats.kv_blocks_total for b in reporting)
                if total:
                    signals["kv"] = sum(b.stats.kv_blocks_used for b in reporting) / total / s.autoscale_kv_usage
            p90 = self._ttft.p90(name)
            if p90 is not None:
                signals["ttft"] = p90 / s.autoscale_ttft_p90_s
            out[name] = signals
        return out

    def collect(self) -> Iterator[GaugeMetricFamily]:
        ratio = GaugeMetricFamily(
            "tandem_autoscale_signal_ratio",
            "One autoscaling signal against its target (1 = at target)",
            labels=["pool", "signal"],
        )
        saturation = GaugeMetricFamily(
            "tandem_autoscale_saturation",
            "Largest signal ratio of the pool: scale to ceil(replicas * this)",
            labels=["pool"],
        )
        ttft = GaugeMetricFamily(
            "tandem_gateway_ttft_p90_seconds", "This gateway's TTFT p90 over the autoscaling window", labels=["pool"]
        )
        for pool, signals in self.signals().items():
            for signal, value in signals.items():
                ratio.add_metric([pool, signal], value)
            saturation.add_metric([pool], max(signals.values(), default=0.0))
            if "ttft" in signals:
                ttft.add_metric([pool], signals["ttft"] * self._settings.autoscale_ttft_p90_s)
        circuit = GaugeMetricFamily(
            "tandem_gateway_backend_circuit_state",
            "1 for each backend's circuit-breaker state (closed, open, half-open)",
            labels=["backend", "state"],
        )
        for backend in self._registry.all():
            circuit.add_metric([backend.endpoint, backend.breaker.current_state()], 1.0)
        healthy = GaugeMetricFamily(
            "tandem_gateway_backend_healthy",
            "1 while the backend answers its health polls (what /readyz says), else 0: a dead or hung worker, whose "
            "pool's saturation reads 0 when none is left, shows here",
            labels=["pool", "backend"],
        )
        healthy_count = GaugeMetricFamily(
            "tandem_gateway_pool_healthy_backends",
            "The pool's backends answering their health polls: 0 for a pool with none at all (a dns:// name that "
            "resolves to nothing has no backend_healthy series to sum)",
            labels=["pool"],
        )
        policy = self._policy()
        for pool in policy.pools:
            backends = self._registry.backends(policy, pool)
            for backend in backends:
                healthy.add_metric([pool, backend.endpoint], float(backend.is_reporting))
            healthy_count.add_metric([pool], float(sum(b.is_reporting for b in backends)))
        yield from (ratio, saturation, ttft, circuit, healthy, healthy_count)
