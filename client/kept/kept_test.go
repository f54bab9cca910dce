package kept

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Catches: a record written readable by others (a plain os.WriteFile with
// 0644), a folder others can list, a Forget that leaves the token on disk,
// and a String that prints the token.
func TestSaveLoadForget(t *testing.T) {
	dir := t.TempDir()
	m := MicroVM{ID: "mvm-0123abc", Endpoint: "127.0.0.1:4590", AgentToken: "secret-token", Port: 9000, ControlEndpoint: "http://127.0.0.1:4590", Region: "us-east-1"}
	if err := Save(dir, m); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(Dir(dir), m.ID+".json"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("record mode %v %v", st.Mode(), err)
	}
	if st, err := os.Stat(Dir(dir)); err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("folder mode %v %v", st.Mode(), err)
	}
	got, err := Load(dir, m.ID)
	if err != nil || got.AgentToken != m.AgentToken || got.Endpoint != m.Endpoint || got.ControlEndpoint != m.ControlEndpoint || got.KeptAt.IsZero() {
		t.Fatalf("%+v %v", got, err)
	}
	if s := fmt.Sprintf("%v %#v %s", got, got, got); strings.Contains(s, "secret-token") {
		t.Fatalf("the token is printed: %s", s)
	}
	if ids, err := IDs(dir); err != nil || len(ids) != 1 || ids[0] != m.ID {
		t.Fatalf("%v %v", ids, err)
	}
	if err := Forget(dir, m.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, m.ID); !errors.Is(err, ErrNotKept) {
		t.Fatalf("after Forget: %v", err)
	}
	if err := Forget(dir, m.ID); err != nil {
		t.Fatalf("a second Forget: %v", err)
	}
}

// Catches: a token read from a file another user could read (or replace),
// and an id that walks out of the folder.
func TestRefusals(t *testing.T) {
	dir := t.TempDir()
	m := MicroVM{ID: "mvm-1", Endpoint: "e", AgentToken: "t"}
	if err := Save(dir, m); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(Dir(dir), "mvm-1.json"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(dir, "mvm-1"); err == nil || !strings.Contains(err.Error(), "readable by others") {
		t.Fatalf("a 0644 record was used: %v", err)
	}
	for _, id := range []string{"../runs/x", "", ".hidden", "a/b"} {
		if err := Save(dir, MicroVM{ID: id, Endpoint: "e", AgentToken: "t"}); err == nil {
			t.Fatalf("Save took id %q", id)
		}
		if _, err := Load(dir, id); err == nil || errors.Is(err, ErrNotKept) {
			t.Fatalf("Load took id %q: %v", id, err)
		}
	}
	if err := Save(dir, MicroVM{ID: "mvm-2"}); err == nil {
		t.Fatal("a record without a token was saved")
	}
}
