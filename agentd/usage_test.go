package agentd

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
	"golang.org/x/sys/unix"
)

// usageHelperEnv makes TestHelperUsageChild do work instead of skipping:
// "alloc:MiB" touches MiB of memory and exits; "burn:MS:FILE" spins until
// the process has used MS of CPU, then writes its own /proc/self/stat
// utime+stime (ticks) to FILE and exits.
const usageHelperEnv = "AGENTD_USAGE_HELPER"

func TestHelperUsageChild(t *testing.T) {
	mode := os.Getenv(usageHelperEnv)
	if mode == "" {
		t.Skip("a child process for the usage tests, not a test")
	}
	f := strings.Split(mode, ":")
	switch f[0] {
	case "alloc":
		mib, _ := strconv.Atoi(f[1])
		b := make([]byte, mib<<20)
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		fmt.Println(len(b) >> 20)
		os.Exit(0)
	case "burn":
		ms, _ := strconv.Atoi(f[1])
		x := 0
		for i := 0; i < 1e9; i++ { // bounded: about 1e9 cheap steps at most
			for j := 0; j < 100000; j++ {
				x += j ^ i
			}
			var ru unix.Rusage
			_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
			if (ru.Utime.Sec+ru.Stime.Sec)*1000+(ru.Utime.Usec+ru.Stime.Usec)/1000 >= int64(ms) {
				break
			}
		}
		ticks := selfStatCPUTicks(t)
		if err := os.WriteFile(f[2], []byte(strconv.FormatUint(ticks, 10)), 0o644); err != nil {
			os.Exit(3)
		}
		if x == -1 { // never; x is used, so the loop is not optimised away
			os.Exit(4)
		}
		os.Exit(0)
	}
	os.Exit(2)
}

// selfStatCPUTicks is utime+stime (fields 14 and 15) of /proc/self/stat.
func selfStatCPUTicks(t testing.TB) uint64 {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:])) // f[0] is field 3
	u, _ := strconv.ParseUint(f[11], 10, 64)
	s, _ := strconv.ParseUint(f[12], 10, 64)
	return u + s
}

