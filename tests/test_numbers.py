"""Integers past the 64-bit range, read one way (``catalog.numbers.saturated_int``) by
every place a user writes one: a topic's ``*.ms`` config, a planner setting and the clock.

- The parse agrees with ``int`` on every integer of at most 19 significant digits, and
  reads one of more as just outside the 64-bit range, however many digits it has:
  ``int`` refuses more than 4,300, leading zeros included.
- Through the command line, the same too-long values get each place's own one line and
  exit status, with the store untouched; a value padded with thousands of zeros is its
  value.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clirunner import Result, one_line, run_cli, tree, two_l0_files
from hypothesis import given
from hypothesis import strategies as st

from compactor.catalog.leases import take_lease
from compactor.catalog.numbers import INT64_MAX, INT64_MIN, saturated_int
from compactor.catalog.snapshot import LiveFile, Snapshot
from compactor.cli.context import integer, non_negative_int, positive_int
from compactor.cli.exit_codes import ExitCode
from compactor.cli.key_buffer import MIN_KEY_BUFFER_BYTES
from compactor.cli.main import build_parser

NOW = "1700000000000"


@given(st.integers(min_value=-(10**19) + 1, max_value=10**19 - 1), st.integers(0, 30))
def test_within_19_digits_it_is_int(value: int, zeros: int) -> None:
    sign = "-" if value < 0 else ""
    assert saturated_int(f"{sign}{'0' * zeros}{abs(value)}") == value
    assert saturated_int(f" +{value} " if value >= 0 else f" {value} ") == value


@given(st.integers(20, 6000), st.booleans())
def test_past_19_digits_it_is_just_past_the_64_bit_range(digits: int, negative: bool) -> None:
    """At either end: -2^63 is a 64-bit value, so the negative side is one further."""
    text = ("-" if negative else "") + "1" + "0" * (digits - 1)
    assert saturated_int(text) == (-1 if negative else 1) * (INT64_MAX + 2)
    assert not -(INT64_MAX + 1) <= saturated_int(text) <= INT64_MAX


def test_leading_zeros_do_not_count_toward_int_s_limit() -> None:
    assert saturated_int("0" * 5000 + "7") == 7
    assert saturated_int("-" + "0" * 5000) == 0


@pytest.mark.parametrize("text", ["", " ", "+", "-", "1_000", "٥", "1.0", "1e3", "--1", "0x10"])
def test_anything_but_ascii_digits_and_one_sign_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        saturated_int(text)


# --- the three places, as a user types them --------------------------------------------------

HUGE = "9" * 5000
HUGE_NEGATIVE = "-" + "9" * 5000


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return two_l0_files(tmp_path / "store", NOW)


def _now_ms(store: Path, value: str) -> Result:
    return run_cli("--store", str(store), "--now-ms", value, "plan", "--json")


def _setting(store: Path, value: str) -> Result:
    return run_cli("--store", str(store), "plan", "--json", "--set", f"tombstone.buffer.ms={value}")


def _topic_config(store: Path, value: str) -> Result:
    return run_cli(
        "--store", str(store), "--now-ms", NOW, "topic", "create", "c", "--partitions", "1",
        "--config", "cleanup.policy=compact", "--config", f"delete.retention.ms={value}",
    )  # fmt: skip


PLACES = {
    "now-ms": (_now_ms, ExitCode.USAGE, "--now-ms must be below", "--now-ms must not be negative"),
    "setting": (
        _setting,
        ExitCode.CONFIG,
        "tombstone.buffer.ms must be at most 9223372036854775807",
        "tombstone.buffer.ms must be >= 0",
    ),
    "topic config": (
        _topic_config,
        ExitCode.CONFIG,
        "delete.retention.ms must be at most 9223372036854775807",
        "delete.retention.ms must be >= 0",
    ),
}


OUT_OF_RANGE = [
    ("9223372036854775808", 2),
    ("99999999999999999999", 2),
    (HUGE, 2),
    ("-9223372036854775809", 3),
    (HUGE_NEGATIVE, 3),
]


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize(("value", "words"), OUT_OF_RANGE, ids=[v[:24] for v, _ in OUT_OF_RANGE])
def test_a_value_past_the_64_bit_range_is_refused_in_one_short_line(
    store: Path, place: str, value: str, words: int
) -> None:
    """Too big is "at most" (below the clock's never), far negative is "negative" (below
    the least), however many digits: never "not a number", never a traceback."""
    command, code = PLACES[place][:2]
    before = tree(store)
    line = one_line(command(store, value), code, PLACES[place][words])
    assert len(line) < 200, line
    assert tree(store) == before


@pytest.mark.parametrize("place", PLACES)
def test_a_value_padded_with_thousands_of_zeros_is_its_value(store: Path, place: str) -> None:
    command = PLACES[place][0]
    r = command(store, "0" * 5000 + "1700000000000")
    assert r.code == 0, r


LARGEST = {"now-ms": str(INT64_MAX - 1), "setting": str(INT64_MAX), "topic config": str(INT64_MAX)}
"""The largest value each place takes: a clock stays below never; a setting and a topic's
``*.ms`` config reach Kafka's Long.MAX_VALUE."""


