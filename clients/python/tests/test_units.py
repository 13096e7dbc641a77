"""The pure parts: byte offsets, backoff, URLs."""

import pytest

from tether_client import Backoff, Delta, ws_url
from tether_client._text import TurnText


def test_deltas_are_placed_by_byte_offset():
    t = TurnText()
    assert t.delta(0, "hello ") == Delta("hello ", 0)
    assert t.delta(0, "hello ") is None, "a replayed delta adds nothing"
    assert t.delta(3, "lo wor") == Delta("wor", 6), "an overlap adds its new part"
    assert t.delta(20, "zz") is None, "a delta after a gap waits for the whole text"
    assert t.rest("hello world") == Delta("ld", 9)
    assert t.rest("hello world") is None
    assert t.rest("something else") is None


def test_offsets_count_utf8_bytes_and_never_split_a_character():
    t = TurnText()
    assert t.delta(0, "é") == Delta("é", 0)
    assert t.delta(2, "ü!") == Delta("ü!", 2)
    assert t.delta(4, "!ä") == Delta("ä", 5)
    assert t.delta(7, "🎉") == Delta("🎉", 7)
    assert t.bytes == 11
    assert t.rest("éü!ä🎉 ok") == Delta(" ok", 11)


def test_backoff_doubles_to_its_cap_with_equal_jitter():
    b = Backoff(initial=0.1, maximum=1.0)
    assert b.delay(0, lambda: 0) == pytest.approx(0.05)
    assert b.delay(0, lambda: 1) == pytest.approx(0.1)
    assert b.delay(2, lambda: 1) == pytest.approx(0.4)
    assert b.delay(10, lambda: 1) == pytest.approx(1.0)
    assert b.delay(1000, lambda: 0) == pytest.approx(0.5)
    assert all(0.05 <= b.delay(i % 8) <= 1.0 for i in range(100))


def test_gateway_urls():
    assert ws_url("ws://127.0.0.1:7878/ws") == "ws://127.0.0.1:7878/ws"
    assert ws_url("http://127.0.0.1:9000") == "ws://127.0.0.1:9000/ws"
    assert ws_url("https://example.org/") == "wss://example.org/ws"
    assert ws_url("localhost:1") == "ws://localhost:1/ws"
    assert ws_url("ws://h:1/ws?token=x") == "ws://h:1/ws?token=x"
    with pytest.raises(ValueError):
        ws_url("ftp://h")
