"""What keeps one key's state bounded (SPEC R11.5), by rule settings: the length of free
text, the faults kept per pod, the generations kept per attempt. What is left out is
counted (`emit.dropped`); the byte bound on a whole value is `topology.apply`'s.

docs/rules.md (*Bounded state*) explains which faults are kept and why.
"""

from __future__ import annotations


from app.core.base.emit import Emit, dropped
from app.core.base.rules import Rules

TRUNCATED = "truncated_texts"


class Trim:
    """Cuts free text (messages, reasons, a fault's tokens) to the rule set's lengths,
    for one fold, counting every cut."""

    __slots__ = ("_tokens", "_messages", "cut")

    def __init__(self, rules: Rules) -> None:
        self._tokens, self._messages = rules.max_token_chars, rules.max_message_chars
        self.cut = 0

    @property
    def tokens(self) -> int:
        """How long a token may be."""
        return self._tokens

    def token(self, text: str) -> str:
        return text if len(text) <= self._tokens else self._shorten(text, self._tokens)

    def message(self, text: str) -> str:
        return text if len(text) <= self._messages else self._shorten(text, self._messages)

    def _shorten(self, text: str, limit: int) -> str:
        self.cut += 1
        return text[: limit - 1] + "…"

    def dropped(self) -> list[Emit]:
        return dropped(TRUNCATED, self.cut)
