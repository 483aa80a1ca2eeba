"""Observers the engine tests attach beside the search's own."""

from __future__ import annotations


class Counting:
    """Counts the attempts and the rows fired that the engine tells it."""

    def __init__(self) -> None:
        self.attempts = 0
        self.rows = 0

    def attempted(self, lifecycle: object, trigger: str, record: object, inputs: object) -> None:
        self.attempts += 1

    def fired(self, lifecycle: object, row: object, before: object, after: object) -> None:
        self.rows += 1
