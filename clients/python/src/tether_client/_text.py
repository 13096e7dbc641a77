"""A turn's assistant text as it streams, placed by byte offset (PROTOCOL
1.5: a delta's `offset` is the UTF-8 length of the turn's text before it).

Deltas can arrive twice, overlapping (merged deltas), after a gap (a slow
peer's dropped frames), or not at all (a reconnect); the text can also come
whole, in a resume's `active_turn` or the turn's `message.complete`. Every
piece is reduced here to the bytes not held yet, so the pieces' consumer
gets each byte once and in order, and their concatenation is the text."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Delta:
    """A piece of a turn's text; `offset` is the UTF-8 length before it."""

    text: str
    offset: int

    def __str__(self) -> str:
        return self.text


class TurnText:
    def __init__(self) -> None:
        self.text = ""
        self.bytes = 0

    def delta(self, offset: object, text: object) -> Delta | None:
        """The new part of a delta, or None when it holds nothing new or
        starts beyond what is held (text after a gap cannot be placed; the
        whole text comes later and fills it)."""
        if not isinstance(offset, int) or not isinstance(text, str) or offset > self.bytes:
            return None
        raw = text.encode()
        end = offset + len(raw)
        if end <= self.bytes:
            return None
        # Both cuts are character boundaries of the turn's text.
        piece = text if offset == self.bytes else raw[self.bytes - offset :].decode()
        return self._append(piece, end)

    def rest(self, whole: object) -> Delta | None:
        """The part of the whole text not held yet, or None when nothing is
        new or the held text is not a prefix of it (the host's final text
        differs from what it streamed)."""
        if not isinstance(whole, str) or len(whole) <= len(self.text) or not whole.startswith(self.text):
            return None
        piece = whole[len(self.text) :]
        return self._append(piece, self.bytes + len(piece.encode()))

    def _append(self, piece: str, end: int) -> Delta:
        offset = self.bytes
        self.text += piece
        self.bytes = end
        return Delta(piece, offset)
