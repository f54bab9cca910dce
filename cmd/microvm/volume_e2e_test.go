package main_test

import (
	"strings"
	"testing"

	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: a --volume whose files do not outlive the run's teardown (no
// generation saved, or none laid at the next launch), a volume held by a
// kept MicroVM that a second run may still attach, and --volume on a
// fleet (many writers of one volume) accepted.
func TestRunVolumeAcrossRuns(t *testing.T) {
	env, _ := lifecycleEnv(t)
	emu, url := testEmulator(t, emulator.Options{})
	emu.AddImage("vol")
	emu.CreateBucket("vols")
	env = append(env, "AWS_ENDPOINT_URL="+url, "MICROVM_BUCKET=vols")
	at := []string{"--control-endpoint", url, "--image", "vol", "--volume", "data:/tmp/vol"}
	first := cli(t, env, "", append([]string{"run", "--exec", "ls -A /tmp/vol | wc -l; echo kept > /tmp/vol/f"}, at...)...)
	if first.code != 0 || strings.TrimSpace(first.stdout) != "0" {
		t.Fatalf("first run: exit %d stdout %q\n%s", first.code, first.stdout, first.stderr)
	}
	second := cli(t, env, "", append([]string{"run", "--exec", "cat /tmp/vol/f"}, at...)...)
	if second.code != 0 || second.stdout != "kept\n" {
		t.Fatalf("second run: exit %d stdout %q\n%s", second.code, second.stdout, second.stderr)
	}
	d := data(envelope(t, cli(t, env, "", append([]string{"--json", "run", "--keep"}, at...)...)))
	holder := d["microvmId"].(string)
	inv := cli(t, env, "", append([]string{"--json", "run", "--exec", "true"}, at...)...)
	wantFailure(t, inv, taxonomy.KindCheckpointRefused, taxonomy.FindingNoUserSnapshot)
	if !strings.Contains(inv.stdout, holder) {
		t.Fatalf("the refusal does not name the holder %s: %s", holder, inv.stdout)
	}
	wantFailure(t, cli(t, env, "", append([]string{"--json", "run", "--count", "2"}, at...)...), taxonomy.KindInvalidArg, "")
	wantFailure(t, cli(t, env, "", "--json", "run", "--local", "--volume", "data:/tmp/vol"), taxonomy.KindInvalidArg, "")
	wantFailure(t, cli(t, env, "", append([]string{"--json", "run", "--volume", "data:relative"}, at[:4]...)...), taxonomy.KindInvalidArg, "")

	ctl := []string{"--control-endpoint", url}
	vol := func(args ...string) map[string]any {
		t.Helper()
		inv := cli(t, env, "", append(append([]string{"--json", "volume"}, args...), ctl...)...)
		if inv.code != 0 {
			t.Fatalf("volume %v: exit %d\n%s\n%s", args, inv.code, inv.stdout, inv.stderr)
		}
		return data(envelope(t, inv))
	}
	ls := vol("ls")["volumes"].([]any)
	if len(ls) != 1 {
		t.Fatalf("volume ls: %v", ls)
	}
	v := ls[0].(map[string]any)
	if v["name"] != "data" || v["holder"] != holder || len(v["generations"].([]any)) != 2 || v["leaseExpired"] != false {
		t.Fatalf("volume ls: %v", v)
	}
	if code := cli(t, env, "", append([]string{"exec", "--microvm-id", holder, "echo synced > /tmp/vol/f"}, ctl...)...).code; code != 0 {
		t.Fatalf("exec in the holder: exit %d", code)
	}
	saved := vol("sync", holder)["saved"].([]any)
	if len(saved) != 1 || saved[0].(map[string]any)["name"] != "g000000003" {
		t.Fatalf("volume sync: %v", saved)
	}
	inv = cli(t, env, "", append([]string{"--json", "volume", "rm", "data"}, ctl...)...)
	wantFailure(t, inv, taxonomy.KindCheckpointRefused, taxonomy.FindingNoUserSnapshot)
	// Terminating the holder saves a last generation and releases the
	// lease: the volume is free, and a run sees what the holder last wrote.
	if code := cli(t, env, "", append([]string{"exec", "--microvm-id", holder, "echo last > /tmp/vol/f"}, ctl...)...).code; code != 0 {
		t.Fatalf("exec in the holder: exit %d", code)
	}
	if inv := cli(t, env, "", "terminate", holder, "--control-endpoint", url); inv.code != 0 {
		t.Fatalf("terminate: %d %s", inv.code, inv.stderr)
	}
	if v := vol("ls")["volumes"].([]any)[0].(map[string]any); v["holder"] != nil {
		t.Fatalf("terminate left the lease: %v", v)
	}
	last := cli(t, env, "", append([]string{"run", "--exec", "cat /tmp/vol/f"}, at...)...)
	if last.code != 0 || last.stdout != "last\n" {
		t.Fatalf("after terminate: exit %d stdout %q\n%s", last.code, last.stdout, last.stderr)
	}
	if removed := vol("rm", "data")["removed"].([]any); len(removed) == 0 {
		t.Fatal("volume rm removed nothing")
	}
	if ls := vol("ls")["volumes"].([]any); len(ls) != 0 {
		t.Fatalf("after rm: %v", ls)
	}
}
