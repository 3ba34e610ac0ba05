"""Alembic revision files of the ratings store, one per schema change."""
