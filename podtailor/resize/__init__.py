"""In-place resize semantics: what a resize changes (requests, limits, QoS class, restarts) under LimitRanges."""
