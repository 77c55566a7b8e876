"""The declared projections: the examples plus any module named in PROJECTIONS_MODULES.

A module contributes projections by exposing `PROJECTIONS`, an iterable of `Projection`. Names must be
unique across modules: a name is a table directory, a checkpoint and a metrics label.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from projections.declaration import Projection
from projections.errors import DeclarationError, UnknownProjectionError

DEFAULT_MODULES: Final = ("projections.examples",)


@dataclass(frozen=True)
class Catalog:
    """Projections by name, with the module that declared each."""

    projections: Mapping[str, Projection]
    origins: Mapping[str, str]

    def get(self, name: str) -> Projection:
        try:
            return self.projections[name]
        except KeyError:
            known = ", ".join(sorted(self.projections)) or "none"
            raise UnknownProjectionError(
                f"no projection named {name!r} (known: {known}); declare it in a module listed in "
                "PROJECTIONS_MODULES or --module"
            ) from None

    def names(self) -> list[str]:
        return sorted(self.projections)


def load_catalog(modules: Iterable[str] = ()) -> Catalog:
    """Import the example module and the given ones, and collect their `PROJECTIONS`."""
    projections: dict[str, Projection] = {}
    origins: dict[str, str] = {}
    for module_name in dict.fromkeys([*DEFAULT_MODULES, *modules]):
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise DeclarationError(f"cannot import projection module {module_name!r}: {exc}") from exc
        declared = getattr(module, "PROJECTIONS", None)
        if declared is None:
            raise DeclarationError(f"module {module_name} has no PROJECTIONS (an iterable of Projection)")
        for projection in declared:
            if not isinstance(projection, Projection):
                raise DeclarationError(f"{module_name}.PROJECTIONS holds {projection!r}, not a Projection")
            if projection.name in projections:
                raise DeclarationError(
                    f"projection {projection.name!r} is declared in both {origins[projection.name]} "
                    f"and {module_name}"
                )
            projections[projection.name] = projection
            origins[projection.name] = module_name
    return Catalog(projections, origins)


def list_command(catalog: Catalog, topic_template: str, json_output: bool) -> int:
    """`outbox-projections list [--json]`: each projection's kind, source, event types and description."""
    rows = []
    for name in catalog.names():
        projection = catalog.get(name)
        option, topics = projection.source_option(topic_template)
        rows.append(
            {
                "name": name,
                "kind": projection.kind.name,
                "key": projection.key,
                option: topics,
                "event_types": sorted(projection.event_types) or ["*"],
                "module": catalog.origins[name],
                "description": projection.description,
            }
        )
    if json_output:
        print(json.dumps(rows, indent=2))
        return 0
    for row in rows:
        source = row.get("subscribe") or row.get("subscribePattern")
        print(f"{row['name']:<28} {row['kind']:<16} {source:<32} {', '.join(row['event_types'])}")
        if row["description"]:
            print(f"{'':<28} {row['description']}")
    return 0
