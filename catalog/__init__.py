"""The catalog: which files are live, topic configs and offsets, leases and the commit
history, kept in the store as a log of commits (CATALOG.md)."""

from compactor.catalog.catalog import CATALOG_KEY, Catalog, Change
from compactor.catalog.config import TopicConfig
from compactor.catalog.errors import CatalogError, CommitConflict, ConfigError, CorruptCatalog
from compactor.catalog.log import CommitRecord, LogEntry
from compactor.catalog.snapshot import Garbage, Lease, LiveFile, Snapshot, Topic, TopicPartition
from compactor.catalog.summary import TopicSummary

__all__ = [
    "CATALOG_KEY",
    "Catalog",
    "CatalogError",
    "Change",
    "CommitConflict",
    "CommitRecord",
    "ConfigError",
    "CorruptCatalog",
    "Garbage",
    "Lease",
    "LiveFile",
    "LogEntry",
    "Snapshot",
    "Topic",
    "TopicConfig",
    "TopicPartition",
    "TopicSummary",
]
