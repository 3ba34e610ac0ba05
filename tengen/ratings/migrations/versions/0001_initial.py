"""Players and rated games.

Revision ID: 0001
Revises:
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "ratings_players",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, unique=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("training_samples", sa.BigInteger(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("kind IN ('model', 'anchor', 'engine')", name="kind_known"),
    )
    op.create_table(
        "ratings_games",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("game_id", sa.String(200), nullable=False, unique=True),
        sa.Column("black_id", sa.Integer(), sa.ForeignKey("ratings_players.id"), nullable=False),
        sa.Column("white_id", sa.Integer(), sa.ForeignKey("ratings_players.id"), nullable=False),
        sa.Column("result", sa.String(8), nullable=False),
        sa.Column("source", sa.String(100), nullable=False),
        sa.Column("played_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("reported_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("result IN ('B', 'W', 'draw')", name="result_known"),
        sa.CheckConstraint("black_id <> white_id", name="two_players"),
    )
    op.create_index("ix_ratings_games_black_id", "ratings_games", ["black_id"])
    op.create_index("ix_ratings_games_white_id", "ratings_games", ["white_id"])


def downgrade() -> None:
    op.drop_table("ratings_games")
    op.drop_table("ratings_players")