@pytest.mark.parametrize("place", PLACES)
def test_the_largest_value_each_place_takes_runs(store: Path, place: str) -> None:
    command, code, too_big = PLACES[place][:3]
    r = command(store, LARGEST[place])
    assert r.code == 0, r
    one_line(command(store, str(int(LARGEST[place]) + 1)), code, too_big.split(" 9")[0])


# --- every integer option of the command line ---------------------------------------------


def _integer_options() -> list[tuple[tuple[str, ...], str, Callable[[str], object]]]:
    """Each option of each command whose value is an integer: the command's words, the
    option, and its argparse type. Found from the parser, so an option added later is
    covered too: a type that reads "1" or "0" or a key buffer's least size as an int."""
    found = []

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
            elif action.type is not None and action.option_strings and _valid(action.type):
                found.append((path, action.option_strings[-1], action.type))

    walk(build_parser([]), ())
    return found


def _valid(kind: Callable[[str], object]) -> str | None:
    """A small value ``kind`` reads as an int, or None if it reads none (not an integer
    option)."""
    for text in ("1", "0", str(MIN_KEY_BUFFER_BYTES)):
        try:
            if type(kind(text)) is int:
                return text
        except (argparse.ArgumentTypeError, ValueError):
            continue
    return None


INTEGER_OPTIONS = _integer_options()


def test_the_integer_options_are_found() -> None:
    """The discovery above finds the options it is meant to (a test of the test)."""
    names = {(" ".join(path), option) for path, option, _ in INTEGER_OPTIONS}
    for expected in [
        ("history", "--limit"),
        ("dump", "--from-timestamp"),
        ("compact", "--grace-ms"),
        ("worker", "--visibility-timeout-s"),
        ("topic create", "--partitions"),
        ("replay", "--from-history"),
        ("spark compact", "--lease-ms"),
    ]:
        assert expected in names
    assert len(INTEGER_OPTIONS) >= 30


OPTION_IDS = [f"{' '.join(p)} {o}" for p, o, _ in INTEGER_OPTIONS]


@pytest.mark.parametrize(("path", "option", "kind"), INTEGER_OPTIONS, ids=OPTION_IDS)
@pytest.mark.parametrize(
    "value", ["9223372036854775808", HUGE, "-9223372036854775809", HUGE_NEGATIVE],
    ids=["2^63", "5000 digits", "-2^63-1", "-5000 digits"],
)  # fmt: skip
def test_an_integer_option_refuses_a_value_past_64_bits_in_one_short_line(
    tmp_path: Path, path: tuple[str, ...], option: str, kind: object, value: str
) -> None:
    """Refused where the command line is read, in the option's words: never read by
    ``int`` (which refuses 4,300 digits as "not an integer"), never handed on to what
    cannot hold it (``dump --from-timestamp`` with 23 negative digits was an
    OverflowError, exit 70, before)."""
    store = tmp_path / "store"
    line = one_line(
        run_cli("--store", str(store), *path, option, value), ExitCode.USAGE, f"argument {option}"
    )
    assert len(line) < 200, line
    if len(value) > 100:
        assert "(5001 characters)" in line or "(5000 characters)" in line, line
    assert not store.exists()


