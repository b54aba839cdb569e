"""Results: the TaskResult contract, the run directory, tables, comparisons, exports and the report."""

from anyswe.results.schema import SCHEMA_VERSION, TaskResult
from anyswe.results.store import RunStore, aggregate, latest_attempts, read_results, read_rows

__all__ = ["SCHEMA_VERSION", "RunStore", "TaskResult", "aggregate", "latest_attempts", "read_results", "read_rows"]
