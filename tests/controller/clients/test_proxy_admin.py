"""The controller's admin client against the real proxy's admin API (loopback): the contract
between controller/clients/proxy_admin.py and connector/api/admin.py."""

import socket

import pytest

from controller.clients.proxy_admin import ProxyAdminClient, ProxyAdminError
from tests.connector.fakes import FakeEngine, engines, run, running, settings_for

TOKEN = "s3cret"


def test_lists_instances_typed_and_moves_them_with_the_proxys_token():
    async def body():
        async with (
            engines(FakeEngine("p"), FakeEngine("d")) as (p, d),
            running(settings_for([p], [d], admin_token=TOKEN)) as (base, proxy),
        ):
            admin = ProxyAdminClient(base, lambda: TOKEN)
            try:
                listed = {e["url"]: e for e in await admin.instances()}
                assert set(listed) == {p.url, d.url}
                assert listed[d.url]["group"] == "read" and listed[d.url]["healthy"] is True
                assert listed[d.url]["outstanding_requests"] == 0
                assert await admin.drain(d.url) is True and proxy.pool.get(d.url).draining
                assert await admin.undrain(d.url) is True and not proxy.pool.get(d.url).draining
                assert await admin.set_whole(p.url, True) is True and proxy.pool.get(p.url).whole
                await admin.pause("read")
                assert proxy.pool.groups["read"].paused
                await admin.resume("read")
                assert not proxy.pool.groups["read"].paused
                assert await admin.rejected() == 0
                assert await admin.refusals() == []
                await admin.expect(None)
            finally:
                await admin.aclose()

    run(body())


def test_an_instance_the_proxy_does_not_list_is_nothing_to_drain():
    async def body():
        async with running(settings_for(admin_token=TOKEN)) as (base, _):
            admin = ProxyAdminClient(base, lambda: TOKEN)
            try:
                assert await admin.drain("http://127.0.0.1:9") is False
                assert await admin.set_whole("http://127.0.0.1:9", False) is False
                with pytest.raises(ProxyAdminError) as refused:
                    await admin.pause("sideways")
                assert refused.value.proxy_status == 404
            finally:
                await admin.aclose()

    run(body())


def test_the_token_is_asked_for_at_every_call_and_a_wrong_one_is_an_error():
    async def body():
        tokens = iter(["wrong", TOKEN])
        async with running(settings_for(admin_token=TOKEN)) as (base, _):
            admin = ProxyAdminClient(base, lambda: next(tokens))
            try:
                with pytest.raises(ProxyAdminError) as refused:
                    await admin.instances()
                assert refused.value.proxy_status == 401 and refused.value.status == 502
                assert await admin.instances() == []  # the proxy's token now
            finally:
                await admin.aclose()

    run(body())


def test_a_proxy_that_is_not_there_is_one_error_type():
    async def body():
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # closed again: nothing listens there
        admin = ProxyAdminClient(f"http://127.0.0.1:{port}", timeout=2.0)
        try:
            with pytest.raises(ProxyAdminError, match="GET /admin/instances") as failed:
                await admin.instances()
            assert failed.value.proxy_status is None
        finally:
            await admin.aclose()

    run(body())
