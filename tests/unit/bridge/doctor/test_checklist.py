"""The doctor's checklist: a check that does not answer is cut off, failures decide the exit code, every
problem line carries its fix."""

from __future__ import annotations

import json
import threading
import time

import pytest

from bridge.doctor.checklist import Check, NoAnswer, Verdict, as_json, bounded, exit_code, render

pytestmark = pytest.mark.unit


def test_a_check_that_does_not_answer_is_given_up_on_in_time() -> None:
    release = threading.Event()
    started = time.monotonic()
    with pytest.raises(NoAnswer, match=r"no answer within 0\.2s"):
        bounded(lambda: [Check("x", Verdict.OK, "never")] if release.wait(30) else [], 0.2)
    assert time.monotonic() - started < 5
    release.set()


def test_a_check_that_raises_hands_its_error_to_the_caller() -> None:
    def broken() -> list[Check]:
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        bounded(broken, 5)


def test_only_failures_make_the_exit_code_non_zero() -> None:
    ok = Check("a", Verdict.OK, "fine")
    warned = Check("b", Verdict.WARNING, "hm", "do this")
    skipped = Check("c", Verdict.SKIPPED, "not checked")
    failed = Check("d", Verdict.FAILED, "broken", "fix it")
    assert exit_code([ok, warned, skipped]) == 0
    assert exit_code([ok, failed]) == 1
    assert json.loads(as_json([ok, failed])) == {
        "ok": False,
        "checks": [{"name": "a", "verdict": "ok", "summary": "fine", "fix": None},
                   {"name": "d", "verdict": "failed", "summary": "broken", "fix": "fix it"}],
    }


def test_the_rendered_checklist_puts_the_fix_under_each_problem() -> None:
    text = render([Check("database", Verdict.OK, "reachable", "unused"),
                   Check("kafka", Verdict.FAILED, "unreachable", "make up")], "doctor")
    lines = text.splitlines()
    assert lines[1].split() == ["ok", "database", "reachable"]
    assert lines[2].split()[:2] == ["FAIL", "kafka"] and lines[3].strip() == "fix: make up"
    assert "unused" not in text
    assert lines[-1] == "1 failed, 0 warning(s), 1 ok"