func helperCmd(mode string) []string {
	return []string{"/usr/bin/env", usageHelperEnv + "=" + mode, os.Args[0], "-test.run=^TestHelperUsageChild$", "-test.count=1"}
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// delegatedCgroup makes a cgroup v2 directory for the test under the test
// process's own cgroup v2 (writing no control file of any cgroup it did not
// make) and removes it at the end; it skips naming why where there is none.
func delegatedCgroup(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a cgroup v2 directory")
	}
	mnt := ""
	mf, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Skip("no /proc/self/mountinfo")
	}
	sc := bufio.NewScanner(mf)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if ok && strings.HasPrefix(post, "cgroup2 ") {
			mnt = strings.Fields(pre)[4]
			break
		}
	}
	mf.Close()
	if mnt == "" {
		t.Skip("no cgroup v2 filesystem is mounted")
	}
	own := ""
	b, _ := os.ReadFile("/proc/self/cgroup")
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			own = rest
		}
	}
	parent := filepath.Join(mnt, own)
	if unix.Access(parent, unix.W_OK) != nil {
		t.Skipf("the test's own cgroup v2 %s is not writable", parent)
	}
	dir, err := os.MkdirTemp(parent, "agentd-usage-test-")
	if err != nil {
		t.Skipf("cannot make a cgroup under %s: %v", parent, err)
	}
	t.Cleanup(func() {
		// The exec cgroups first; their processes are gone by now, or
		// leaving in a few milliseconds.
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

func within(got, want, frac float64) bool { return math.Abs(got-want) <= frac*want }

// TestUsageOfAnExecWhoseChildrenOutliveIt: four CPU burners forked by a
// shell that exits at once, holding its stdout, are counted by the exec's
// cgroup within 10% of what /proc says they used. The wrong edits it
// catches: usage taken from the leader's rusage (a few ms: nobody waited
// for the burners), or read at the leader's reap, before they ran.
func TestUsageOfAnExecWhoseChildrenOutliveIt(t *testing.T) {
	root := delegatedCgroup(t)
	d := startDaemon(t, func(c *Config) {
		c.ExecCgroup = root
		c.OutputLinger = 120 * time.Second // the burners hold stdout until they end
	})
	d.bootstrap(nil)
	tmp := t.TempDir()
	var script strings.Builder
	for i := range 4 {
		file := filepath.Join(tmp, "burner"+strconv.Itoa(i))
		fmt.Fprintf(&script, "%s & ", strings.Join(shQuoteAll(helperCmd("burn:300:"+file)), " "))
	}
	script.WriteString("exit 0")
	d.mustStart(shell("burn", script.String()))
	o := waitExitedLong(d, "burn")
	if o.ExitCode == nil || *o.ExitCode != 0 || o.WritersMayBeAlive == nil || *o.WritersMayBeAlive {
		t.Fatalf("exit %v writers_may_be_alive %v, want 0 and false", o.ExitCode, o.WritersMayBeAlive)
	}
	if o.Usage == nil || o.Usage.Source != protocol.Cgroup {
		t.Fatalf("usage %+v, want source cgroup", o.Usage)
	}
	var procTicks uint64
	for i := range 4 {
		b, err := os.ReadFile(filepath.Join(tmp, "burner"+strconv.Itoa(i)))
		if err != nil {
			t.Fatalf("burner %d: %v", i, err)
		}
		n, _ := strconv.ParseUint(string(b), 10, 64)
		procTicks += n
	}
	procSecs := float64(procTicks) / userHZ
	got := o.Usage.UserCPUSecs + o.Usage.SystemCPUSecs
	t.Logf("cgroup usage %.3f s CPU (user %.3f, system %.3f); /proc says the burners used %.2f s; wall %.3f s",
		got, o.Usage.UserCPUSecs, o.Usage.SystemCPUSecs, procSecs, o.Usage.WallSecs)
	if procSecs < 1.0 {
		t.Fatalf("the burners used %.2f s, well under the 4 x 0.3 s they were asked for", procSecs)
	}
	if !within(got, procSecs, 0.10) {
		t.Fatalf("usage says %.3f s of CPU, /proc %.3f s: more than 10%% apart", got, procSecs)
	}
	// GET /v1/execs lists the same usage for the finished exec.
	resp, err := d.client.ExecListWithResponse(t.Context(), auth(testToken))
	if err != nil || resp.JSON200 == nil {
		t.Fatalf("list: %v", err)
	}
	found := false
	for _, e := range resp.JSON200.Execs {
		if e.ExecID == "burn" {
			found = true
			if e.Usage == nil || e.Usage.UserCPUSecs != o.Usage.UserCPUSecs || e.Usage.PeakMemoryBytes != o.Usage.PeakMemoryBytes {
				t.Fatalf("listed usage %+v, polled %+v", e.Usage, o.Usage)
			}
			if e.OomKilled == nil || *e.OomKilled {
				t.Fatalf("listed oom_killed %v, want false", e.OomKilled)
			}
		}
	}
	if !found {
		t.Fatal("the finished exec is not listed")
	}
}

// TestUsageWithoutACgroupIsRusageAndSaysWhatItMisses: the fast path makes no
// cgroup; its usage is wait4's, says so, and names what wait4 cannot see.
// Also: a 300 MiB allocator's peak is within 10% of 300 MiB, and output
// bytes are counted past the head cap.
func TestUsageWithoutACgroupIsRusageAndSaysWhatItMisses(t *testing.T) {
	// wait4's peak is at least agentd's own (a vfork'd child inherits its
	// high-water mark), and this test binary may have grown past 300 MiB
	// in earlier tests: the daemon runs in a fresh copy of the binary.
	if !inFreshProcess(t) {
		return
	}
	d := startDaemon(t, func(c *Config) { c.MaxOutputBytes = 1024 })
	d.bootstrap(nil)
	d.mustStart(protocol.StartRequest{ExecID: "alloc", Command: helperCmd("alloc:300")})
	o := waitExitedLong(d, "alloc")
	u := o.Usage
	if u == nil || u.Source != protocol.Rusage || len(u.Missing) == 0 || u.PeakProcesses != nil {
		t.Fatalf("usage %+v, want rusage naming what it misses", u)
	}
	peakMiB := float64(u.PeakMemoryBytes) / (1 << 20)
	t.Logf("300 MiB allocator: peak %.1f MiB, user %.3f s, system %.3f s, wall %.3f s", peakMiB, u.UserCPUSecs, u.SystemCPUSecs, u.WallSecs)
	if !within(peakMiB, 300, 0.10) {
		t.Fatalf("peak %.1f MiB, want within 10%% of 300 MiB", peakMiB)
	}
	for _, m := range u.Missing {
		if strings.Contains(m, "inherits agentd's high-water mark") {
			t.Fatalf("a 300 MiB peak flagged as possibly agentd's: %q", m)
		}
	}
	// A small command's peak is bounded by agentd's and says so: the wrong
	// edit is presenting agentd's high-water mark as the command's.
	d.mustStart(shell("small", "true"))
	if s := d.waitExited("small"); s.Usage == nil || !strings.Contains(strings.Join(s.Usage.Missing, "|"), "inherits agentd's high-water mark") {
		t.Fatalf("small command's usage %+v, want the inherited-peak note", s.Usage)
	}
	if o.OomKilled == nil || *o.OomKilled {
		t.Fatalf("oom_killed %v, want false", o.OomKilled)
	}
	d.mustStart(shell("bytes", "head -c 5000 /dev/zero; head -c 7 /dev/zero >&2"))
	o = d.waitExited("bytes")
	if o.Usage == nil || o.Usage.StdoutBytes != 5000 || o.Usage.StderrBytes != 7 || o.Truncated == nil || !*o.Truncated {
		t.Fatalf("usage %+v truncated %v, want 5000 and 7 bytes counted past the 1024-byte cap", o.Usage, o.Truncated)
	}
	// The exit event carries the same usage.
	_, _, exit := collect(t, d.stream("bytes", nil), 0)
	if exit.Usage == nil || exit.Usage.StdoutBytes != 5000 || exit.OomKilled == nil || *exit.OomKilled {
		t.Fatalf("exit event usage %+v oom_killed %v", exit.Usage, exit.OomKilled)
	}
}

// TestLimitsAreRefusedWhereTheyCannotBeApplied: without a delegated cgroup
// (or without the controller a limit needs) a start with limits is refused
// 409 limits_unavailable naming why, and nothing runs. The wrong edit it
// catches: ignoring limits and running the command unlimited.
func TestLimitsAreRefusedWhereTheyCannotBeApplied(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	marker := filepath.Join(t.TempDir(), "ran")
	mem := uint64(64 << 20)
	req := shell("limited", "touch "+shQuote(marker))
	req.Limits = &protocol.ExecLimits{MemoryBytes: &mem}
	resp := d.start(req)
	if resp.StatusCode() != http.StatusConflict {
		t.Fatalf("start with limits and no cgroup: %d %s, want 409", resp.StatusCode(), resp.Body)
	}
	eb := errorBody(t, resp.Body)
	if eb.Error != taxonomy.SlugLimitsUnavailable || !strings.Contains(eb.Detail, protocol.EnvExecCgroup) {
		t.Fatalf("refusal %+v, want limits_unavailable naming %s", eb, protocol.EnvExecCgroup)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the refused command ran")
	}
	if code, _ := d.poll("limited"); code != http.StatusNotFound {
		t.Fatalf("poll of the refused exec: %d, want 404", code)
	}
	// With a cgroup v2 root whose controllers lack pids, a pids limit is
	// refused naming the controller (on a host that delegates pids, the
	// exec runs instead).
	if os.Geteuid() != 0 {
		return
	}
	t.Run("controller not delegated", func(t *testing.T) {
		root := delegatedCgroup(t)
		if ctl, _ := os.ReadFile(filepath.Join(root, "cgroup.controllers")); hasWord(string(ctl), "pids") {
			t.Skip("this host delegates the pids controller")
		}
		d := startDaemon(t, func(c *Config) { c.ExecCgroup = root })
		d.bootstrap(nil)
		pids := uint32(16)
		req := shell("pids", "touch "+shQuote(marker))
		req.Limits = &protocol.ExecLimits{Pids: &pids}
		resp := d.start(req)
		eb := errorBody(t, resp.Body)
		if resp.StatusCode() != http.StatusConflict || !strings.Contains(eb.Detail, "pids controller") {
			t.Fatalf("pids limit without the controller: %d %+v", resp.StatusCode(), eb)
		}
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the refused command ran")
		}
	})
}

func waitExitedLong(d *daemon, id string) outcome {
	d.t.Helper()
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		code, o := d.poll(id)
		if code != http.StatusOK {
			d.t.Fatalf("poll %s: %d", id, code)
		}
		if o.Phase != string(protocol.PhaseRunning) {
			return o
		}
		time.Sleep(20 * time.Millisecond)
	}
	d.t.Fatalf("exec %s still running at the deadline", id)
	return outcome{}
}

