// docs/schema.json under a strict JSON Schema 2020-12 reader: Ajv in strict
// mode, with the standard OpenAPI formats from ajv-formats and nothing else.
// Catches: a non-standard format (uint64 was one), an OpenAPI-only keyword
// leaking into $defs (nullable, discriminator, boolean exclusiveMinimum), a
// $ref that does not resolve, a missing $id, and a nullable that stopped
// admitting null.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const doc = JSON.parse(readFileSync(new URL("../../../docs/schema.json", import.meta.url), "utf8"));

// The document is both a JSON Schema (its $defs) and the protocol description
// GET /v1/schema serves, whose top-level keys are protocol v1's and cannot be
// renamed. To a 2020-12 reader they are annotations; Ajv's strict mode wants
// annotation keywords declared, and this is the whole list. A key added to the
// document must be added here on purpose.
const protocolKeys = [
  "auth", "daemon_version", "frames", "generated_from", "hook_prefix", "limits", "memory", "protocol_version",
  "routes", "settings", "taxonomy", "unmatched_path", "version_header", "version_header_scope",
];

function strictAjv() {
  // allowUnionTypes: a nullable field is written the 2020-12 way, type
  // [T, "null"], which strictTypes otherwise refuses.
  const ajv = new Ajv2020({ strict: true, allowUnionTypes: true, allErrors: true });
  addFormats(ajv);
  ajv.addVocabulary(protocolKeys);
  return ajv;
}

test("docs/schema.json has an $id and the 2020-12 dialect", () => {
  assert.equal(doc.$schema, "https://json-schema.org/draft/2020-12/schema");
  assert.equal(doc.$id, "https://github.com/microvms/microvms/docs/schema.json");
});

test("its top-level keys are JSON Schema keywords or the declared protocol keys", () => {
  const keywords = new Set(["$schema", "$id", "$defs", "title"]);
  const extra = Object.keys(doc).filter((k) => !keywords.has(k)).sort();
  assert.deepEqual(extra, [...protocolKeys].sort());
});

test("the document and every $def compile under strict mode", () => {
  const ajv = strictAjv();
  ajv.addSchema(doc);
  const names = Object.keys(doc.$defs);
  assert.ok(names.length >= 20, `only ${names.length} $defs`);
  for (const name of names) {
    const validate = ajv.getSchema(`${doc.$id}#/$defs/${name}`);
    assert.ok(validate, `$defs/${name} does not compile`);
  }
});

test("every schema a route names resolves", () => {
  const ajv = strictAjv();
  ajv.addSchema(doc);
  let refs = 0;
  const visit = (v) => {
    if (Array.isArray(v)) return v.forEach(visit);
    if (v && typeof v === "object") {
      if (typeof v.$ref === "string") {
        refs++;
        assert.ok(ajv.getSchema(doc.$id + v.$ref), `${v.$ref} does not resolve`);
      }
      Object.values(v).forEach(visit);
    }
  };
  visit(doc.routes);
  assert.ok(refs >= 15, `only ${refs} route schema refs`);
});

test("the wire shapes accept what the daemon sends and refuse what it refuses", () => {
  const ajv = strictAjv();
  ajv.addSchema(doc);
  const v = (name) => ajv.getSchema(`${doc.$id}#/$defs/${name}`);
  const health = { version: "1", bootstrapped: true, identity_degraded: false, identity_repaired: true };
  assert.ok(v("Health")({ ...health, disk: null }), "disk: null must be valid");
  assert.ok(v("Health")({ ...health, disk: { available_bytes: 80635920384, reserve_bytes: 0, under_pressure: false } }));
  assert.ok(!v("Health")(health), "disk is required");
  assert.ok(v("StartRequest")({ exec_id: "a", command: ["true"], user: 4294967295, timeout_sec: 0.5 }));
  assert.ok(!v("StartRequest")({ exec_id: "a", command: ["true"], user: 4294967296 }));
  assert.ok(!v("StartRequest")({ exec_id: "a", command: ["true"], timeout_sec: 0 }));
  assert.ok(!v("StartRequest")({ exec_id: "", command: ["true"] }));
  assert.ok(v("StdinRequest")({ signal: "eof" }) && v("StdinRequest")({ signal: null }));
  assert.ok(!v("StdinRequest")({ signal: "close" }));
  assert.ok(v("SSEEvent")({ event: "exit", data: { exit_code: null, signal: 9, truncated: false, writers_may_be_alive: false, offset: 3 } }));
  assert.ok(!v("SSEEvent")({ event: "gap", data: { offset: 0, stream: "stdout", output: "" } }));
  assert.ok(v("ErrorAckConflict")({ error: "already_acked", detail: "x" }));
  assert.ok(!v("ErrorAckConflict")({ error: "unknown_exec", detail: "x" }));
});
