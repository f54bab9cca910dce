package main_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestCompletion: each shell's script is generated from the parser, names
// every command and the closed domains, and bash parses it. Catches a
// command added to the tree but not completed (a hand-kept list), and a
// script broken by a help text's quote.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		inv := cli(t, nil, "", "completion", sh)
		if inv.code != 0 {
			t.Fatalf("%s: exit %d %s", sh, inv.code, inv.stderr)
		}
		for _, c := range cliapi.Commands {
			if c.Ready && !strings.Contains(inv.stdout, c.Name) {
				t.Errorf("%s completion lacks %s", sh, c.Name)
			}
		}
		for _, w := range []string{"--endpoint", "--memory", "8192", "us-west-2", "--stream"} {
			if !strings.Contains(inv.stdout, strings.TrimPrefix(w, "--")) {
				t.Errorf("%s completion lacks %s", sh, w)
			}
		}
		if path, err := exec.LookPath(sh); err == nil {
			check := exec.Command(path, "-n")
			if sh == "fish" {
				check = exec.Command(path, "--no-execute")
			}
			check.Stdin = strings.NewReader(inv.stdout)
			if out, err := check.CombinedOutput(); err != nil {
				t.Errorf("%s -n refuses the script: %v\n%s", sh, err, out)
			}
		}
	}
	wantFailure(t, cli(t, nil, "", "--json", "completion", "tcsh"), taxonomy.KindInvalidArg, "")
}

// TestManifestIsJSONOnAPipe: the only consumer that asks for a manifest
// parses it, so without --json a pipe still gets the envelope, as the
// reference writes it. Catches the table printed into a pipe again.
func TestManifestIsJSONOnAPipe(t *testing.T) {
	m := envelope(t, cli(t, nil, "", "manifest"))
	if m["type"] != cliapi.TypeManifest {
		t.Fatalf("%v", m["type"])
	}
	for _, r := range m["data"].(map[string]any)["exitCodes"].([]any) {
		row := r.(map[string]any)
		if row["code"] == taxonomy.KindRetryable.Code() && (row["finding"] != taxonomy.FindingEndpointAuth.Title() || row["findingSlug"] != string(taxonomy.FindingEndpointAuth)) {
			t.Fatalf("exit row 3 finding %v / %v", row["finding"], row["findingSlug"])
		}
	}
	if d := cli(t, nil, "", "manifest", "--dense"); strings.HasPrefix(d.stdout, "{") {
		t.Fatal("--dense manifest is JSON")
	}
}

// TestConstantsEmitJSONIsTheBareObject is the one non-envelope write.
func TestConstantsEmitJSONIsTheBareObject(t *testing.T) {
	inv := cli(t, nil, "", "constants", "--emit-json", "--json")
	var m map[string]any
	if err := json.Unmarshal([]byte(inv.stdout), &m); err != nil || inv.code != 0 {
		t.Fatalf("%v %d %q", err, inv.code, inv.stdout)
	}
	if _, ok := m["status"]; ok {
		t.Fatal("--emit-json wrote an envelope")
	}
	if m["DEFAULT_AGENT_PORT"] != float64(taxonomy.DefaultAgentPort) || len(m["MICROVM_REGIONS"].([]any)) != len(taxonomy.Regions) {
		t.Fatalf("constants drifted from the taxonomy: %v", m)
	}
	// The reference CLI's keys and values, written out: a drift checker
	// written for it reads these by name. Catches a key renamed back to Go
	// spelling (ModelAPIVersion) or a constraint dropped.
	for k, want := range map[string]any{
		"MODEL_API_VERSION":            "2025-09-09",
		"MAX_RUN_HOOK_PAYLOAD_BYTES":   float64(4096),
		"MAX_IMAGE_NAME_LEN":           float64(64),
		"IMAGE_NAME_PATTERN":           "[a-zA-Z0-9-_]+",
		"MAX_VERSION_LEN":              float64(2048),
		"VERSION_PATTERN":              `[^\s]+`,
		"MAX_TAG_KEY_LEN":              float64(128),
		"MAX_TAG_VALUE_LEN":            float64(256),
		"TAG_COMPONENT_PATTERN":        `([\p{L}\p{Z}\p{N}_.:/=+\-@]*)`,
		"MIN_ROLE_ARN_LEN":             float64(20),
		"MAX_ROLE_ARN_LEN":             float64(2048),
		"ROLE_ARN_PATTERN":             `arn:aws[a-z\-]*:iam::[0-9]{12}:role/?[a-zA-Z_0-9+=,.@\-_/]+`,
		"MAX_MICROVM_HOOK_TIMEOUT_SEC": float64(60),
		"MAX_IMAGE_HOOK_TIMEOUT_SEC":   float64(3600),
		"MAX_DURATION_SEC":             float64(28800),
		"MIN_IDLE_DURATION_SEC":        float64(60),
	} {
		if m[k] != want {
			t.Errorf("constants[%s] = %#v, the reference publishes %#v", k, m[k], want)
		}
	}
	if sc := m["SIZE_CLASSES"].([]any)[0].(map[string]any); sc["baseline_mib"] != float64(512) || sc["peak_mib"] != float64(2048) {
		t.Errorf("SIZE_CLASSES rows %v", sc)
	}
	// The envelope form carries the same object, typed by the schema.
	env := envelope(t, cli(t, nil, "", "--json", "constants"))
	if b, _ := json.Marshal(env["data"].(map[string]any)["constants"]); string(b) != mustCompact(t, inv.stdout) {
		t.Fatal("the envelope's constants differ from --emit-json")
	}
}

