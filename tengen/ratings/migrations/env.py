"""Alembic environment of the ratings store; run through `tengen.ratings.store.migrate`.

The caller hands over an open connection (`config.attributes["connection"]`) so migrations run in
its transaction, against whatever schema its search_path names.
"""
from alembic import context

from tengen.ratings.store import VERSION_TABLE, Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("ratings migrations run through tengen.ratings.store.migrate(connection)")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    version_table=VERSION_TABLE,
    # SQLite cannot ALTER most things; batch mode rebuilds tables for later migrations.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
