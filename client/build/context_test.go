package build

import (
	"archive/zip"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// Catches: a local build context that carries the whole directory (secrets
// beside the Dockerfile uploaded) or misses a COPY'd file, a directory
// source copied without its tree, and a context that changes the artifact
// or the reuse hash of a build that copies nothing else.
func TestContextCarriesOnlyWhatTheDockerfileCopies(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"tool.sh": "#!/bin/sh\n", "conf/a.toml": "a", "conf/sub/b.toml": "b", "secret.env": "TOKEN=x", "agentd": "not the daemon",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	df := "FROM x\nCOPY agentd /agentd\nCOPY --chmod=0755 tool.sh /usr/local/bin/\nADD conf /etc/app\nCOPY missing.txt /x\n"
	files, err := ContextFiles([]byte(df), dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name)
	}
	if want := []string{"conf/a.toml", "conf/sub/b.toml", "tool.sh"}; !slices.Equal(names, want) {
		t.Fatalf("context files %v, want %v", names, want)
	}
	daemon := []byte("daemon")
	zipped, err := ArtifactWith(df, daemon, files)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(zipped), int64(len(zipped)))
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	for _, f := range zr.File {
		entries = append(entries, f.Name)
	}
	if want := []string{"Dockerfile", "agentd", "conf/a.toml", "conf/sub/b.toml", "tool.sh"}; !slices.Equal(entries, want) {
		t.Fatalf("artifact entries %v, want %v", entries, want)
	}
	if ContentHashWith(df, daemon, files) == ContentHash(df, daemon) {
		t.Fatal("the reuse hash ignores the context: an image built from other context bytes would be reused")
	}
	plain, _ := Artifact(df, daemon)
	if with, _ := ArtifactWith(df, daemon, nil); !bytes.Equal(plain, with) || ContentHashWith(df, daemon, nil) != ContentHash(df, daemon) {
		t.Fatal("an empty context changed the artifact or its hash")
	}
}
