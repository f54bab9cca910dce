// A local sandbox under a network policy (issue 48) through the real engine:
// the allowed host, a stand-in HTTPS server on loopback the engine reaches
// through MICROVM_NETWORK_RESOLVE and trusts through
// MICROVM_NETWORK_UPSTREAM_CA, gets the real key put in outside the guest;
// a host the policy does not list is refused; network() says so; and
// setNetworkPolicy cuts the allowed host. No packet leaves this machine.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { inspect } from "node:util";
import type { AddressInfo } from "node:net";

import { InvalidArgError, Sandbox, Secret } from "../src/sandbox.js";

const HOST = "api.model.test";
const VALUE = "ts-model-key-7e3a91c5f2d8";
const ALLOWED = `curl -sS -f --max-time 20 -H "Authorization: Bearer $MODEL_KEY" https://${HOST}/v1`;

const missing = ["MICROVM_BIN", "MICROVM_AGENTD"].filter((n) => !process.env[n]);
const skip = missing.length > 0 && !process.env.MICROVMS_REQUIRE_ENGINE ? `needs ${missing.join(" and ")}` : false;

describe("Secret", () => {
  test("never prints its value", () => {
    // Catches: a toString, JSON or inspect that shows the value.
    const s = new Secret(VALUE, HOST);
    const shown = String(s) + JSON.stringify({ s }) + inspect(s) + inspect({ K: s });
    assert.ok(!shown.includes(VALUE), shown);
    assert.ok(shown.includes(HOST));
  });
  test("a plain string is refused without echo", async () => {
    // Catches: secrets: { K: "value" } accepted (no host to bind it to) or
    // refused with the value in the message.
    await assert.rejects(Sandbox.create({ local: true, networkAllow: [HOST], secrets: { K: VALUE as unknown as Secret } }),
      (e: Error) => e instanceof InvalidArgError && !e.message.includes(VALUE));
  });
});

describe("network policy", { skip }, () => {
  let dir = "";
  let srv: Server;
  const auths: string[] = [];
  before(async () => {
    dir = mkdtempSync(join(tmpdir(), "standin-"));
    const ssl = (...args: string[]) => execFileSync("openssl", args, { stdio: "ignore" });
    ssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1", "-subj", "/CN=stand-in CA",
      "-keyout", join(dir, "ca.key"), "-out", join(dir, "ca.pem"));
    ssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", `/CN=${HOST}`,
      "-keyout", join(dir, "leaf.key"), "-out", join(dir, "leaf.csr"));
    writeFileSync(join(dir, "ext"), `subjectAltName=DNS:${HOST}\nextendedKeyUsage=serverAuth\n`);
    ssl("x509", "-req", "-in", join(dir, "leaf.csr"), "-CA", join(dir, "ca.pem"), "-CAkey", join(dir, "ca.key"), "-CAcreateserial",
      "-days", "1", "-extfile", join(dir, "ext"), "-out", join(dir, "leaf.pem"));
    srv = createServer({ key: readFileSync(join(dir, "leaf.key")), cert: readFileSync(join(dir, "leaf.pem")) }, (req, res) => {
      auths.push(req.headers.authorization ?? "");
      res.end("hello from the stand-in");
    });
    await new Promise<void>((ok) => srv.listen(0, "127.0.0.1", ok));
    process.env.MICROVM_NETWORK_RESOLVE = `${HOST}=127.0.0.1:${(srv.address() as AddressInfo).port}`;
    process.env.MICROVM_NETWORK_UPSTREAM_CA = join(dir, "ca.pem");
  });
  after(async () => {
    delete process.env.MICROVM_NETWORK_RESOLVE;
    delete process.env.MICROVM_NETWORK_UPSTREAM_CA;
    await new Promise<void>((ok) => srv.close(() => ok()));
    rmSync(dir, { recursive: true, force: true });
  });

  test("allowed, denied, network(), setNetworkPolicy", async () => {
    // Catches: create dropping networkAllow or secrets (the stand-in would
    // get the placeholder, the denied host would be looked up), network()
    // not the guest's state, setNetworkPolicy not reaching the guest.
    const sb = await Sandbox.create({ local: true, networkAllow: [HOST], secrets: { MODEL_KEY: new Secret(VALUE, HOST) } });
    try {
      const r = await sb.run(ALLOWED);
      assert.equal(r.exitCode, 0, r.stderr);
      assert.equal(r.stdout, "hello from the stand-in");
      assert.deepEqual(auths, [`Bearer ${VALUE}`]);
      const d = await sb.run(`case "$MODEL_KEY" in mvp_*) echo placeholder;; esac; curl -sS --max-time 10 https://denied.model.test/ && echo reached || echo refused`);
      assert.deepEqual(d.stdout.split(/\s+/).filter(Boolean), ["placeholder", "refused"]);
      const n = await sb.network();
      assert.equal(n.enforced, true);
      assert.equal(n.where, "emulator");
      assert.deepEqual(n.secrets.map((s) => s.name), ["MODEL_KEY"]);
      assert.ok(n.deniedCount >= 1);
      assert.ok(n.denied.some((x) => x.host === "denied.model.test"), JSON.stringify(n.denied));
      assert.ok(!JSON.stringify(n).includes(VALUE));
      await assert.rejects(sb.setNetworkPolicy([]), InvalidArgError);
      const after = await sb.setNetworkPolicy([], { denyAll: true });
      assert.deepEqual(after.policy?.allow, []);
      assert.notEqual((await sb.run(ALLOWED)).exitCode, 0);
      assert.equal(auths.length, 1);
    } finally {
      await sb.terminate();
      await sb.close();
    }
  });
});
