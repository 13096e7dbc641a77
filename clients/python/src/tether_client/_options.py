"""What the application gives `connect()`, checked there and then: a URL
that cannot work, or a timeout that means nothing, is a ValueError at once
rather than a reconnect loop that never says why."""

from __future__ import annotations

import math
from urllib.parse import urlsplit, urlunsplit


def ws_url(raw: str) -> str:
    """`ws://HOST:PORT/ws` as given; `http(s)://HOST:PORT` (what `tether
    serve` prints) and a bare `HOST:PORT` mean its `/ws` route, and `:PORT`
    means 127.0.0.1, as it does for `tether serve --listen`."""
    url = raw.strip()
    if url.startswith(":") and url[1:].split("/", 1)[0].isdigit():
        url = "127.0.0.1" + url
    if "://" not in url:
        url = "ws://" + url
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.hostname:
        raise ValueError(f"not a gateway URL: {raw!r} (use ws://HOST:PORT/ws)")
    try:
        parts.port  # noqa: B018 - raises for a port that is not one
    except ValueError as err:
        raise ValueError(f"not a gateway URL: {raw!r} ({err}; use ws://HOST:PORT/ws)") from None
    if any(c.isspace() for c in parts.netloc):
        raise ValueError(f"not a gateway URL: {raw!r} (use ws://HOST:PORT/ws)")
    path = parts.path if parts.path not in ("", "/") else "/ws"
    return urlunsplit((scheme, parts.netloc, path, parts.query, ""))


def timeout_of(value: float | None) -> float | None:
    """`connect_timeout` as given: seconds > 0, or None / 0 / inf for no
    timeout at all."""
    if value is None or value == 0 or value == math.inf:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"connect_timeout must be a positive number of seconds (or None for none): {value!r}")
    return float(value)
