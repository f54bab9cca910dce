package agentd

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"golang.org/x/sys/unix"
)

// inV1Memory names the test-made cgroup v1 memory directory a re-run of
// TestMemoryLimitOOMKillsOnlyThatExec runs in, on a hybrid host.
const inV1Memory = "AGENTD_TEST_IN_V1_MEMORY"

// TestMemoryLimitOOMKillsOnlyThatExec: an exec limited to 64 MiB that
// allocates 256 MiB is OOM-killed with oom_killed true, while a concurrent
// exec finishes normally and the daemon answers on. Where the cgroup v2
// made for the test has no memory controller (a hybrid host, whose memory
// controller is bound to cgroup v1, as on the machine this was written on),
// the test re-runs itself inside a cgroup v1 memory directory it made under
// its own and points AGENTD_EXEC_CGROUP_V1_MEMORY there.
// The wrong edits it catches: limits ignored (the hog exits 0 or is killed
// by nobody), the whole daemon's cgroup limited (steady dies too), and
// oom_killed not read from the kernel's counter.
func TestMemoryLimitOOMKillsOnlyThatExec(t *testing.T) {
	root := delegatedCgroup(t)
	ctl, _ := os.ReadFile(filepath.Join(root, "cgroup.controllers"))
	v1 := os.Getenv(inV1Memory)
	if !hasWord(string(ctl), "memory") && v1 == "" {
		p := v1MemoryCgroup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
		defer cancel()
		// The child moves itself into p (a cgroup this test made) and
		// becomes the test; nothing writes a cgroup the test did not make.
		cmd := exec.CommandContext(ctx, "/bin/sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$@"`,
			p, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), inV1Memory+"="+p)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
			t.Fatalf("the test inside the cgroup v1 memory directory %s: %v\n%s", p, err, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "usage_test.go") {
				t.Log(strings.TrimSpace(line))
			}
		}
		return
	}
	d := startDaemon(t, func(c *Config) { c.ExecCgroup, c.ExecCgroupV1Memory = root, v1 })
	d.bootstrap(nil)
	d.mustStart(shell("steady", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo steady"))
	mem := uint64(64 << 20)
	req := protocol.StartRequest{ExecID: "hog", Command: helperCmd("alloc:256"), Limits: &protocol.ExecLimits{MemoryBytes: &mem}}
	d.mustStart(req)
	o := waitExitedLong(d, "hog")
	if o.OomKilled == nil || !*o.OomKilled || o.Signal == nil || *o.Signal != int32(unix.SIGKILL) {
		t.Fatalf("hog: oom_killed %v signal %v exit %v usage %+v, want true and SIGKILL", o.OomKilled, o.Signal, o.ExitCode, o.Usage)
	}
	// The kernel's high-water mark may pass the limit by what it charges
	// ahead in one go (the memory cgroup's per-CPU charge batch, 64 pages)
	// before the OOM killer runs: seen at limit + 4 KiB on a busy host. A
	// peak read from the wrong cgroup would be off by far more.
	slack := uint64(64 * os.Getpagesize())
	if o.Usage == nil || o.Usage.PeakMemoryBytes > mem+slack || o.Usage.PeakMemoryBytes < mem/2 {
		t.Fatalf("hog usage %+v, want a peak near the 64 MiB limit, not over it", o.Usage)
	}
	s := waitExitedLong(d, "steady")
	if s.ExitCode == nil || *s.ExitCode != 0 || s.OomKilled == nil || *s.OomKilled || s.Stdout == nil || *s.Stdout != "steady\n" {
		t.Fatalf("steady: exit %v oom_killed %v stdout %v, want 0, false, steady", s.ExitCode, s.OomKilled, s.Stdout)
	}
	// The daemon carries on: a new exec runs.
	d.mustStart(shell("after", "echo ok"))
	if a := d.waitExited("after"); a.ExitCode == nil || *a.ExitCode != 0 {
		t.Fatalf("an exec after the OOM kill: %+v", a)
	}
	t.Logf("hog OOM-killed at %d MiB peak (limit 64 MiB, v1 memory %q); steady exited 0", o.Usage.PeakMemoryBytes>>20, v1)
	// The exec's own memory counter (memory.peak, or v1's max_usage) sees
	// a 300 MiB allocator whole.
	d.mustStart(protocol.StartRequest{ExecID: "big", Command: helperCmd("alloc:300")})
	b := waitExitedLong(d, "big")
	if b.Usage == nil || b.Usage.Source != protocol.Cgroup || !within(float64(b.Usage.PeakMemoryBytes)/(1<<20), 300, 0.10) {
		t.Fatalf("300 MiB allocator in its cgroup: %+v", b.Usage)
	}
	t.Logf("300 MiB allocator, cgroup peak %.1f MiB", float64(b.Usage.PeakMemoryBytes)/(1<<20))
}

// v1MemoryCgroup makes a cgroup v1 memory directory under the test's own
// and removes it at the end, or skips naming why.
func v1MemoryCgroup(t *testing.T) string {
	t.Helper()
	mnt := ""
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(post)
		if ok && len(f) >= 3 && f[0] == "cgroup" && hasWord(strings.ReplaceAll(f[2], ",", " "), "memory") {
			mnt = strings.Fields(pre)[4]
		}
	}
	own := ""
	b, _ = os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 && hasWord(strings.ReplaceAll(f[1], ",", " "), "memory") {
			own = f[2]
		}
	}
	if mnt == "" || own == "" {
		t.Skip("the memory controller is in neither the test's cgroup v2 nor a cgroup v1 hierarchy")
	}
	parent := filepath.Join(mnt, own)
	dir, err := os.MkdirTemp(parent, "agentd-oom-test-")
	if err != nil {
		t.Skipf("cannot make a cgroup v1 memory directory under %s: %v", parent, err)
	}
	t.Cleanup(func() {
		for i := 0; i < 200; i++ {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if e.IsDir() {
					_ = os.Remove(filepath.Join(dir, e.Name()))
				}
			}
			if os.Remove(dir) == nil {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Errorf("could not remove the test cgroup %s", dir)
	})
	return dir
}
