"""compactor: compaction for Kafka-style compacted topics stored in object storage.

The repository keeps one folder per layer at its root (fileformat/, objectstore/,
catalog/, ingest/, planner/, worker/, cli/); this package is where they are installed
and imported from, as ``compactor.<layer>``. See docs/ARCHITECTURE.md.
"""
