"""Exceptions raised by the delegate package."""

from __future__ import annotations


class DelegateError(Exception):
    """Base class of every error this package raises on purpose."""


class ContextFormatError(DelegateError, ValueError):
    """An InferenceContext file (or buffer) is not valid, or is over a resource limit.

    ``offset`` is the byte offset where the problem was found, ``kind`` one of
    ``"format"`` (the bytes are not a valid InferenceContext), ``"limit"`` (valid
    so far but over a limit of :class:`delegate.ReadLimits`) or ``"memory"``.
    """

    def __init__(
        self, message: str, *, offset: int = 0, kind: str = "format", source: str = "<buffer>"
    ) -> None:
        self.detail = message
        self.offset = offset
        self.kind = kind
        self.source = source
        super().__init__(f"{source}: {message} (byte offset {offset})")


class SettingsError(DelegateError, ValueError):
    """Acceleration settings that cannot be parsed or are not valid."""
