"""Results: the run directory store and the tables built from it."""

from anyswe.results.store import RunStore, aggregate, latest_attempts, read_rows

__all__ = ["RunStore", "aggregate", "latest_attempts", "read_rows"]
