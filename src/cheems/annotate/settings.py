"""The settings of the annotation server, declared once: the flags of `cheems annotate serve`.

:class:`WorkflowSettings` are the knobs of the protocol (agreement, review, hand-out);
:class:`ServerSettings` where and how the web app listens; :class:`DatabaseSettings` the database
and study every `cheems annotate` command works on. Both are checked when built
(:func:`cheems.settings.check_settings`), whoever builds them. The standard library and the core
package only: the CLI builds its flags from these classes without the ``[annotate]`` extra installed.
"""

from __future__ import annotations

from dataclasses import dataclass

from cheems.common_settings import ListenSettings
from cheems.settings import check_settings, setting

__all__ = ["DatabaseSettings", "ServerSettings", "WorkflowSettings"]


@dataclass(frozen=True)
class DatabaseSettings:
    """Which database, and which study in it, a command works on."""

    db: str | None = setting(None, nonempty=True, default_text="$CHEEMS_ANNOTATE_DB, else sqlite:///annotations.db",
                             help="SQLAlchemy URL of the database")
    study: str = setting("default", nonempty=True, help="The study (project) in the database to work on")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class WorkflowSettings:
    """The knobs of the protocol."""

    agreement_bar: float = setting(0.9, min=0, max=1, help="Pairs of annotators whose agreement over recent "
                                   "shared tasks is below this align their disagreements")
    agreement_window: int = setting(20, min=1, help="Their most recent shared tasks that count for agreement")
    alignment_min_shared: int = setting(10, min=1, help="Tasks a pair of annotators must share before their "
                                        "agreement can send disagreements to alignment")
    review_rate: float = setting(0.3, min=0, max=1, help="Share sampled at each review stage")
    review_stages: int = setting(2, min=0, help="Cascading review stages")
    claim_timeout_s: float = setting(1800.0, gt=0, help="Seconds before an abandoned task is handed to someone else")
    seed: int = setting(0, min=0, help="Seed of shown orders and review samples")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclass(frozen=True)
class ServerSettings(ListenSettings):
    """Where the web app listens (``host``, ``port``: :class:`~cheems.common_settings.ListenSettings`',
    as the reward server's), and how it marks its cookie."""

    secure_cookies: bool = setting(False, help="Mark the cookie Secure (HTTPS)")

    def __post_init__(self) -> None:
        check_settings(self)
