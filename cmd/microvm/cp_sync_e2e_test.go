package main_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/fswiretap"
)

// cp --sync uploads with sync=true and plain cp without it, through a
// recording proxy in front of a real agentd; --sync on a download or with
// --tar is refused before anything moves.
// Catches: --sync parsed but not passed on (the caller told the file is on
// disk when it is only in the page cache), plain cp paying the fsync, and a
// --sync that a download or a tar silently ignores.
func TestCpSyncAsksForTheFsync(t *testing.T) {
	endpoint, token := startAgentd(t)
	tap := fswiretap.Start(t, endpoint)
	env := []string{"MICROVM_ENDPOINT=" + tap.URL, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	dir := t.TempDir()
	src := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(src, []byte("payload\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plain, durable := filepath.Join(dir, "plain.txt"), filepath.Join(dir, "durable.txt")
	envelope(t, cli(t, env, "", "--json", "cp", src, "vm:"+plain))
	envelope(t, cli(t, env, "", "--json", "cp", "--sync", src, "vm:"+durable))
	got := tap.Syncs()
	if len(got) != 2 || got[0] != "" || got[1] != "true" {
		t.Fatalf("sync values sent: %q, want [\"\" \"true\"]", got)
	}
	for _, p := range []string{plain, durable} {
		if b, err := os.ReadFile(p); err != nil || string(b) != "payload\n" {
			t.Fatalf("%s holds %q (%v)", p, b, err)
		}
	}
	for _, args := range [][]string{
		{"cp", "--sync", "vm:" + durable, filepath.Join(dir, "back.txt")},
		{"cp", "--sync", "--tar", src, "vm:" + dir + "/t"},
	} {
		inv := cli(t, env, "", args...)
		if inv.code != int(taxonomy.KindInvalidArg.Exit()) {
			t.Fatalf("%q: exit %d (stderr %q), want the invalid-argument exit %d", args, inv.code, inv.stderr, taxonomy.KindInvalidArg.Exit())
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "back.txt")); err == nil {
		t.Fatal("a refused --sync download wrote its file")
	}
	if got := tap.Syncs(); len(got) != 2 {
		t.Fatalf("a refused cp reached the daemon: %q", got)
	}
}
