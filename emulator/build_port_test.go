package emulator

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	cp "github.com/microvms/microvms/gen/controlplane"
)

// builds reads every build of an image's version 1.0 through
// GetMicrovmImageBuild, as raw JSON objects (an absent member must stay
// absent, not read as zero).
func builds(t *testing.T, base, name string) []map[string]json.RawMessage {
	t.Helper()
	status, _, out := do(t, base, "GET", "/2025-09-09/microvm-images/"+name+"/versions/1.0/builds", "", auth)
	if status != 200 {
		t.Fatalf("ListMicrovmImageBuilds: %d %s", status, out)
	}
	var list cp.ListMicrovmImageBuildsOutput
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatal(err)
	}
	var got []map[string]json.RawMessage
	for _, b := range list.Items {
		status, _, out := do(t, base, "GET", "/2025-09-09/microvm-images/"+name+"/versions/1.0/builds/"+b.BuildId, "", auth)
		if status != 200 {
			t.Fatalf("GetMicrovmImageBuild: %d %s", status, out)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatal(err)
		}
		got = append(got, m)
	}
	return got
}

// createWithHookPort is createImage with hooks.port set.
func createWithHookPort(t *testing.T, base, name, uri string, port int) {
	t.Helper()
	body, _ := json.Marshal(cp.CreateMicrovmImageRequest{Name: name, BaseImageArn: "arn:aws:lambda:us-east-1:aws:microvm-image:al2023-1",
		BuildRoleArn: "arn:aws:iam::123456789012:role/b", CodeArtifact: cp.CodeArtifact{Uri: &uri}, Hooks: &cp.Hooks{Port: &port}})
	if status, _, out := do(t, base, "POST", "/2025-09-09/microvm-images", string(body), auth); status != 201 {
		t.Fatalf("create: %d %s", status, out)
	}
}

// Catches: a build whose daemon listens on a port other than hooks.port
// succeeding in the emulator (the isolated launcher points the daemon at
// the hook port whatever the image says, so it would then run locally and
// fail only on the platform), an unset AGENTD_PORT not read as 9000, a
// reason or error line written into the build log (the platform's stays
// green), and snapshotBuild not in the shape the failure has on the
// platform: codeInstallSizeInBytes alone after a ready-hook timeout, absent
// after a container-build failure (findings agent-port-agreement,
// build-introspection).
func TestBuildWithTheDaemonOnAnotherPortFailsWithACleanLog(t *testing.T) {
	s, base := serve(t, Options{WallClock: true, StateDir: t.TempDir()})
	daemon, err := os.ReadFile(agentdBin)
	if err != nil {
		t.Fatal(err)
	}
	df := func(env string) string {
		return "FROM x\nCOPY agentd /agentd\n" + env + "ENTRYPOINT []\nCMD [\"/agentd\"]\n"
	}
	createImage(t, base, "elsewhere", artifactZip(t, df("ENV AGENTD_PORT=9100\n"), daemon))
	createWithHookPort(t, base, "unset", artifactZip(t, df(""), daemon), 9100)
	createWithHookPort(t, base, "agrees", artifactZip(t, df("ENV AGENTD_PORT=9100\n"), daemon), 9100)
	createImage(t, base, "broken", artifactZip(t, "FROM x\n", []byte("#!/bin/sh\n")))

	for _, name := range []string{"elsewhere", "unset"} {
		if _, _, out := do(t, base, "GET", "/2025-09-09/microvm-images/"+name, "", auth); !strings.Contains(out, `"CREATE_FAILED"`) {
			t.Errorf("%s: %s", name, out)
		}
		bs := builds(t, base, name)
		if len(bs) == 0 {
			t.Fatalf("%s: no builds", name)
		}
		for _, b := range bs {
			var snap map[string]json.RawMessage
			_ = json.Unmarshal(b["snapshotBuild"], &snap)
			if string(b["buildState"]) != `"FAILED"` || string(b["stateReason"]) != `"Ready hook invocation timed out after PT5M"` ||
				len(snap) != 1 || snap["codeInstallSizeInBytes"] == nil {
				t.Errorf("%s: build %s %s snapshotBuild %s", name, b["buildState"], b["stateReason"], b["snapshotBuild"])
			}
		}
		log := strings.Join(s.LogLines("/aws/lambda-microvms/"+name), "\n")
		if log == "" || strings.Contains(log, "FAILED") || strings.Contains(log, "Ready hook") || strings.Contains(strings.ToLower(log), "error") {
			t.Errorf("%s: the build log names the failure: %q", name, log)
		}
	}
	if _, _, out := do(t, base, "GET", "/2025-09-09/microvm-images/agrees", "", auth); !strings.Contains(out, `"CREATED"`) {
		t.Errorf("a daemon on hooks.port failed: %s", out)
	}
	for _, b := range builds(t, base, "broken") {
		if _, ok := b["snapshotBuild"]; ok || string(b["buildState"]) != `"FAILED"` {
			t.Errorf("a container-build failure: %s with snapshotBuild %s, want none", b["buildState"], b["snapshotBuild"])
		}
	}
}
