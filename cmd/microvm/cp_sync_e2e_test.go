package main_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/microvms/microvms/gen/taxonomy"
)

// cp --sync uploads with sync=true and plain cp without it, through a
// recording proxy in front of a real agentd; --sync on a download or with
// --tar is refused before anything moves.
// Catches: --sync parsed but not passed on (the caller told the file is on
// disk when it is only in the page cache), plain cp paying the fsync, and a
// --sync that a download or a tar silently ignores.
func TestCpSyncAsksForTheFsync(t *testing.T) {
	endpoint, token := startAgentd(t)
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var syncs []string
	rp := httputil.NewSingleHostReverseProxy(target)
	px := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPut && r.URL.Path == "/v1/fs/file" {
			mu.Lock()
			syncs = append(syncs, r.URL.Query().Get("sync"))
			mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(px.Close)
	env := []string{"MICROVM_ENDPOINT=" + px.URL, "MICROVM_AGENT_TOKEN=" + token, "MICROVM_DIRECT=1"}
	dir := t.TempDir()
	src := filepath.Join(dir, "in.txt")
	if err := os.WriteFile(src, []byte("payload\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	plain, durable := filepath.Join(dir, "plain.txt"), filepath.Join(dir, "durable.txt")
	envelope(t, cli(t, env, "", "--json", "cp", src, "vm:"+plain))
	envelope(t, cli(t, env, "", "--json", "cp", "--sync", src, "vm:"+durable))
	mu.Lock()
	got := append([]string(nil), syncs...)
	mu.Unlock()
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
	mu.Lock()
	defer mu.Unlock()
	if len(syncs) != 2 {
		t.Fatalf("a refused cp reached the daemon: %q", syncs)
	}
}
