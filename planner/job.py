"""A compaction job: the document the planner, the queue, replay and Spark hand over.

A job names a contiguous run of live files (oldest first) and the level its output
goes to, or (``drop``) that the run leaves the catalog unread: every record in it is
past retention.ms (``planner.retention``). Its id is derived from its inputs and
output level, and so are its output keys: a retried job writes to the same keys (with
If-None-Match), so it can never leave two live copies of its output.

A job document (``Job.loads``: what ``plan --json`` prints, what the queue carries, what
``replay`` and Spark's tasks read, what a commit records) is checked field by field, and
against the rules of the planner that makes jobs: it must carry its id, which must match
its inputs and output; no job writes to L2 or above without deduplicating (every file
there was written by a deduplicating job, which is what makes a file clean for
max.compaction.lag.ms); and a document naming a planner rule must have that rule's shape
(``planner_rule_problem``). A document no planner could have made is refused, whoever
reads it, before anything is read or leased.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from compactor.catalog.snapshot import MAX_LEVEL as MAX_LEVEL  # the catalog's

CLEAN_LEVEL = 2
"""The lowest level every file of which was written by a deduplicating job: a job writing
at or above it deduplicates (``Job``), and max.compaction.lag.ms counts such files clean
(``planner.maxlag``)."""

SCHEMA_VERSION = 1
"""The job document's version (``schema_version``): what ``plan --json`` prints, what
``schedule`` sends, what a worker and ``replay`` accept. A reader rejects any other."""

FULL_RULES = ("full", "daily")
"""Rules whose jobs are full compactions: committing one restarts the daily clock."""

LEVEL_RULES = {f"L{n}->L{n + 1}": n + 1 for n in range(MAX_LEVEL)}
"""The level rules and the level each writes to (L0 -> L1 copies, the others deduplicate)."""
TOP_RULES = ("top-run", *FULL_RULES)
"""Rules whose jobs deduplicate into the top level."""
CLEAN_RULES = ("max-lag", "tombstones", "stcs")
"""Rules whose jobs deduplicate into CLEAN_LEVEL or above (their highest input's level)."""
RETENTION_RULE = "retention"
"""Drops a run of files unread, or rewrites one file at its level (at least L1)."""
MANUAL_RULE = "manual"
"""A job made by hand in code (``Job``'s default rule): only a job's own rules apply."""
PLANNER_RULES = (*LEVEL_RULES, *TOP_RULES, *CLEAN_RULES, RETENTION_RULE)
"""Every rule a planner (``planner.plan``, ``planner.stcs``) names its jobs by."""

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
        elif self.output_level >= CLEAN_LEVEL and not self.deduplicate:
            raise ValueError(
                f"a job writing to L{self.output_level} deduplicates: every file at "
                f"L{CLEAN_LEVEL} and above is written by a deduplicating job"
            )
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
        return job_id(self.inputs, self.output_level, self.deduplicate, self.drop)

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
    def from_json(cls, data: Mapping[str, Any]) -> Job:
        """A job from its parsed JSON document; JobDocumentError, naming the field, if a
        field is missing or of the wrong type, if the id does not match, or if no planner
        could have made the job (module doc)."""
        if not isinstance(data, Mapping):
            raise JobDocumentError(f"not a job document: a JSON {_json_kind(data)}")
        version = _field(data, "schema_version")
        if not _is_int(version):
            raise _wrong_type("schema_version", "an integer", version)
        if version != SCHEMA_VERSION:
            raise JobDocumentError(
                f"unsupported job document: schema_version {version!r} "
                f"(this version of compactor reads {SCHEMA_VERSION})"
            )
        doc_id = _field(data, "id", "a job document carries its id, as plan --json prints it")
        if not isinstance(doc_id, str):
            raise _wrong_type("id", "a string", doc_id)
        inputs = _inputs(_field(data, "inputs"))
        level = _field(data, "output_level")
        if not _is_int(level):
            raise _wrong_type("output_level", "an integer", level)
        deduplicate = _field(data, "deduplicate")
        if not isinstance(deduplicate, bool):
            raise _wrong_type("deduplicate", "true or false", deduplicate)
        drop = data.get("drop", False)
        if not isinstance(drop, bool):
            raise _wrong_type("drop", "true or false", drop)
        rule = data.get("rule", MANUAL_RULE)
        if not isinstance(rule, str):
            raise _wrong_type("rule", "a string", rule)
        if rule not in PLANNER_RULES and rule != MANUAL_RULE:
            raise JobDocumentError(
                f"malformed job document: field 'rule' must name a planner rule "
                f"({', '.join(PLANNER_RULES)}) or be {MANUAL_RULE!r}, not {rule!r}"
            )
        reason = data.get("reason", "")
        if not isinstance(reason, str):
            raise _wrong_type("reason", "a string", reason)
        numbers = _numbers(data.get("numbers", {}))
        expected = job_id(inputs, level, deduplicate, drop)
        if doc_id != expected:  # an edited document, before what the edit broke
            raise JobDocumentError(f"job id {doc_id} does not match its inputs ({expected})")
        _check_output(level, deduplicate, drop)
        try:
            job = cls(inputs, level, deduplicate, rule, reason, numbers, drop)
        except ValueError as exc:  # the checks above leave none; kept as a backstop
            raise JobDocumentError(f"malformed job document: {exc}") from None
        problem = planner_rule_problem(job)
        if problem is not None:
            raise JobDocumentError(f"malformed job document: no planner makes this job: {problem}")
        return job

    def dumps(self) -> str:
        return json.dumps(self.to_json(), separators=(",", ":"))


def job_id(inputs: tuple[JobInput, ...], output_level: int, deduplicate: bool, drop: bool) -> str:
    """A job's id: derived from its inputs' ids and its output (``Job.id``)."""
    h = hashlib.sha256()
    for i in inputs:
        h.update(i.id.encode() + b"\0")
    kind = "drop" if drop else f"L{output_level}:{int(deduplicate)}"
    h.update(kind.encode())
    return h.hexdigest()[:32]


def planner_rule_problem(job: Job) -> str | None:
    """Why no planner makes ``job`` under its rule, as far as the job alone tells (the
    output level and deduplication each rule gives its jobs; a rewrite's single input);
    None if one could. A ``manual`` job (made in code) answers to a job's own rules only.
    """
    rule = job.rule
    if rule == MANUAL_RULE:
        return None
    if rule not in PLANNER_RULES:
        return f"no planner rule is named {rule!r}"
    if job.drop:
        if rule != RETENTION_RULE:
            return f"only the {RETENTION_RULE!r} rule drops files unread, not {rule!r}"
        return None
    this = f"this one {_writes(job.output_level, job.deduplicate)}"
    if rule in LEVEL_RULES:
        level = LEVEL_RULES[rule]
        if (job.output_level, job.deduplicate) != (level, level >= CLEAN_LEVEL):
            return f"a {rule!r} job {_writes(level, level >= CLEAN_LEVEL)}; {this}"
    elif rule in TOP_RULES:
        if (job.output_level, job.deduplicate) != (MAX_LEVEL, True):
            return f"a {rule!r} job {_writes(MAX_LEVEL, True)}; {this}"
    elif rule in CLEAN_RULES:
        if job.output_level < CLEAN_LEVEL or not job.deduplicate:
            return f"a {rule!r} job deduplicates into L{CLEAN_LEVEL} or above; {this}"
    elif rule == RETENTION_RULE:
        if len(job.inputs) != 1:
            return f"a {rule!r} job that is not a drop rewrites one file, not {len(job.inputs)}"
        if job.deduplicate != (job.output_level >= CLEAN_LEVEL):
            return f"a {rule!r} rewrite deduplicates at L{CLEAN_LEVEL} and above only; {this}"
    return None


def _writes(level: int, deduplicate: bool) -> str:
    return f"writes to L{level}, " + ("deduplicating" if deduplicate else "without deduplicating")


# --- reading a job document's fields -------------------------------------------------------


def _json_kind(value: object) -> str:
    """What a parsed JSON value is, in JSON's words (a value that is never right in its
    place, such as an empty string or a negative number, shows as itself)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer" if value >= 0 else str(value)
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string" if value else "an empty string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _wrong_type(name: str, expected: str, value: object) -> JobDocumentError:
    return JobDocumentError(
        f"malformed job document: field {name!r} must be {expected}, not {_json_kind(value)}"
    )


def _field(data: Mapping[str, Any], name: str, why: str = "", *, where: str = "") -> Any:
    """A required field's value (``where``: the path of the object holding it)."""
    if name not in data:
        raise JobDocumentError(
            f"malformed job document: no field '{where}{name}'" + (f" ({why})" if why else "")
        )
    return data[name]


def _inputs(value: object) -> tuple[JobInput, ...]:
    """The ``inputs`` field: a non-empty list of {id, key, size}, no id twice."""
    if not isinstance(value, list):
        raise _wrong_type("inputs", "a list of objects", value)
    if not value:
        raise JobDocumentError("malformed job document: field 'inputs' lists no input file")
    inputs: list[JobInput] = []
    for n, item in enumerate(value):
        if not isinstance(item, dict):
            raise _wrong_type(f"inputs[{n}]", "an object (id, key, size)", item)
        texts = []
        for name in ("id", "key"):
            text = _field(item, name, where=f"inputs[{n}].")
            if not isinstance(text, str) or not text:
                raise _wrong_type(f"inputs[{n}].{name}", "a non-empty string", text)
            texts.append(text)
        size = _field(item, "size", where=f"inputs[{n}].")
        if not _is_int(size) or size < 0:
            raise _wrong_type(f"inputs[{n}].size", "a non-negative integer", size)
        if any(i.id == texts[0] for i in inputs):
            raise JobDocumentError(
                f"malformed job document: field 'inputs' lists input file {texts[0]} twice"
            )
        inputs.append(JobInput(texts[0], texts[1], size))
    return tuple(inputs)


def _numbers(value: object) -> Numbers:
    if not isinstance(value, dict):
        raise _wrong_type("numbers", "an object of numbers", value)
    for name, number in value.items():
        if not isinstance(number, int | float) or isinstance(number, bool):
            raise _wrong_type(f"numbers.{name}", "a number", number)
    return tuple((str(k), v) for k, v in value.items())


def _check_output(level: int, deduplicate: bool, drop: bool) -> None:
    """A job's own rules on its output, in the document's words (``Job.__post_init__``)."""
    if drop:
        if level != 0 or deduplicate:
            raise JobDocumentError(
                "malformed job document: a drop job (field 'drop' true) has no output: "
                f"'output_level' 0 and 'deduplicate' false, not {level} and "
                f"{str(deduplicate).lower()}"
            )
        return
    if not 1 <= level <= MAX_LEVEL:
        raise JobDocumentError(
            f"malformed job document: field 'output_level' must be 1..{MAX_LEVEL} "
            f"(0 for a drop job), not {level}"
        )
    if level >= CLEAN_LEVEL and not deduplicate:
        raise JobDocumentError(
            f"malformed job document: a job writing to L{level} deduplicates ('deduplicate' "
            f"true): every file at L{CLEAN_LEVEL} and above is written by a deduplicating job"
        )
