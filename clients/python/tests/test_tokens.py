"""Tokens (PROTOCOL 1.1): a token picks the profile, another profile's
sessions are invisible, and a refused token closes the gateway object at
once (retrying cannot help) instead of reconnecting forever."""

import pytest

import tether_client
from tether_client import AuthError, RpcError, codes


async def test_a_tokens_profile_sees_its_own_sessions_only(start_gateway):
    g = start_gateway("--token", "alice:secret-a", "--token", "bob:secret-b")
    async with tether_client.connect(g.url, token="secret-a") as alice, \
            tether_client.connect(f"http://{g.addr}", token="secret-b") as bob:
        assert (await alice.opened())["profile"] == "alice"
        assert (await bob.opened())["profile"] == "bob"
        s = await alice.create_session(title="alice's")
        assert (await (await s.submit("hi alice")).result())["text"] == "hi alice"
        assert [i["title"] for i in await alice.sessions()] == ["alice's"]
        assert await bob.sessions() == []
        with pytest.raises(RpcError) as err:
            await bob.session(s.id).submit("not yours")
        assert err.value.code == codes.SESSION_NOT_FOUND


async def test_a_wrong_or_missing_token_closes_with_auth_error(start_gateway):
    g = start_gateway("--token", "alice:secret-a")
    for token in ["wrong", None]:
        async with tether_client.connect(g.url, token=token) as gw:
            closed = []
            gw.on("closed", closed.append)
            with pytest.raises(AuthError) as err:
                await gw.create_session(title="x")
            assert err.value.status == 401
            assert gw.state == "closed"
            assert isinstance(closed[0]["error"], AuthError)
            with pytest.raises(AuthError):
                await gw.opened()