@pytest.mark.parametrize(("path", "option", "kind"), INTEGER_OPTIONS, ids=OPTION_IDS)
def test_an_integer_option_reads_a_value_padded_with_zeros_as_its_value(
    path: tuple[str, ...], option: str, kind: Callable[[str], object]
) -> None:
    text = _valid(kind)
    assert text is not None
    assert kind("0" * 5000 + text) == kind(text)
    assert kind(f" +{text} ") == kind(text)


def test_an_integer_option_takes_the_64_bit_range_and_no_more() -> None:
    """The ends of the range are values (an offset, a timestamp may be either end); one
    past is refused, with the value as the user wrote it."""
    assert integer(str(INT64_MAX)) == INT64_MAX
    assert integer(str(INT64_MIN)) == INT64_MIN
    assert non_negative_int(str(INT64_MAX)) == INT64_MAX
    with pytest.raises(
        argparse.ArgumentTypeError, match=r"at most 9223372036854775807 .*got 9223372036854775808$"
    ):
        integer(str(INT64_MAX + 1))
    with pytest.raises(
        argparse.ArgumentTypeError,
        match=r"at least -9223372036854775808, got -9223372036854775809$",
    ):
        integer(str(INT64_MIN - 1))
    with pytest.raises(argparse.ArgumentTypeError, match=r"must not be negative, got -1$"):
        non_negative_int("-1")
    with pytest.raises(argparse.ArgumentTypeError, match=r"must be at least 1, got 0$"):
        positive_int("0")


def test_a_value_that_is_no_integer_is_quoted_short() -> None:
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        integer("x" * 5000)
    assert len(str(refused.value)) < 100
    assert "(5000 characters)" in str(refused.value)


def test_the_clock_quotes_a_long_non_integer_short(store: Path) -> None:
    line = one_line(_now_ms(store, "x" * 5000), ExitCode.USAGE, "--now-ms must be an integer")
    assert len(line) < 200, line


def _integers(value: object) -> Iterator[int]:
    """Every integer in a decoded JSON document."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _integers(item)
    elif isinstance(value, list):
        for item in value:
            yield from _integers(item)


def test_the_longest_lease_saturates_and_the_catalog_stays_64_bit(
    store: Path, tmp_path: Path
) -> None:
    """``replay --execute --lease-ms 2^63 - 1`` (the longest the option takes) leases the
    job until never, ``MAX_MS``: its expiry was now + 2^63 - 1 before, written to the
    catalog's log past the range every catalog integer lies in (CATALOG.md §1)."""
    r = run_cli("--store", str(store), "--now-ms", NOW, "plan", "--json",
                "--set", "level.trigger.files=2")  # fmt: skip
    assert r.code == 0, r
    job = tmp_path / "job.json"
    job.write_text(json.dumps(json.loads(r.out)["jobs"][0]))
    r = run_cli("--store", str(store), "--now-ms", NOW, "replay", str(job), "--execute",
                "--lease-ms", str(INT64_MAX))  # fmt: skip
    assert r.code == 0, r
    seen = [
        n
        for p in (store / "_catalog").rglob("*.json")
        for n in _integers(json.loads(p.read_text()))
    ]
    assert INT64_MAX in seen  # the lease's expiry, saturated
    assert all(INT64_MIN <= n <= INT64_MAX for n in seen)


def test_a_lease_s_expiry_saturates_at_never() -> None:
    s = Snapshot(files=(LiveFile("a", "data/L0/a.cf", 0, 1, 0, ()),))
    leased = take_lease(s, "j", "me", ["a"], now_ms=1700000000000, ttl_ms=INT64_MAX)
    assert leased.leases["j"].expires_ms == INT64_MAX
    assert leased.leases["j"].active(INT64_MAX - 1)
    shorter = take_lease(s, "j", "me", ["a"], now_ms=10, ttl_ms=5)
    assert shorter.leases["j"].expires_ms == 15
