"""`append` records the active span's W3C trace context in each event's headers, unless the event has its own;
without a span (or without OpenTelemetry) the rows are what they always were."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from opentelemetry.sdk.trace import TracerProvider
from sqlalchemy import create_engine, select

from bridge.migrate import upgrade
from bridge.schema import domain_events
from bridge.writer import OutboxEvent, append

pytestmark = pytest.mark.unit

OWN = "00-11111111111111111111111111111111-2222222222222222-01"


def _event(event_id: str, headers: dict[str, str] | None = None) -> OutboxEvent:
    return OutboxEvent(event_id=event_id, aggregate_type="order", aggregate_id="o-1", event_type="OrderPlaced",
                       payload={"n": 1}, headers=headers)


def _headers(url: str) -> dict[str, dict[str, str] | None]:
    engine = create_engine(url)
    with engine.connect() as conn:
        rows = conn.execute(select(domain_events.c.event_id, domain_events.c.headers)).all()
    engine.dispose()
    return {event_id: None if headers is None else json.loads(headers) for event_id, headers in rows}


@pytest.fixture()
def outbox(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'outbox.db'}"
    upgrade(url)
    return url


def test_events_appended_in_a_span_carry_its_trace_context_unless_they_have_their_own(outbox: str) -> None:
    tracer = TracerProvider().get_tracer("app")
    engine = create_engine(outbox)
    with tracer.start_as_current_span("POST /orders") as span, engine.begin() as conn:
        context = span.get_span_context()
        append(conn, [_event("bare"), _event("tagged", {"tenant": "t-1"}),
                      _event("own", {"traceparent": OWN, "tenant": "t-2"})])
    engine.dispose()
    ours = f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"
    assert _headers(outbox) == {
        "bare": {"traceparent": ours},
        "tagged": {"tenant": "t-1", "traceparent": ours},
        "own": {"traceparent": OWN, "tenant": "t-2"},  # a writer's own context is kept as given
    }


def test_without_a_span_nothing_is_added(outbox: str) -> None:
    engine = create_engine(outbox)
    with engine.begin() as conn:
        append(conn, [_event("bare"), _event("tagged", {"tenant": "t-1"})])
    engine.dispose()
    assert _headers(outbox) == {"bare": None, "tagged": {"tenant": "t-1"}}


def test_an_application_without_opentelemetry_appends_without_importing_it(outbox: str) -> None:
    code = (
        "import sys\n"
        "from sqlalchemy import create_engine\n"
        "from bridge.writer import OutboxEvent, append\n"
        f"engine = create_engine({outbox!r})\n"
        "with engine.begin() as conn:\n"
        "    append(conn, [OutboxEvent(aggregate_type='order', aggregate_id='o', event_type='E', payload={})])\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
    assert list(_headers(outbox).values()) == [None]
