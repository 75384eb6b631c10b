"""A compaction job: the document the planner, the queue, replay and Spark hand over.

A job names a contiguous run of live files (oldest first) and the level its output
goes to, or (``drop``) that the run leaves the catalog unread: every record in it is
past retention.ms (``planner.retention``). Its id is derived from its inputs and
output level, and so are its output keys: a retried job writes to the same keys (with
If-None-Match), so it can never leave two live copies of its output.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

MAX_LEVEL = 4

SCHEMA_VERSION = 1
"""The job document's version (``schema_version``): what ``plan --json`` prints, what
``schedule`` sends, what a worker and ``replay`` accept. A reader rejects any other."""

FULL_RULES = ("full", "daily")
"""Rules whose jobs are full compactions: committing one restarts the daily clock."""

Numbers = tuple[tuple[str, int | float], ...]

OUTPUT_GROUPS = ("compacted", "plain")
"""A job writes at most two files: one for compacted topics, one for the others, so the
two never share a file above L0."""


class JobDocumentError(ValueError):
    """Text that is not a valid job document (its JSON, schema version or fields)."""


@dataclass(frozen=True, slots=True)
class JobInput:
    id: str
    key: str
    size: int


@dataclass(frozen=True, slots=True)
class Job:
    inputs: tuple[JobInput, ...]
    output_level: int
    deduplicate: bool
    rule: str = "manual"
    """Which rule chose the job (planner), for reports."""
    reason: str = ""
    numbers: Numbers = ()
    """The figures the rule decided on (name, value), for ``compactor plan``."""
    drop: bool = False
    """A metadata-only job: its inputs leave the catalog without being read or rewritten
    (they have no output: ``output_level`` 0)."""

    def __post_init__(self) -> None:
        if not self.inputs:
            raise ValueError("a job needs at least one input file")
        if self.drop:
            if self.output_level != 0 or self.deduplicate:
                raise ValueError("a drop job has no output: output level 0, no deduplication")
        elif not 1 <= self.output_level <= MAX_LEVEL:
            raise ValueError(f"output level must be in 1..{MAX_LEVEL}, got {self.output_level}")
        if len({i.id for i in self.inputs}) != len(self.inputs):
            raise ValueError("a job lists an input file twice")

    @property
    def is_full(self) -> bool:
        return self.rule in FULL_RULES

    @property
    def input_bytes(self) -> int:
        return sum(i.size for i in self.inputs)

    @property
    def id(self) -> str:
        h = hashlib.sha256()
        for i in self.inputs:
            h.update(i.id.encode() + b"\0")
        kind = "drop" if self.drop else f"L{self.output_level}:{int(self.deduplicate)}"
        h.update(kind.encode())
        return h.hexdigest()[:32]

    def output_key(self, group: str) -> str:
        return f"data/L{self.output_level}/{self.id}-{group}.cf"

    def output_file_id(self, group: str) -> str:
        return f"{self.id}-{group}"

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "id": self.id,
            "inputs": [{"id": i.id, "key": i.key, "size": i.size} for i in self.inputs],
            "output_level": self.output_level,
            "deduplicate": self.deduplicate,
            "rule": self.rule,
            "reason": self.reason,
            "numbers": dict(self.numbers),
            **({"drop": True} if self.drop else {}),
        }

    @classmethod
    def loads(cls, text: str | bytes) -> Job:
        """A job from its JSON document; JobDocumentError, naming what is wrong, if the text
        is not one."""
        try:
            data = json.loads(text)
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise JobDocumentError(f"not a job document: invalid JSON ({exc})") from None
        if not isinstance(data, dict):
            raise JobDocumentError(f"not a job document: a JSON {type(data).__name__}")
        return cls.from_json(data)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Job:
        version = data.get("schema_version")
        if version != SCHEMA_VERSION:
            raise JobDocumentError(
                f"unsupported job document: schema_version {version!r} "
                f"(this version of compactor reads {SCHEMA_VERSION})"
            )
        if not isinstance(data.get("deduplicate"), bool):
            raise JobDocumentError("malformed job document: 'deduplicate' must be true or false")
        if not isinstance(data.get("drop", False), bool):
            raise JobDocumentError("malformed job document: 'drop' must be true or false")
        try:
            job = cls(
                inputs=tuple(
                    JobInput(str(i["id"]), str(i["key"]), int(i["size"])) for i in data["inputs"]
                ),
                output_level=int(data["output_level"]),
                deduplicate=bool(data["deduplicate"]),
                rule=str(data.get("rule", "manual")),
                reason=str(data.get("reason", "")),
                numbers=tuple((str(k), v) for k, v in dict(data.get("numbers", {})).items()),
                drop=bool(data.get("drop", False)),
            )
        except KeyError as exc:
            raise JobDocumentError(f"malformed job document: no field {exc}") from None
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            raise JobDocumentError(f"malformed job document: {exc}") from None
        if "id" in data and data["id"] != job.id:
            raise JobDocumentError(f"job id {data['id']} does not match its inputs ({job.id})")
        return job

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))
