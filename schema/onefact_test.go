package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// plantedRoot copies api/ into a temporary root and applies one edit to one
// YAML file, so a rule can be shown refusing a contradiction at `make gen`.
func plantedRoot(t *testing.T, file, old, new string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "api"), 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(filepath.Join("..", "api"))
	if err != nil {
		t.Fatal(err)
	}
	planted := false
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yaml") {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("..", "api", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if e.Name() == file {
			if !strings.Contains(string(raw), old) {
				t.Fatalf("api/%s no longer contains %q; update the planted defect", file, old)
			}
			raw = []byte(strings.Replace(string(raw), old, new, 1))
			planted = true
		}
		if err := os.WriteFile(filepath.Join(root, "api", e.Name()), raw, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !planted {
		t.Fatalf("no api/%s", file)
	}
	return root
}

func TestRealTaxonomyResolvesOwnedFacts(t *testing.T) {
	tax, err := LoadTaxonomy("..")
	if err != nil {
		t.Fatal(err)
	}
	_, openapi, err := loadOpenAPI("..")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]string{}
	for _, c := range tax.Constants {
		byName[c.Name] = c.Value.Value
	}
	// Wrong edit caught: resolving `from:` against the wrong key, or dropping it.
	if byName["VersionHeader"] != openapi["x-version-header"] || byName["HookPrefix"] != openapi["x-hook-prefix"] {
		t.Fatalf("constants not taken from api/openapi.yaml: %v", byName)
	}
	if len(tax.MicrovmStates.Values) != 6 || tax.MicrovmStates.Values[1] != "RUNNING" {
		t.Fatalf("microvm states not taken from the control plane's enum: %v", tax.MicrovmStates.Values)
	}
}

// Each planted contradiction must fail generation with a message that names
// the rule; deleting or weakening a rule turns its row red.
func TestPlantedContradictionsFailGeneration(t *testing.T) {
	cases := []struct {
		name, file, old, new, want string
	}{
		{"version header declared again by value", "errors.yaml",
			`{name: VersionHeader,            type: string, from: "openapi.yaml#/x-version-header",`,
			`{name: VersionHeader,            type: string, value: microvms-agentd-version,`,
			"repeats /x-version-header"},
		{"version header changed in errors.yaml alone", "errors.yaml",
			`{name: VersionHeader,            type: string, from: "openapi.yaml#/x-version-header",`,
			`{name: VersionHeader,            type: string, value: microvms-agentd-v2,`,
			"repeats /x-version-header"},
		{"agent port declared again by value", "errors.yaml",
			`{name: DefaultAgentPort,         type: int,    from: "openapi.yaml#/x-limits/port/value",`,
			`{name: DefaultAgentPort,         type: int,    value: 9001,`,
			"repeats /x-limits/port/value"},
		{"both value and from", "errors.yaml",
			`type: string, from: "openapi.yaml#/x-hook-prefix",`,
			`type: string, value: /x, from: "openapi.yaml#/x-hook-prefix",`,
			"both value and from"},
		{"from points nowhere", "errors.yaml",
			`from: "openapi.yaml#/x-hook-prefix"`, `from: "openapi.yaml#/x-hook-prefx"`,
			"has no"},
		{"exit row 10 given a second kind's code", "errors.yaml",
			`{value: 10, code: ERR_TIMEOUT,`, `{value: 10, code: ERR_PLATFORM,`,
			"exit table: code"},
		{"exit value twice", "errors.yaml",
			`{value: 13, code: ERR_EXEC_FAILED,`, `{value: 12, code: ERR_EXEC_FAILED,`,
			"value 12 declared twice"},
		{"terminal state the control plane lacks", "errors.yaml",
			`dead: [TERMINATED, TERMINATING]`, `dead: [TERMINATED, HIBERNATED]`,
			"HIBERNATED"},
		{"slug status declared again in errors.yaml", "errors.yaml",
			`{slug: still_running,         wire_kind: Conflict,`, `{slug: still_running,         status: 409, wire_kind: Conflict,`,
			"status"},
		{"slug sent with a second status", "openapi.yaml",
			"            - slug: stdin_closed\n", "            - slug: stdin_closed\n            - slug: malformed_request\n",
			"slug malformed_request is sent with"},
		{"slug the daemon never sends", "errors.yaml",
			"  - {slug: stdin_write_failed, ", "  - {slug: stdin_write_faild, ",
			"stdin_write_faild is listed under no response"},
		{"state set from an unknown enum", "errors.yaml",
			`enum_from: BuildState`, `enum_from: BuildStatus`,
			"BuildStatus"},
		{"control-plane enum loses a value a set uses", "lambda-microvms.yaml",
			"      - SUSPENDING\n      - SUSPENDED\n", "      - SUSPENDING\n",
			"SUSPENDED"}, // the terminal set names SUSPENDED
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := plantedRoot(t, c.file, c.old, c.new)
			_, err := LoadTaxonomy(root)
			want := c.want
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("planted %q: got %v, want an error containing %q", c.name, err, want)
			}
		})
	}
}

func TestNameTokens(t *testing.T) {
	for in, want := range map[string]string{
		"SSEIdleTimeoutSec":      "sse idle timeout sec",
		"sse_idle_timeout_secs":  "sse idle timeout sec",
		"DefaultAgentPort":       "agent port",
		"MaxRunHookPayloadBytes": "run hook payload byte",
	} {
		if got := strings.Join(nameTokens(in), " "); got != want {
			t.Errorf("nameTokens(%q) = %q, want %q", in, got, want)
		}
	}
}

// Wrong edit caught: adding a route without saying whether it is idempotent,
// which would leave every client to guess its retry rule.
func TestOperationWithoutIdempotencyFailsGeneration(t *testing.T) {
	root := plantedRoot(t, "openapi.yaml", "operationId: execAck\n      x-idempotent: false  # a second ack answers 409 already_acked\n", "operationId: execAck\n")
	node, doc, err := loadOpenAPI(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := operations(node, doc); err == nil || !strings.Contains(err.Error(), "execAck") {
		t.Fatalf("a route without x-idempotent generated: %v", err)
	}
	node, doc, err = loadOpenAPI("..")
	if err != nil {
		t.Fatal(err)
	}
	ops, err := operations(node, doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.ID == "execAck" && op.Idempotent {
			t.Fatal("execAck read as idempotent")
		}
	}
}

// Wrong edit caught: generated names that break Go's initialisms
// (DefaultExecTtlSecs beside oapi-codegen's ExecID).
func TestGoIdentKeepsInitialisms(t *testing.T) {
	for in, want := range map[string]string{
		"exec_ttl_secs":     "ExecTTLSecs",
		"max_exec_id_bytes": "MaxExecIDBytes",
		"tls-probe":         "TLSProbe",
		"image-arn-colon":   "ImageARNColon",
		"still_running":     "StillRunning",
		"identity":          "Identity", // a word that merely starts like an initialism
	} {
		if got := goIdent(in); got != want {
			t.Errorf("goIdent(%q) = %q, want %q", in, got, want)
		}
	}
}

// Wrong edit caught: a duplicate rule so broad that a bound on a fact reads
// as the fact (the model's MaxPort 65535 is not the daemon's port).
func TestABoundIsNotARepeatedFact(t *testing.T) {
	root := plantedRoot(t, "errors.yaml", "constants:\n", "constants:\n  - {name: MaxPort, type: int, value: 65535, doc: highest TCP port the model accepts, key: MAX_PORT}\n")
	if _, err := LoadTaxonomy(root); err != nil {
		t.Fatalf("a bound was refused as a repeated fact: %v", err)
	}
}
