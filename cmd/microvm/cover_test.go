package main_test

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// The tests run the built binary in child processes, so `go test -cover`
// sees none of the lines they exercise, and a mutation tool that runs only
// covered mutants (make mutate) would run none of this package's. Under
// -cover the binary is therefore built with coverage counters too, every
// spawn of it gets GOCOVERDIR, and after the run the counters are appended to
// the test binary's own profile. Without -cover none of this happens.

// coverDir receives the spawned binaries' counters; empty without -cover.
var coverDir string

// coverBuildArgs are the extra `go build` flags for the binary under test.
func coverBuildArgs() []string {
	mode := testing.CoverMode()
	if mode == "" {
		return nil
	}
	return []string{"-cover", "-covermode=" + mode, "-coverpkg=."}
}

// setUpCover makes coverDir inside dir when the run measures coverage. It is
// world-writable: one test runs the binary as nobody.
func setUpCover(dir string) error {
	if testing.CoverMode() == "" {
		return nil
	}
	coverDir = filepath.Join(dir, "cover")
	if err := os.Mkdir(coverDir, 0o777); err != nil {
		return err
	}
	return os.Chmod(coverDir, 0o777) // past the umask
}

// coverEnv is laid over every spawned binary's environment. A binary built
// with -cover and run without GOCOVERDIR warns on stderr, which tests read.
func coverEnv() []string {
	if coverDir == "" {
		return nil
	}
	return []string{"GOCOVERDIR=" + coverDir}
}

// appendSpawnedCoverage adds the spawned binaries' counters to the profile
// the test binary wrote (-test.coverprofile), in its text format.
func appendSpawnedCoverage() error {
	if coverDir == "" {
		return nil
	}
	f := flag.Lookup("test.coverprofile")
	if f == nil || f.Value.String() == "" {
		return nil
	}
	profile := f.Value.String()
	if !filepath.IsAbs(profile) {
		if od := flag.Lookup("test.outputdir"); od != nil && od.Value.String() != "" {
			profile = filepath.Join(od.Value.String(), profile)
		}
	}
	text := filepath.Join(filepath.Dir(coverDir), "spawned.cov")
	if out, err := exec.Command("go", "tool", "covdata", "textfmt", "-i="+coverDir, "-o="+text).CombinedOutput(); err != nil {
		return fmt.Errorf("go tool covdata: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(text)
	if err != nil {
		return err
	}
	// Drop the "mode:" line: the profile already has it, and the modes are
	// the same by construction (coverBuildArgs).
	if i := bytes.IndexByte(raw, '\n'); i >= 0 && bytes.HasPrefix(raw, []byte("mode:")) {
		raw = raw[i+1:]
	}
	out, err := os.OpenFile(profile, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := out.Write(raw); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
