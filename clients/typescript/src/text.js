// A turn's assistant text as it streams, placed by byte offset (PROTOCOL
// 1.5: a delta's `offset` is the UTF-8 length of the turn's text before it).
//
// Deltas can arrive twice (a resume of a peer that was already attached),
// overlapping (merged deltas), after a gap (a slow peer's dropped frames), or
// not at all (a reconnect); the text can also come whole, in a resume's
// `active_turn` or the turn's `message.complete`. Every piece is reduced here
// to the bytes not held yet, so whoever consumes the pieces gets each byte
// once and in order, and their concatenation is the turn's text.

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function byteLength(text) {
  return encoder.encode(text).length;
}

export class TurnText {
  constructor() {
    this.text = "";
    this.bytes = 0;
  }

  // The new part of a delta as `{ offset, text }`, or null when it holds
  // nothing new, or starts beyond what is held (text after a gap cannot be
  // placed; the whole text comes later and fills it).
  delta(offset, text) {
    if (typeof offset !== "number" || typeof text !== "string" || offset > this.bytes) {
      return null;
    }
    const bytes = encoder.encode(text);
    const end = offset + bytes.length;
    if (end <= this.bytes) {
      return null;
    }
    // Both boundaries are character boundaries of the turn's text, so the
    // cut never splits a character.
    const piece = offset === this.bytes ? text : decoder.decode(bytes.subarray(this.bytes - offset));
    return this.append(piece, end);
  }

  // The part of the whole text not held yet, or null when nothing is new or
  // the held text is not a prefix of it (the host's final text differs from
  // what it streamed; the whole text is then only in `message.complete`).
  rest(whole) {
    if (typeof whole !== "string" || whole.length <= this.text.length || !whole.startsWith(this.text)) {
      return null;
    }
    const piece = whole.slice(this.text.length);
    return this.append(piece, this.bytes + byteLength(piece));
  }

  append(piece, end) {
    const offset = this.bytes;
    this.text += piece;
    this.bytes = end;
    return { offset, text: piece };
  }
}
