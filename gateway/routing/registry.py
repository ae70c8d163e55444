"""Plugin type names → implementations. Policy validation checks names against these."""

from gateway.routing import healthy_filter, max_score_picker, queue_depth_scorer

FILTERS = {healthy_filter.TYPE_NAME: healthy_filter.healthy_filter}
SCORERS = {queue_depth_scorer.TYPE_NAME: queue_depth_scorer.queue_depth_scorer}
PICKERS = {max_score_picker.TYPE_NAME: max_score_picker.max_score_picker}
