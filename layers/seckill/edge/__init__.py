"""A sale's state at the edge: elected in Redis, sent through EdgeStateQueue, written
to CloudFront's KeyValueStore by EdgePublisherFunction (docs/edge.md)."""
