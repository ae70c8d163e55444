"""The routing plugins, by kind. The policy schema builds its `filters`, `scorers` and `picker` fields from
these lists, so a new plugin is one module and one line here."""

from gateway.routing.cache_affinity_picker import CacheAffinity
from gateway.routing.healthy_filter import Healthy
from gateway.routing.kv_utilization_scorer import KvUtilization
from gateway.routing.max_score_picker import MaxScore
from gateway.routing.prefix_hit_scorer import PrefixHit
from gateway.routing.queue_depth_scorer import QueueDepth

FILTERS = (Healthy,)
SCORERS = (QueueDepth, PrefixHit, KvUtilization)
PICKERS = (MaxScore, CacheAffinity)
