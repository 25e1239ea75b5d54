"""What reading files gives: the prompts, the rows skipped with their errors, and where and as
which format each prompt was read."""

from __future__ import annotations

from dataclasses import dataclass, field

from cheems.records import CheemsInputError, Prompt

__all__ = ["ReadResult"]


@dataclass
class ReadResult:
    prompts: list[Prompt]
    errors: list[CheemsInputError] = field(default_factory=list)  # rows skipped
    lines: list[int] = field(default_factory=list)  # where each prompt was read (line or item)
    files: list[str] = field(default_factory=list)  # and from which file (read_many)
    formats: list[str] = field(default_factory=list)  # and as which format (detected, or the one forced)

    def locations(self) -> list[tuple[str, int]]:
        return list(zip(self.files, self.lines))
