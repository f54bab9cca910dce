// Package testbin builds this module's commands for tests that need the real
// binary (a real agentd process over real HTTP, the microvm CLI as a user
// runs it): each variant once per test binary, however many tests ask.
//
// It must never be imported by non-test code, and it builds only packages of
// this module.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// Module is this module's import path.
const Module = "github.com/microvms/microvms"

// GuestInit is the local guest init's package, built beside a host agentd.
const GuestInit = "cmd/microvm-guest-init"

// Options is one build variant.
type Options struct {
	GOOS, GOARCH string // empty: the host's
	LDFlags      string // e.g. a -X version stamp
	CGO          bool   // agentd ships static, so false unless asked
}

type build struct {
	once  sync.Once
	index int // names the file, so two variants never share one
	path  string
	err   error
}

var (
	mu     sync.Mutex
	builds = map[string]*build{}
	dir    string
)

// Build builds the package at pkg (relative to the module root, e.g.
// "cmd/agentd") with o, once per process, and returns the binary's path.
// Each variant gets a directory of its own; a host agentd gets the local
// guest init beside it (cmd/microvm-guest-init), as every install puts it,
// so guests of the tests start the way a user's do.
func Build(pkg string, o Options) (string, error) {
	key := fmt.Sprintf("%s|%+v", pkg, o)
	mu.Lock()
	b, ok := builds[key]
	if !ok {
		b = &build{index: len(builds)}
		builds[key] = b
	}
	mu.Unlock()
	b.once.Do(func() {
		d, err := tempDir()
		if err != nil {
			b.err = err
			return
		}
		name := strings.NewReplacer("/", "-", "|", "-").Replace(pkg) + fmt.Sprintf("-%d", b.index)
		out := filepath.Join(d, name)
		if err := os.Mkdir(out, 0o755); err != nil {
			b.err = err
			return
		}
		b.path = filepath.Join(out, filepath.Base(pkg))
		args := []string{"build", "-o", out + string(os.PathSeparator)}
		if o.LDFlags != "" {
			args = append(args, "-ldflags", o.LDFlags)
		}
		args = append(args, Module+"/"+pkg)
		if pkg == "cmd/agentd" && o.GOOS == "" && o.GOARCH == "" {
			args = append(args, Module+"/"+GuestInit)
		}
		cmd := exec.Command("go", args...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if o.CGO {
			cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		}
		if o.GOOS != "" {
			cmd.Env = append(cmd.Env, "GOOS="+o.GOOS)
		}
		if o.GOARCH != "" {
			cmd.Env = append(cmd.Env, "GOARCH="+o.GOARCH)
		}
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	return b.path, b.err
}

// MustBuild is Build for a test: a failed build fails t.
func MustBuild(t testing.TB, pkg string, o Options) string {
	t.Helper()
	p, err := Build(pkg, o)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// Agentd is the host's agentd, built static as the image's is.
func Agentd(t testing.TB) string { t.Helper(); return MustBuild(t, "cmd/agentd", Options{}) }

// Cleanup removes every binary built so far; a TestMain calls it after m.Run.
func Cleanup() {
	mu.Lock()
	defer mu.Unlock()
	if dir != "" {
		os.RemoveAll(dir)
		dir = ""
	}
	builds = map[string]*build{}
}

func tempDir() (string, error) {
	mu.Lock()
	defer mu.Unlock()
	if dir == "" {
		d, err := os.MkdirTemp("", "microvms-testbin-")
		if err != nil {
			return "", err
		}
		dir = d
	}
	return dir, nil
}
