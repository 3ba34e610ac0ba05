# cython: language_level=3
"""Placeholder so the build has a module; replaced by the rules engine."""
