"""A local sandbox under a network policy (issue 48), through the real
engine: an allowed host (a stand-in on loopback) is reached with the real
secret put in outside the guest, a host the policy does not list is
refused, network() says so, and set_network_policy cuts the allowed host."""
import asyncio
import os
import unittest
from unittest import mock

from microvms import AsyncSandbox, InvalidArgError, Sandbox, Secret

from .engine_env import require_engine
from .standin import StandIn

HOST = "api.model.test"
VALUE = "py-model-key-41c7e2b9d05a"
ALLOWED = 'curl -sS -f --max-time 20 -H "Authorization: Bearer $MODEL_KEY" https://%s/v1' % HOST
DENIED = "curl -sS --max-time 10 https://denied.model.test/ && echo reached || echo refused"


class SecretTest(unittest.TestCase):
    def test_value_never_printed(self) -> None:
        # Catches: a repr or str that shows the value (a logged create's
        # arguments would carry it).
        s = Secret(VALUE, HOST)
        self.assertNotIn(VALUE, repr(s) + str(s) + repr({"K": s}))
        self.assertIn(HOST, repr(s))

    def test_plain_string_refused_without_echo(self) -> None:
        # Catches: secrets={"K": "value"} accepted (no host to bind it to)
        # or refused with the value in the message.
        with self.assertRaises(InvalidArgError) as ctx:
            Sandbox.create(local=True, network_allow=[HOST], secrets={"K": VALUE})  # type: ignore[dict-item]
        self.assertNotIn(VALUE, str(ctx.exception))


class NetworkPolicyTest(unittest.TestCase):
    def setUp(self) -> None:
        require_engine()
        self.standin = StandIn(HOST)
        self.addCleanup(self.standin.close)
        patch = mock.patch.dict(os.environ, self.standin.env())
        patch.start()
        self.addCleanup(patch.stop)

    def test_allowed_denied_show_set(self) -> None:
        # Catches: create dropping network_allow or secrets (the denied host
        # would be looked up, the stand-in would get the placeholder or
        # nothing), a network() that is not the guest's state, a
        # set_network_policy that does not reach the guest.
        with Sandbox.create(local=True, network_allow=[HOST], secrets={"MODEL_KEY": Secret(VALUE, HOST)}) as sb:
            r = sb.run(ALLOWED)
            self.assertEqual((r.exit_code, r.stdout), (0, "hello from the stand-in"), r.stderr)
            self.assertEqual(self.standin.got(), ["Bearer " + VALUE])
            r = sb.run('case "$MODEL_KEY" in mvp_*) echo placeholder;; esac; ' + DENIED)
            self.assertEqual(r.stdout.split(), ["placeholder", "refused"])
            n = sb.network()
            self.assertTrue(n["enforced"])
            self.assertEqual(n["where"], "emulator")
            self.assertEqual([s["name"] for s in n["secrets"]], ["MODEL_KEY"])
            self.assertGreaterEqual(n["deniedCount"], 1)
            self.assertIn("denied.model.test", [d["host"] for d in n["denied"]])
            self.assertNotIn(VALUE, repr(n))
            with self.assertRaises(InvalidArgError):
                sb.set_network_policy([])
            after = sb.set_network_policy([], deny_all=True)
            assert after["policy"] is not None
            self.assertEqual(after["policy"]["allow"], [])
            self.assertNotEqual(sb.run(ALLOWED).exit_code, 0)
            self.assertEqual(len(self.standin.got()), 1)

    def test_engine_refusal_quotes_no_value(self) -> None:
        # Catches: the engine's refusal of a bad binding (a host that is no
        # name) quoting the NAME=VALUE@HOST spec it was sent.
        with self.assertRaises(InvalidArgError) as ctx:
            Sandbox.create(local=True, network_allow=[HOST], secrets={"MODEL_KEY": Secret(VALUE, "not a host")})
        self.assertNotIn(VALUE, str(ctx.exception) + repr(ctx.exception.data))

    def test_async(self) -> None:
        # Catches: AsyncSandbox.create without the network arguments, or its
        # network()/set_network_policy not reaching the engine.
        async def main() -> None:
            sb = await AsyncSandbox.create(local=True, network_allow=[HOST], secrets={"MODEL_KEY": Secret(VALUE, HOST)})
            try:
                r = await sb.run(ALLOWED)
                self.assertEqual(r.exit_code, 0, r.stderr)
                n = await sb.network()
                self.assertEqual(n["policy"]["allow"][0].get("host"), HOST)  # type: ignore[index]
                after = await sb.set_network_policy(["other.model.test:8443"])
                self.assertEqual(after["policy"]["allow"][0].get("host"), "other.model.test")  # type: ignore[index]
                self.assertNotEqual((await sb.run(ALLOWED)).exit_code, 0)
            finally:
                await sb.terminate()
                await sb.close()
        asyncio.run(main())
        self.assertEqual(self.standin.got(), ["Bearer " + VALUE])


if __name__ == "__main__":
    unittest.main()
