package ledger

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A process that dies between Before and after leaves the step "started" on
// disk and the run listed as open. Catches a wrong edit that writes the
// ledger only after the call returns (the crash would leave no record).
func TestBeforeIsOnDiskAndCrashLeavesOpenRun(t *testing.T) {
	dir := t.TempDir()
	now := func() time.Time { return time.Unix(1_800_000_000, 0) }
	l, err := Open(dir, now)
	if err != nil {
		t.Fatal(err)
	}
	r, err := l.Begin("us-east-1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Before("RunMicrovm", "arn:aws:lambda:us-east-1:123456789012:microvm-image:x"); err != nil {
		t.Fatal(err)
	}
	// "Crash": read what a fresh process would find.
	l2, _ := Open(dir, now)
	open, err := l2.Open()
	if err != nil || len(open) != 1 || len(open[0].Steps) != 1 || open[0].Steps[0].State != Started {
		t.Fatalf("after a crash: %+v %v", open, err)
	}
}

// after records the outcome, and a closed run drops out of Open. Catches an
// edit that marks a failed call done, or lists closed runs as still billing.
func TestAfterAndClose(t *testing.T) {
	l, _ := Open(t.TempDir(), nil)
	r, _ := l.Begin("us-east-1")
	after, _ := r.Before("CreateMicrovmImage", "img")
	if err := after("arn:img", errors.New("boom")); err != nil {
		t.Fatal(err)
	}
	s := r.Snapshot()
	if s.Steps[0].State != Failed || s.Steps[0].Target != "arn:img" || !strings.Contains(s.Steps[0].Error, "boom") {
		t.Fatalf("step: %+v", s.Steps[0])
	}
	r.Update(func(run *Run) { run.Closed = true })
	if open, _ := l.Open(); len(open) != 0 {
		t.Fatalf("closed run still open: %+v", open)
	}
	if fi, _ := os.Stat(r.Path()); fi.Mode().Perm() != 0o600 {
		t.Fatalf("ledger file mode %v", fi.Mode().Perm())
	}
}

// TestDefaultDirOrder: MICROVM_STATE_DIR wins, then XDG_STATE_HOME, then the
// home directory. Catches the CLI and the sandbox resolving different
// directories, so `microvm ls` cannot see what a run recorded.
func TestDefaultDirOrder(t *testing.T) {
	t.Setenv("MICROVM_STATE_DIR", "/state/explicit")
	t.Setenv("XDG_STATE_HOME", "/xdg")
	if d, _ := DefaultDir(); d != "/state/explicit" {
		t.Fatalf("with MICROVM_STATE_DIR: %s", d)
	}
	t.Setenv("MICROVM_STATE_DIR", "")
	if d, _ := DefaultDir(); d != "/xdg/microvm/runs" {
		t.Fatalf("with XDG_STATE_HOME: %s", d)
	}
	t.Setenv("XDG_STATE_HOME", "")
	t.Setenv("HOME", "/home/u")
	if d, _ := DefaultDir(); d != "/home/u/.microvm/runs" {
		t.Fatalf("from HOME: %s", d)
	}
}

// TestListMissingDirIsEmpty: listing never creates the directory and a
// missing one has no runs. Catches List going through Open (MkdirAll).
func TestListMissingDirIsEmpty(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "absent")
	runs, bad, err := List(dir)
	if err != nil || len(runs) != 0 || len(bad) != 0 {
		t.Fatalf("List(missing) = %v %v %v", runs, bad, err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("List created %s", dir)
	}
}

// Catches: a record the reference CLI wrote (camelCase, no steps) hidden as
// unreadable or read with its identifiers lost, and a later terminate that
// cannot close it.
func TestReferenceRecordsAreReadAndClosed(t *testing.T) {
	dir := t.TempDir()
	ref := `{"runId":"1786000000-4242","region":"us-east-1","imageIdentifier":"arn:aws:lambda:us-east-1:123456789012:microvm-image:img","imageName":"img","microvmId":"mvm-1","leaked":["mvm-1","arn:aws:lambda:us-east-1:123456789012:microvm-image:img"]}`
	if err := os.WriteFile(filepath.Join(dir, "1786000000-4242.json"), []byte(ref), 0o600); err != nil {
		t.Fatal(err)
	}
	runs, unreadable, err := List(dir)
	if err != nil || len(unreadable) != 0 || len(runs) != 1 {
		t.Fatalf("%v %v %v", runs, unreadable, err)
	}
	r := runs[0]
	if r.ID != "1786000000-4242" || r.MicrovmID != "mvm-1" || r.Image != "img" || !strings.HasSuffix(r.ImageARN, ":img") || len(r.Leaked) != 2 || r.Closed || r.CreatedAt.Unix() != 1786000000 {
		t.Fatalf("%+v", r)
	}
	if err := Close(dir, r.ID, nil); err != nil {
		t.Fatal(err)
	}
	runs, _, _ = List(dir)
	if len(runs) != 1 || !runs[0].Closed || runs[0].MicrovmID != "mvm-1" || len(runs[0].Leaked) != 0 {
		t.Fatalf("after Close: %+v", runs)
	}
}