func shQuoteAll(argv []string) []string {
	out := make([]string, len(argv))
	for i, a := range argv {
		out[i] = shQuote(a)
	}
	return out
}

// FuzzStatField: the cgroup "key value" reader never panics, and a value it
// reports is the one on the key's first line.
func FuzzStatField(f *testing.F) {
	f.Add([]byte("usage_usec 10\nuser_usec 7\nsystem_usec 3\n"), "user_usec")
	f.Add([]byte("oom 0\noom_kill 2\n"), "oom_kill")
	f.Add([]byte("oom_kill\n oom_kill 1"), "oom_kill")
	f.Fuzz(func(t *testing.T, b []byte, key string) {
		if len(b) > 1<<16 {
			return
		}
		n, ok := statField(b, key)
		if ok && !strings.Contains(string(b), key+" ") {
			t.Fatalf("found %d for %q in %q", n, key, b)
		}
	})
}

const inFreshEnv = "AGENTD_TEST_FRESH_PROCESS"

// inFreshProcess re-runs the calling test in a new copy of the test binary
// and reports false (the caller returns) in the parent, which checks the
// copy passed; in the copy it reports true.
func inFreshProcess(t *testing.T) bool {
	t.Helper()
	if os.Getenv(inFreshEnv) != "" {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), inFreshEnv+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("the test in a fresh process: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "usage_test.go") {
			t.Log(strings.TrimSpace(line))
		}
	}
	return false
}
