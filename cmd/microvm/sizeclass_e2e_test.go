package main_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/microvms/microvms/emulator"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: content-addressed reuse that keys on the files only (issue
// 51.2: `run --reuse --memory 512` of an image first built at the default
// size reused it, printed and priced 512 MiB while the guest had the
// image's 2048 MiB class), a --memory beside --image reported as applied
// instead of refused, and a launch of an existing image priced at the
// flag's default instead of the image's own class.
func TestReuseKeysOnTheSizeClassAndAnImageKeepsItsOwn(t *testing.T) {
	env, _ := lifecycleEnv(t)
	_, url := testEmulator(t, emulator.Options{})
	run := func(args ...string) map[string]any {
		t.Helper()
		inv := cli(t, env, "", append([]string{"--json"}, args...)...)
		m := envelope(t, inv)
		if inv.code != 0 {
			t.Fatalf("microvm %v: exit %d\n%s\n%s", args, inv.code, inv.stdout, inv.stderr)
		}
		return data(m)
	}
	build := func(args ...string) map[string]any {
		t.Helper()
		return run(append([]string{"build", "--control-endpoint", url, "--reuse", "--name", "sized"}, args...)...)
	}
	first := build()
	small := build("--memory", "512")
	if small["imageName"] == first["imageName"] || small["reused"] == true {
		t.Fatalf("a reuse at 512 MiB took the image built at the default size: %v then %v", first, small)
	}
	if again := build("--memory", "512"); again["imageName"] != small["imageName"] || again["reused"] != true {
		t.Fatalf("the same inputs at the same size were not reused: %v then %v", small, again)
	}
	name := small["imageName"].(string)
	// The image's version carries the class it was built with.
	req, _ := http.NewRequest("GET", url+"/2025-09-09/microvm-images/"+name+"/versions/1.0", nil)
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=AKID/20260815/us-east-1/lambda/aws4_request, SignedHeaders=host;x-amz-date, Signature=00")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var v cp.GetMicrovmImageVersionOutput
	if err := json.Unmarshal(raw, &v); err != nil || v.Resources == nil || len(*v.Resources) == 0 || (*v.Resources)[0].MinimumMemoryInMiB != 512 {
		t.Fatalf("the 512 MiB image's version: %s (%v)", raw, err)
	}

	refused := cli(t, env, "", "--json", "run", "--control-endpoint", url, "--image", name, "--memory", "1024", "--exec", "true")
	m := wantFailure(t, refused, taxonomy.KindInvalidArg, taxonomy.FindingMemorySelectsBaseline)
	if msg, _ := m["error"].(string); !strings.Contains(msg, "--memory 1024 beside --image") {
		t.Fatalf("the refusal: %q", msg)
	}
	ran := run("run", "--control-endpoint", url, "--image", name, "--exec", "true")
	if c, _ := ran["cost"].(map[string]any); c == nil || !strings.Contains(c["size"].(string), "512") {
		t.Fatalf("a launch of the 512 MiB image priced as %v", ran["cost"])
	}
}
