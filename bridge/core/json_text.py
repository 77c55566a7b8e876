"""One verdict on JSON text, for the writer and the bridge alike.

The writer refuses what this module refuses, and the bridge publishes what it accepts: a row the
Python writer accepted can never halt the bridge, and a row written by plain SQL is judged by the
same rule. The rule is orjson's, which is stricter than RFC 8259 where interoperability needs it
(the I-JSON profile, RFC 7493): no `NaN` or `Infinity`, no number that overflows a double (`1e400`),
no lone surrogate escape (`"\\ud800"`), no byte order mark, at most 1024 levels of nesting. A
consumer in another language (Jackson, serde_json, Go) reads every text this accepts the same way.
It is also several times faster than `json`, on the bridge's per-event path.
"""

from __future__ import annotations

from typing import Any

import orjson


class NotJsonError(ValueError):
    """The text is not JSON as this project accepts it; the message says where and why."""


def parse_json(text: str | bytes) -> Any:
    """The value of JSON `text`, or NotJsonError saying why the text is refused."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise NotJsonError(str(exc)) from None

