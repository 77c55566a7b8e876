"""The projections' exceptions, under the project's root `OutboxError`."""

from __future__ import annotations

from bridge.errors import ConfigurationError, OutboxError


class ProjectionError(OutboxError):
    """A projection could not be declared, started or applied."""


class DeclarationError(ProjectionError, ConfigurationError):
    """A projection's declaration is inconsistent; the message names the projection and the field."""


class UnknownProjectionError(ProjectionError):
    """No projection of that name is declared in the loaded modules."""


class FoldError(ProjectionError):
    """A fold function returned something that does not fit the declared state schema."""


class RefusedError(ProjectionError):
    """A command was refused before it changed anything; the message says what to do instead."""
