"""A burst of reads past the gateway's rate limit (4029, PROTOCOL 1.10): the
library asks again after the wait the gateway names, so the application
sees every answer and no refusal."""

import asyncio

import tether_client


async def test_reads_refused_for_the_rate_limit_are_asked_again(start_gateway):
    g = start_gateway("--rate-limit-rps", "20")
    async with tether_client.connect(g.url) as gw:
        await gw.opened()
        # 60 at once against a burst of 40.
        answers = await asyncio.gather(*(gw.call("session.events.stats") for _ in range(60)))
        assert len(answers) == 60
        assert all(isinstance(a["sessions_live"], int) for a in answers)
