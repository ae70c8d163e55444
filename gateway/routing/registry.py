"""Plugin type names → implementations. Policy validation checks names and configs against these.

Filters and scorers are plain functions. Pickers are built from their config
once, when the policy loads, so bad config fails there, not at request time.
"""

from gateway.routing import (
    cache_affinity_picker,
    healthy_filter,
    kv_utilization_scorer,
    max_score_picker,
    prefix_hit_scorer,
    queue_depth_scorer,
)

FILTERS = {healthy_filter.TYPE_NAME: healthy_filter.healthy_filter}
SCORERS = {
    queue_depth_scorer.TYPE_NAME: queue_depth_scorer.queue_depth_scorer,
    prefix_hit_scorer.TYPE_NAME: prefix_hit_scorer.prefix_hit_scorer,
    kv_utilization_scorer.TYPE_NAME: kv_utilization_scorer.kv_utilization_scorer,
}
# type name -> (config class or None, factory(config) -> pick(scored, turn))
PICKERS = {
    max_score_picker.TYPE_NAME: (None, lambda _config: max_score_picker.max_score_picker),
    cache_affinity_picker.TYPE_NAME: (
        cache_affinity_picker.CacheAffinityConfig,
        cache_affinity_picker.cache_affinity_picker,
    ),
}
