"""Alembic environment of the annotation database: runs on the engine `cheems.annotate.db.migrate`
passes in (no alembic.ini, no URL in a file)."""

from alembic import context

from cheems.annotate.db import Base

__all__: list[str] = []

engine = context.config.attributes["engine"]
with engine.connect() as connection:
    context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()
    connection.commit()