func mustCompact(t *testing.T, s string) string {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(v)
	return string(b)
}

func TestDockerfileStanza(t *testing.T) {
	m := envelope(t, cli(t, nil, "", "--json", "dockerfile", "--port", "9100", "--workdir", "/srv"))
	s := m["data"].(map[string]any)["stanza"].(string)
	for _, want := range []string{"FROM " + taxonomy.ManagedBaseDockerRef + "\n", "WORKDIR /srv\n", "ENV AGENTD_PORT=9100\n", "EXPOSE 9100\n", "ENV AGENTD_REPAIR_IDENTITY=1\n", "ENTRYPOINT []\n", "CMD [\"/agentd\"]\n"} {
		if !strings.Contains(s, want) {
			t.Errorf("stanza lacks %q:\n%s", want, s)
		}
	}
	d := envelope(t, cli(t, nil, "", "--json", "dockerfile"))["data"].(map[string]any)
	if d["port"] != float64(taxonomy.DefaultAgentPort) || d["workdir"] != nil {
		t.Fatalf("defaults: %v", d)
	}
}

// TestLsReadsTheLedger writes runs through client/ledger, exactly as the
// sandbox and build pipeline do, and lists them. Catches the CLI parsing the
// ledger's files with its own idea of their keys (a listing of empty columns
// for every real run), and hiding a damaged record that may name a leak.
func TestLsReadsTheLedger(t *testing.T) {
	dir := t.TempDir()
	l, err := ledger.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := l.Begin("us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	after, err := rec.Before("RunMicrovm", "img")
	if err != nil {
		t.Fatal(err)
	}
	if err := after("mvm-1", nil); err != nil {
		t.Fatal(err)
	}
	if err := rec.Update(func(r *ledger.Run) { r.MicrovmID = "mvm-1" }); err != nil {
		t.Fatal(err)
	}
	// A run that began and was closed before its first step: "steps": [] and
	// "closed": true, which an omitempty in the generated run type would drop.
	begun, err := l.Begin("")
	if err != nil {
		t.Fatal(err)
	}
	if err := begun.Update(func(r *ledger.Run) { r.Closed = true }); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "damaged.json"), []byte(`{"id":`), 0o600)
	// A record whose process is still going is another process's run, and
	// is shown as such rather than as something left open. Catches: the
	// pid not written, or not read.
	other := exec.Command("sleep", "30")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = other.Process.Kill(); _ = other.Wait() })
	going, err := l.Begin("us-east-1")
	if err != nil || going.Snapshot().PID != os.Getpid() {
		t.Fatalf("the record's pid %d, want this process's %d (%v)", going.Snapshot().PID, os.Getpid(), err)
	}
	if err := going.Update(func(r *ledger.Run) { r.PID = other.Process.Pid; r.MicrovmID = "mvm-elsewhere" }); err != nil {
		t.Fatal(err)
	}
	noAWS := []string{"MICROVM_STATE_DIR=" + dir, "AWS_EC2_METADATA_DISABLED=true"}
	// Without --all, a closed record is not listed. Catches: the filter
	// dropped or inverted.
	open := data(envelope(t, cli(t, noAWS, "", "--json", "ls")))
	if runs := open["runs"].([]any); len(runs) != 3 || open["controlPlaneError"] == nil {
		t.Fatalf("without --all: %v", open)
	}
	inv := cli(t, noAWS, "", "--json", "ls", "--all")
	m := envelope(t, inv)
	runs := m["data"].(map[string]any)["runs"].([]any)
	if len(runs) != 4 {
		t.Fatalf("runs %v, want the three recorded runs and the damaged one", runs)
	}
	first, last := runs[0].(map[string]any), runs[3].(map[string]any)
	if first["microvm_id"] != "mvm-1" || first["region"] != "us-east-1" || first["closed"] != false {
		t.Fatalf("recorded run listed as %v", first)
	}
	if last["id"] != "damaged" || last["unreadable"] != true {
		t.Fatalf("damaged record listed as %v", last)
	}
	// Each record is listed as client/ledger wrote it, key for key and in
	// its order. Wrong edit caught: cmd/microvm's conversion into the
	// generated cliapi.Run dropping a key the ledger always writes (closed,
	// steps), writing one it omits, or reordering them.
	var listed struct {
		Data struct {
			Runs []json.RawMessage `json:"runs"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(inv.stdout), &listed); err != nil {
		t.Fatal(err)
	}
	for i, r := range []*ledger.Record{rec, begun} {
		file, err := os.ReadFile(r.Path())
		if err != nil {
			t.Fatal(err)
		}
		var want, got bytes.Buffer
		if err := json.Compact(&want, file); err != nil {
			t.Fatal(err)
		}
		if err := json.Compact(&got, listed.Data.Runs[i]); err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() {
			t.Errorf("run %d listed as\n%s\nthe ledger wrote\n%s", i, got.String(), want.String())
		}
	}
	human := cli(t, noAWS, "", "ls")
	if !strings.Contains(human.stdout, "mvm-1") || !strings.Contains(human.stdout, "unreadable record") ||
		!strings.Contains(human.stdout, fmt.Sprintf("another process's run, still going (pid %d)", other.Process.Pid)) {
		t.Fatalf("human listing:\n%s", human.stdout)
	}
}

// TestManifest proves the manifest is the parser: every command it lists
// routes, every closed domain it publishes is what the parser accepts and
// refuses, and its exit table is the generated one the binary exits by.
func TestManifest(t *testing.T) {
	m := envelope(t, cli(t, nil, "", "--json", "manifest"))
	data := m["data"].(map[string]any)

	var got []string
	for _, c := range data["commands"].([]any) {
		cmd := c.(map[string]any)
		name := cmd["name"].(string)
		got = append(got, name)
		if inv := cli(t, nil, "", name, "--help"); inv.code != 0 {
			t.Errorf("%s does not route: %d %s", name, inv.code, inv.stderr)
		}
		resp, ok := cliapi.ResponseFor(name)
		if !ok || cmd["responseType"] != resp.Type {
			t.Errorf("%s: responseType %v, api/cli.yaml %v", name, cmd["responseType"], resp.Type)
		}
		alt := cmd["alternateResponse"]
		wantAlt := false
		for _, a := range cliapi.Alternates {
			wantAlt = wantAlt || a.Command == name
		}
		if wantAlt != (alt != nil) {
			t.Errorf("%s: alternateResponse %v", name, alt)
		}
		for _, p := range cmd["parameters"].([]any) {
			param := p.(map[string]any)
			pn := param["name"].(string)
			for _, banned := range []string{"--client-token", "--capabilities", "--connector", "--architecture"} {
				if pn == banned {
					t.Errorf("%s has %s, a value the client refuses", name, banned)
				}
			}
			if param["type"] == "boolean" && param["choices"] != nil {
				t.Errorf("%s %s: a boolean publishes choices", name, pn)
			}
			if param["choices"] != nil {
				checkDomain(t, name, pn, param["choices"].([]any))
			}
		}
	}
	var want []string
	for _, c := range cliapi.Commands {
		if c.Ready {
			want = append(want, c.Name)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("parser commands %v, api/cli.yaml ready commands %v: a command api/cli.yaml marks ready: true needs its field in cli.go's CLI struct, and a parser command needs its api/cli.yaml entry (docs/ARCHITECTURE.md, \"Walkthrough: add a CLI command\")", got, want)
	}

	rows := data["exitCodes"].([]any)
	if len(rows) != len(taxonomy.ExitTable) {
		t.Fatalf("%d exit rows, table has %d", len(rows), len(taxonomy.ExitTable))
	}
	for i, r := range rows {
		row := r.(map[string]any)
		if int(row["exit"].(float64)) != int(taxonomy.ExitTable[i].Value) || row["code"] != taxonomy.ExitTable[i].Code {
			t.Errorf("row %d: %v", i, row)
		}
	}
	// The published row for ERR_INVALID_ARG is what a parse failure exits.
	inv := cli(t, nil, "", "--json", "nope")
	if inv.code != int(rows[2].(map[string]any)["exit"].(float64)) {
		t.Fatalf("published ERR_INVALID_ARG row %v, binary exited %d", rows[2], inv.code)
	}
	if !slices.Contains(data["conventions"].([]any), any(cliapi.Conventions[0])) {
		t.Fatal("conventions missing")
	}
}

// checkDomain: every published choice is accepted and an off-table value
// is refused, through the real parser.
func checkDomain(t *testing.T, command, flag string, choices []any) {
	t.Helper()
	var want []string
	switch flag {
	case "--memory":
		for _, r := range taxonomy.SizeClasses {
			want = append(want, strconv.Itoa(r.BaselineMiB))
		}
	case "--region":
		want = taxonomy.Regions
	case "action":
		if command != "network" {
			t.Errorf("%s %s: an unexpected closed domain %v", command, flag, choices)
			return
		}
		want = []string{"show", "set"} // network show|set ID
	default:
		t.Errorf("%s %s: an unexpected closed domain %v", command, flag, choices)
		return
	}
	var have []string
	for _, c := range choices {
		have = append(have, c.(string))
	}
	if !slices.Equal(have, want) {
		t.Errorf("%s %s publishes %v, the taxonomy has %v", command, flag, have, want)
	}
	if command != "cost" {
		return // the attached commands need a daemon to get past the parser; cost proves the flag group
	}
	for _, v := range append(have, "bogus-1") {
		inv := cli(t, nil, "", "--json", command, flag, v)
		if (v == "bogus-1") != (inv.code == int(taxonomy.KindInvalidArg.Exit())) {
			t.Errorf("%s %s %s: exit %d\n%s", command, flag, v, inv.code, inv.stdout)
		}
	}
}

// TestExitTableAgainstTheReference holds the exit table to the reference
// CLI's, written out here from its microvms-cli/src/exit.rs rather than read
// from the generated table, so it disagrees with a renumbered or renamed row
// instead of following it. How each row's use differs is written beside the
// row in api/errors.yaml (`reference`), which generation requires.
func TestExitTableAgainstTheReference(t *testing.T) {
	reference := []string{"", "ERR_UNEXPECTED", "ERR_INVALID_ARG", "ERR_RETRYABLE", "ERR_CREDENTIALS", "ERR_PROTOCOL",
		"ERR_BUILD_WEDGED", "ERR_LAUNCH_DIED", "ERR_WINDOW_CLOSED", "ERR_PLATFORM", "ERR_TIMEOUT", "ERR_INTERRUPTED",
		"ERR_PRECONDITION", "ERR_EXEC_FAILED"}
	// Rows past the reference's are this CLI's additions (api/errors.yaml
	// says so beside each): 14 ERR_CHECKPOINT_REFUSED.
	additions := []string{"ERR_CHECKPOINT_REFUSED"}
	if len(taxonomy.ExitTable) != len(reference)+len(additions) {
		t.Fatalf("%d rows, the reference has %d and this CLI adds %d", len(taxonomy.ExitTable), len(reference), len(additions))
	}
	reference = append(reference, additions...)
	for i, row := range taxonomy.ExitTable {
		if int(row.Value) != i || row.Code != reference[i] {
			t.Errorf("row %d is %d %s; the reference's is %d %s", i, row.Value, row.Code, i, reference[i])
		}
	}
}
