"""studies: several projects in one database

Revision ID: 0002
Revises: 0001

Adds ``studies`` and ``memberships``; prompts are keyed ``(study_id, id)``, tasks and review
items carry their study, and each user's role and categories move into a membership. Every row
already there goes to the study ``default``, with the default workflow settings. There is no way
back: a database of several studies has no one-project form.
"""

import warnings
from dataclasses import asdict

import sqlalchemy as sa
from alembic import op

from cheems.annotate.settings import WorkflowSettings

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None

NAMING = {"fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s", "pk": "pk_%(table_name)s"}


def _study_column(default_id: int) -> sa.Column:
    return sa.Column('study_id', sa.Integer(), nullable=False, server_default=str(default_id))


def upgrade() -> None:
    studies = op.create_table('studies',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=100), nullable=False),
    sa.Column('settings', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('name')
    )
    op.create_table('memberships',
    sa.Column('study_id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.Integer(), nullable=False),
    sa.Column('role', sa.String(length=20), nullable=False),
    sa.Column('categories', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['study_id'], ['studies.id'], ),
    sa.ForeignKeyConstraint(['user_id'], ['users.id'], ),
    sa.PrimaryKeyConstraint('study_id', 'user_id')
    )
    bind = op.get_bind()
    bind.execute(studies.insert().values(name='default', settings=asdict(WorkflowSettings()),
                                         created_at=sa.func.current_timestamp()))
    default_id = bind.execute(sa.text("SELECT id FROM studies WHERE name = 'default'")).scalar_one()
    bind.execute(sa.text("INSERT INTO memberships (study_id, user_id, role, categories) "
                         "SELECT :study, id, role, categories FROM users"), {"study": default_id})
    sqlite = bind.dialect.name == 'sqlite'

    with op.batch_alter_table('tasks', naming_convention=NAMING) as batch_op:
        batch_op.add_column(_study_column(default_id))
        batch_op.drop_constraint('fk_tasks_prompt_id_prompts' if sqlite else 'tasks_prompt_id_fkey',
                                 type_='foreignkey')
        batch_op.drop_index('ix_tasks_queue')
    with op.batch_alter_table('prompts', naming_convention=NAMING) as batch_op:
        batch_op.add_column(_study_column(default_id))
    with warnings.catch_warnings():  # SQLite's copy is told of the wider key after its columns: as meant
        warnings.filterwarnings("ignore", message=".*_alembic_tmp_prompts.*primary", category=sa.exc.SAWarning)
        with op.batch_alter_table('prompts', naming_convention=NAMING) as batch_op:
            if not sqlite:
                batch_op.drop_constraint('prompts_pkey', type_='primary')
            batch_op.create_primary_key('pk_prompts', ['study_id', 'id'])
            batch_op.create_foreign_key('fk_prompts_study_id_studies', 'studies', ['study_id'], ['id'])
            batch_op.alter_column('study_id', server_default=None)
    with op.batch_alter_table('tasks', naming_convention=NAMING) as batch_op:
        batch_op.create_foreign_key('fk_tasks_prompt', 'prompts', ['study_id', 'prompt_id'], ['study_id', 'id'])
        batch_op.create_foreign_key('fk_tasks_study_id_studies', 'studies', ['study_id'], ['id'])
        batch_op.create_index('ix_tasks_study_queue', ['study_id', 'state', 'queue_key'], unique=False)
        batch_op.alter_column('study_id', server_default=None)
    with op.batch_alter_table('review_items', naming_convention=NAMING) as batch_op:
        batch_op.add_column(_study_column(default_id))
    with op.batch_alter_table('review_items', naming_convention=NAMING) as batch_op:
        batch_op.create_foreign_key('fk_review_items_study_id_studies', 'studies', ['study_id'], ['id'])
        batch_op.create_index('ix_review_items_study_queue', ['study_id', 'stage', 'queue_key'], unique=False)
        batch_op.alter_column('study_id', server_default=None)
    with op.batch_alter_table('users', naming_convention=NAMING) as batch_op:
        batch_op.drop_column('role')
        batch_op.drop_column('categories')


def downgrade() -> None:
    raise NotImplementedError("0002_studies cannot be undone: a database of several studies has no "
                              "one-project form")
