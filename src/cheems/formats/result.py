"""What reading files gives: the prompts, the rows skipped with their errors, where and as
which format each prompt was read, and the questions whose scored rows word them differently."""

from __future__ import annotations

from dataclasses import dataclass, field

from cheems.records import CheemsInputError, Prompt

__all__ = ["ReadResult", "RewordedQuestions"]

SHOWN_IDS = 3
"""How many question ids :meth:`RewordedQuestions.note` names."""


@dataclass
class RewordedQuestions:
    """The questions whose scored rows word them differently, joined all the same under their
    question id, the first wording kept (:func:`~cheems.formats.join.join_scored_rows`): in
    LLMEval-2 some models were shown a slightly different wording of a question than the others.
    ``ids``: the question ids, in the order their first differently worded row was read;
    ``first``: that first row's (file, line), None when the rows were joined without locations."""

    ids: list[str] = field(default_factory=list)
    first: tuple[str, int] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, other: RewordedQuestions) -> None:
        """Count ``other``'s questions too (those of another read), in place."""
        if self.first is None:
            self.first = other.first
        self.ids += other.ids

    def note(self) -> str:
        """One line saying how many questions, where the first is and the first few ids."""
        shown = ", ".join(map(repr, self.ids[:SHOWN_IDS])) + (", ..." if len(self.ids) > SHOWN_IDS else "")
        where = f"the first at {self.first[0]}:{self.first[1]}, " if self.first else ""
        ids = "question id" if len(self.ids) == 1 else "question ids"
        return (f"{len(self.ids)} question(s) are worded differently in some of their scored rows ({where}{ids} "
                f"{shown}); each is one prompt under its question id, worded as in its first row")


@dataclass
class ReadResult:
    prompts: list[Prompt]
    errors: list[CheemsInputError] = field(default_factory=list)  # rows skipped
    lines: list[int] = field(default_factory=list)  # where each prompt was read (line or item)
    files: list[str] = field(default_factory=list)  # and from which file (read_many)
    formats: list[str] = field(default_factory=list)  # and as which format (detected, or the one forced)
    reworded: RewordedQuestions = field(default_factory=RewordedQuestions)  # scored rows joined across wordings

    def locations(self) -> list[tuple[str, int]]:
        return list(zip(self.files, self.lines))
