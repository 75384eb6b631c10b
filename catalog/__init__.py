"""The catalog: which files are live, topic configs and offsets, kept in the store."""

from compactor.catalog.catalog import CATALOG_KEY, Catalog, Change
from compactor.catalog.config import TopicConfig
from compactor.catalog.errors import CatalogError, CommitConflict, ConfigError, CorruptCatalog
from compactor.catalog.snapshot import Garbage, LiveFile, Snapshot, Topic, TopicPartition

__all__ = [
    "CATALOG_KEY",
    "Catalog",
    "CatalogError",
    "Change",
    "CommitConflict",
    "ConfigError",
    "CorruptCatalog",
    "Garbage",
    "LiveFile",
    "Snapshot",
    "Topic",
    "TopicConfig",
    "TopicPartition",
]
