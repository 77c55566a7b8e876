"""Topic templates and the topic names Kafka accepts.

A template has one placeholder (`{aggregate_type}` for event topics, `{bridge_name}` for the dead-letter
topic) and no other field, format spec or conversion; it is checked by rendering an example, so a template
that could never give a legal topic name is refused when the configuration loads, not when an event is sent.
"""

from __future__ import annotations

import re
import string
from typing import Final

LEGAL_TOPIC_NAME: Final = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def is_legal_topic_name(name: str) -> bool:
    """Whether Kafka accepts name as a topic: 1 to 249 of `[a-zA-Z0-9._-]`, and not `.` or `..`."""
    return LEGAL_TOPIC_NAME.fullmatch(name) is not None and name not in (".", "..")


def render_template(template: str, placeholder: str, value: str) -> str:
    """Replace `{placeholder}` in template with value (templates are validated to have no other fields)."""
    return template.replace("{" + placeholder + "}", value)


def _template_fields(template: str) -> set[str]:
    fields = set()
    for _, field, spec, conversion in string.Formatter().parse(template):
        if field is None:
            continue
        if spec or conversion or not field:
            raise ValueError(
                f"placeholder {{{field}{'!' + conversion if conversion else ''}:{spec}}} is not allowed"
            )
        fields.add(field)
    return fields


def check_template(template: str, placeholder: str, example: str) -> str:
    """template, if it has no placeholder but `{placeholder}` and renders a legal topic name; ValueError otherwise."""
    try:
        fields = _template_fields(template)
    except ValueError as exc:  # unbalanced braces, format specs
        raise ValueError(f"not a valid template ({exc}); the only placeholder is {{{placeholder}}}") from None
    if fields - {placeholder}:
        unknown = ", ".join(sorted(f"{{{f}}}" for f in fields - {placeholder}))
        raise ValueError(f"unknown placeholder {unknown}; the only placeholder is {{{placeholder}}}")
    rendered = render_template(template, placeholder, example)
    if not is_legal_topic_name(rendered):
        raise ValueError(
            f"renders topic names such as {rendered!r}, which Kafka refuses: "
            "a topic name is 1 to 249 of [a-zA-Z0-9._-]"
        )
    return template


def topic_pattern(template: str, placeholder: str) -> re.Pattern[str]:
    """A regular expression matching every topic the template can render."""
    literal_parts = template.split("{" + placeholder + "}")
    return re.compile("[a-zA-Z0-9._-]+".join(re.escape(part) for part in literal_parts))
