"""Recovery after Redis lost its data, and reconciliation of stale reservations and drift."""
