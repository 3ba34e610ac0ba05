"""Alembic migrations of the ratings store (run by tengen.ratings.store.migrate)."""
