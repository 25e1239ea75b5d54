"""Alembic environment of the annotation database: runs on the engine `cheems.annotate.db.migrate`
passes in (no alembic.ini, no URL in a file). On SQLite, foreign keys are off while the schema
changes (batch mode copies tables that others refer to) and on again afterwards."""

from alembic import context

from cheems.annotate.db import Base

__all__: list[str] = []

engine = context.config.attributes["engine"]
with engine.connect() as connection:
    sqlite = connection.dialect.name == "sqlite"
    if sqlite:  # outside any transaction, where SQLite honours it
        connection.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
    try:
        context.configure(connection=connection, target_metadata=Base.metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()
    finally:
        if sqlite:
            connection.connection.driver_connection.execute("PRAGMA foreign_keys=ON")
