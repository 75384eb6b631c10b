"""Errors of the catalog; each message is one line a user can act on."""


class CatalogError(Exception):
    pass


class ConfigError(CatalogError):
    """A topic config key or value that Kafka's rules reject."""


class CommitConflict(CatalogError):
    """A commit's precondition no longer holds on the newest snapshot (not retryable as is)."""


class CorruptCatalog(CatalogError):
    pass
