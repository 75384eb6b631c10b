"""Queue-driven compaction: ``schedule`` publishes the planner's jobs to SQS after leasing
their inputs, and ``worker`` processes run them one at a time (docs/ARCHITECTURE.md §8.1)."""
