"""Decoding the gateway's frames so that no JSON it may send can break the
library or the application: however deeply a value is nested (a compute
host's tool arguments 200,000 levels deep, stored before the gateway
bounded them), what comes out is nested at most MAX_DEPTH levels.

Python's `json` raises RecursionError past about 1,000 levels, and code
that walks a decoded value (`repr`, `json.dumps`, `==`) fails well before
that. So a value deeper than MAX_DEPTH (counting from the frame itself) is
replaced by the string TOO_DEEP, and the frame is otherwise kept whole:
its event keeps its seq and is delivered, its answer resolves its request.
The gateway's own limit for what it accepts is 64 levels, far below."""

from __future__ import annotations

import json
import re
from typing import Any

MAX_DEPTH = 256
TOO_DEEP = f"(nested deeper than {MAX_DEPTH} levels; left out by tether-client)"

# Strings (skipped whole, whatever brackets they hold) and brackets.
_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def decode_frame(text: str) -> tuple[Any, bool]:
    """The frame, and whether something in it was replaced. Raises
    ValueError for what is not JSON at all."""
    try:
        value = json.loads(text)
    except RecursionError:
        # Cut the text first, then decode what is left.
        return json.loads(cut_text(text)), True
    # Nesting deeper than MAX_DEPTH takes at least 2 * MAX_DEPTH characters.
    return value, len(text) > 2 * MAX_DEPTH and cut_value(value)


def cut_value(top: Any) -> bool:
    """Replaces, in place, every list or dict nested deeper than MAX_DEPTH
    (the top value being level 1) by TOO_DEEP; whether it found one.
    Iterative, so that the depth of what it walks is no concern."""
    if not isinstance(top, (dict, list)):
        return False
    cut = False
    stack: list[tuple[Any, int]] = [(top, 1)]
    while stack:
        node, depth = stack.pop()
        keys = range(len(node)) if isinstance(node, list) else list(node)
        for k in keys:
            child = node[k]
            if not isinstance(child, (dict, list)):
                continue
            if depth >= MAX_DEPTH:
                node[k] = TOO_DEEP
                cut = True
            else:
                stack.append((child, depth + 1))
    return cut


def cut_text(text: str) -> str:
    """The same cut on the text, for what `json` cannot decode: every list
    or dict that opens deeper than MAX_DEPTH is replaced, through its
    matching close, by TOO_DEEP as a JSON string."""
    out: list[str] = []
    depth = 0
    last = 0
    start = -1
    for m in _TOKENS.finditer(text):
        c = m.group()
        if c in ("[", "{"):
            depth += 1
            if depth == MAX_DEPTH + 1:
                start = m.start()
        elif c in ("]", "}"):
            if depth == MAX_DEPTH + 1 and start >= 0:
                out.append(text[last:start])
                out.append(json.dumps(TOO_DEEP))
                last = m.end()
                start = -1
            depth -= 1
    out.append(text[last:])
    return "".join(out)
