"""What every recipe builds: config values by dotted key, why each is set, and lines for the config's head."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Recipe:
    """What a recipe sets: ``values`` by dotted key, ``notes`` (why) by the same keys, ``about`` for the head."""

    about: list[str]
    values: dict[str, Any] = field(default_factory=dict)
    notes: dict[str, str] = field(default_factory=dict)

    def set(self, key: str, value: Any, why: str | None = None) -> None:
        self.values[key] = value
        if why:
            self.notes[key] = why
