"""A token provider keeps a signed-in user connected (docs/CLIENTS.md,
"Tokens that expire"): a 5-second JWT refreshed on every
`gateway.token_expiring` keeps one connection for a minute with prompts
answered; a provider that cannot give a new token after an expiry is asked
once and the object closes with AuthError; a gateway restart is
reconnected with a fresh token from the provider."""

import asyncio
import base64
import hashlib
import hmac
import json
import os
import tempfile
import time

import pytest

import tether_client
from tether_client import AuthError, Backoff

from conftest import TETHER_BIN, free_port, next_state

SECRET = os.urandom(24).hex()
FAST = Backoff(initial=0.05, maximum=0.5)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def mint(sub: str, ttl_s: int) -> str:
    """An HS256 JWT of `sub` ending `ttl_s` seconds from now."""
    now = int(time.time())
    head = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64url(json.dumps({"sub": sub, "iat": now, "exp": now + ttl_s}).encode())
    mac = hmac.new(SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url(mac)}"


@pytest.fixture
def gateway(start_gateway):
    secret = os.path.join(tempfile.mkdtemp(prefix="tether-py-secret-"), "secret")
    with open(secret, "w") as f:
        f.write(SECRET)
    return start_gateway(
        "--jwt-secret-file", secret, "--jwt-leeway-s", "0", "--token-expiring-s", "3",
        "--host-command", f"{TETHER_BIN} host --engine echo",
        port=free_port(),
    )


async def test_a_5_second_token_refreshed_by_the_provider_keeps_one_connection(gateway):
    asked = 0

    async def provider() -> str:
        nonlocal asked
        asked += 1
        return mint("alice", 5)

    opens, drops, refreshed = [], [], []
    async with tether_client.connect(gateway.url, token=provider) as gw:
        gw.on("open", opens.append)
        gw.on("reconnecting", drops.append)
        gw.on("token_refreshed", refreshed.append)
        s = await gw.create_session(title="kept")
        end = time.monotonic() + 60
        n = 0
        while time.monotonic() < end:
            r = await (await s.submit(f"prompt {n}")).result()
            assert (r["status"], r["text"]) == ("complete", f"prompt {n}")
            n += 1
            await asyncio.sleep(0.5)
        assert drops == []
        assert len(opens) <= 1  # the first open may come before the listener
        assert len(refreshed) >= 10
        assert asked == len(refreshed) + 1


async def test_an_expired_token_whose_provider_fails_is_asked_once(gateway):
    asked = 0

    async def provider() -> str:
        nonlocal asked
        asked += 1
        if asked > 1:
            raise RuntimeError("the backend is down")
        return mint("alice", 2)

    gw = tether_client.connect(gateway.url, token=provider)
    # Asked at the refusal: once, whatever the warnings before it asked.
    at_refusal: list[int] = []
    gw.on("reconnecting", lambda _: at_refusal.append(asked))
    try:
        await gw
        closed = await next_state(gw, "closed")
        change = await asyncio.wait_for(closed, 30)
        assert isinstance(change["error"], AuthError)
        assert change["error"].status == "provider"
        assert len(at_refusal) == 1, at_refusal
        assert asked == at_refusal[0] + 1
        with pytest.raises(AuthError):
            await gw.call("gateway.ping", {})
    finally:
        await gw.close()
    # A provider giving the same expired token: asked once more, then the end.
    stale = mint("alice", 1)
    await asyncio.sleep(2.1)
    stale_asked = 0

    def same() -> str:
        nonlocal stale_asked
        stale_asked += 1
        return stale

    again = tether_client.connect(gateway.url, token=same)
    closed = await next_state(again, "closed")
    again.start()
    change = await asyncio.wait_for(closed, 30)
    assert change["error"].status == 401
    assert stale_asked == 2
    await again.close()


async def test_a_fixed_token_that_expires_closes_with_auth_error_4401(gateway):
    gw = tether_client.connect(gateway.url, token=mint("alice", 2))
    states = []
    gw.on("state", lambda c: states.append(c["state"]))
    try:
        await gw
        change = await asyncio.wait_for(await next_state(gw, "closed"), 30)
        assert change["error"].status == 4401
        assert "reconnecting" not in states, states
    finally:
        await gw.close()


async def test_after_a_restart_the_provider_gives_the_new_connections_token(gateway):
    asked = 0

    async def provider() -> str:
        nonlocal asked
        asked += 1
        return mint("alice", 4)

    async with tether_client.connect(gateway.url, token=provider, backoff=FAST) as gw:
        s = await gw.create_session(title="restart")
        reopened = await next_state(gw, "open")
        gateway.kill9()
        # The first token is over before the gateway is back.
        await asyncio.sleep(4.5)
        gateway.spawn()
        await asyncio.wait_for(reopened, 30)
        assert asked >= 2
        r = await (await s.submit("after the restart")).result()
        assert r["text"] == "after the restart"
