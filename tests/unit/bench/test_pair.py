"""`python -m bench.pair`: paired drains of this checkout's bridge against another commit's. The drains need the
stack; what is judged from them, and what the command refuses before it starts anything, is checked here."""

from __future__ import annotations

import pytest

from bench.pair import SIDES, main, order, paired, parse_settings


def test_the_difference_is_taken_round_by_round_not_between_the_medians() -> None:
    # A slow spell of the machine in round 2 slows both sides; the pairs still show head ahead in every round.
    verdict = paired(base=[80_000, 60_000, 79_000], head=[84_000, 63_000, 83_000])
    assert verdict["difference_median"] == 4_000
    assert verdict["difference_range"] == [3_000, 4_000]
    assert verdict["head_ahead"] == 3
    assert verdict["rounds"] == 3
    assert verdict["base_median"] == 79_000
    assert verdict["head_median"] == 83_000
    assert verdict["relative_median"] == pytest.approx(0.05)


def test_rounds_without_a_partner_are_refused() -> None:
    with pytest.raises(ValueError, match="as many rates on each side, got 2 and 1"):
        paired([1.0, 2.0], [1.0])


def test_the_side_that_drains_first_alternates() -> None:
    assert [order(i) for i in range(4)] == [SIDES, SIDES[::-1], SIDES, SIDES[::-1]]


def test_settings_must_be_bridge_settings() -> None:
    assert parse_settings(["BRIDGE_LINGER_MS=0", "BRIDGE_READ_BATCH_SIZE=5000"]) == {
        "BRIDGE_LINGER_MS": "0", "BRIDGE_READ_BATCH_SIZE": "5000"}
    with pytest.raises(SystemExit, match="give a bridge setting as BRIDGE_NAME=value"):
        parse_settings(["linger=0"])


@pytest.mark.parametrize("args", [["--events", "1000"], ["--rounds", "1"]])
def test_runs_too_short_to_say_anything_are_refused_before_anything_starts(args: list[str]) -> None:
    with pytest.raises(SystemExit, match="--events must be at least 10000 and --rounds at least 2"):
        main(["--base", "HEAD", *args])


def test_a_base_that_names_no_commit_is_refused_before_anything_starts() -> None:
    with pytest.raises(SystemExit, match="--base 'no-such-branch-xyz' names no commit of this repository"):
        main(["--base", "no-such-branch-xyz"])
