"""The one error every reader raises for bad bytes."""

from __future__ import annotations


class FormatError(Exception):
    """Bytes that are not a valid file: truncated, corrupt, or not this format.

    ``str(e)`` is ``"{object_name}: byte {position}: {reason}"``, where ``position`` is the
    absolute byte position in the object where the problem was found (the start of the
    frame, field or read that failed).
    """

    object_name: str
    position: int
    reason: str

    def __init__(self, object_name: str, position: int, reason: str) -> None:
        super().__init__(f"{object_name}: byte {position}: {reason}")
        self.object_name = object_name
        self.position = position
        self.reason = reason

    def __reduce__(self) -> tuple[type[FormatError], tuple[str, int, str]]:
        # Exceptions pickle their args by default; ours has three (e.g. across Spark tasks).
        return (FormatError, (self.object_name, self.position, self.reason))
