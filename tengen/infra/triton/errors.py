"""Triton's errors, shared by the repository, server and client modules."""
from __future__ import annotations


class TritonError(RuntimeError):
    """Triton could not be started, reached, or asked to do something."""


class UnknownModelError(TritonError, LookupError):
    """The model (or model version) is not in the repository or not loaded."""

