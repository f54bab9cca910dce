package agentd

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// fakeProc writes the four /proc files the sampler reads into dir.
func fakeProc(t *testing.T, dir, stat, uptime, meminfo, loadavg string) {
	t.Helper()
	for name, body := range map[string]string{"stat": stat, "uptime": uptime, "meminfo": meminfo, "loadavg": loadavg} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// GET /v1/metrics over a /proc whose numbers the test chose: every figure
// is the one those files give, to the byte and the tick.
//
// Catches, in parseProcStat: a line other than the aggregate read
// (`string(fields[0]) != "cpu"` negated: cpu0, or intr, instead), the guest
// columns counted (`i >= 8` made
// `> 8`), idle or iowait counted as busy or another column left out (either
// `i != 3 && i != 4` test negated or made `<`/`>`), a cpu line of exactly
// five fields skipped (`len(fields) < 5` made `<=`); in parseMeminfo, a
// figure without its unit skipped (`len(fields) < 2` made `<=`); in
// parseLoadavg, a load of exactly 0 or exactly 1e9 refused (`f < 0` or
// `f > 1e9` made non-strict); in sample, two readings with the same
// counters measured against boot (`cur.total >= m.prev.total` or
// `cur.busy >= m.prev.busy` made `>`: the second reading's window is then
// the uptime and its use the average since boot), and a reading with no
// ticks since the last divided by zero (`d > 0` made `>= 0`: NaN); an empty
// uptime file indexed (`len(f) > 0` made `>= 0`); the disk measured at
// "/" while the working directory is known (Getwd's `err != nil` negated),
// and any of its byte counts computed with `/` for `*`.
func TestMetricsFromAKnownProc(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	proc := t.TempDir()
	d.srv.metrics.procRoot = proc
	get := func() protocol.Metrics {
		t.Helper()
		r, err := d.client.MetricsWithResponse(context.Background(), auth(testToken))
		if err != nil || r.JSON200 == nil {
			t.Fatalf("metrics: %v %d %s", err, r.StatusCode(), r.Body)
		}
		return *r.JSON200
	}
	// user nice system idle iowait irq softirq steal guest guest_nice:
	// total 720 (the guest columns are inside user and nice), idle and
	// iowait 450, busy 270.
	stat := "cpu  10 20 30 400 50 60 70 80 90 100\ncpu0 1 1 1 1 1 1 1 1 1 1\nintr 5 6 7 8 9\n"
	fakeProc(t, proc, stat, "1234.5 999.0\n",
		"MemTotal:       1000 kB\nMemFree:          10 kB\nMemAvailable:    400\n",
		"0.00 1.25 1000000000 1/100 4321\n")
	m := get()
	if m.CPU.UsedPercent != 37.5 || m.CPU.WindowSecs != 1234.5 {
		t.Fatalf("first reading: cpu %+v, want 37.5%% (270 of 720 ticks) over the uptime, 1234.5 s", m.CPU)
	}
	if m.Memory != (protocol.MemoryMetrics{TotalBytes: 1024000, AvailableBytes: 409600, UsedBytes: 614400}) {
		t.Fatalf("memory %+v, want 1000 kB total, 400 kB available", m.Memory)
	}
	if m.Load != (protocol.LoadAverage{Load1: 0, Load5: 1.25, Load15: 1e9}) {
		t.Fatalf("load %+v, want 0, 1.25, 1e9", m.Load)
	}
	// The disk is the working directory's filesystem, in bytes. Free space
	// moves while other processes write, so that is compared within 1 GiB.
	wd, _ := os.Getwd()
	var st unix.Statfs_t
	if err := unix.Statfs(wd, &st); err != nil {
		t.Fatal(err)
	}
	bs := uint64(st.Bsize)
	near := func(a, b uint64) bool { return max(a, b)-min(a, b) < 1<<30 }
	if m.Disk.Path != wd || m.Disk.TotalBytes != st.Blocks*bs || !near(m.Disk.AvailableBytes, st.Bavail*bs) || !near(m.Disk.UsedBytes, (st.Blocks-st.Bfree)*bs) {
		t.Fatalf("disk %+v; statfs of %s says %d total, %d available, %d used", m.Disk, wd, st.Blocks*bs, st.Bavail*bs, (st.Blocks-st.Bfree)*bs)
	}

	// The same counters again: no tick since the last reading, so 0% over
	// the time since it, not the average since boot.
	m = get()
	if m.CPU.UsedPercent != 0 || m.CPU.WindowSecs >= 1234.5 {
		t.Fatalf("a reading with no new ticks: cpu %+v, want 0%% over the time since the last reading", m.CPU)
	}
	// 110 more ticks, 10 of them busy.
	fakeProc(t, proc, "cpu  20 20 30 500 50 60 70 80 90 100\n", "1240.0\n",
		"MemTotal: 1000 kB\nMemAvailable: 400 kB\n", "0.5 0.5 0.5\n")
	m = get()
	if want := 1000.0 / 110; math.Abs(m.CPU.UsedPercent-want) > 1e-9 || m.CPU.WindowSecs >= 1234.5 {
		t.Fatalf("110 ticks later, 10 busy: cpu %+v, want %v%% over the time since the last reading", m.CPU, want)
	}
	// Counters that went backwards (another boot's /proc): measured since
	// boot again. The line has only the first four columns; the uptime
	// file is empty, so the window is 0.
	fakeProc(t, proc, "cpu 1 2 3 4\n", "", "MemTotal: 1000 kB\nMemAvailable: 400 kB\n", "0.5 0.5 0.5\n")
	m = get()
	if m.CPU.UsedPercent != 60 || m.CPU.WindowSecs != 0 {
		t.Fatalf("counters reset, four columns, no uptime: cpu %+v, want 60%% (6 of 10) over 0 s", m.CPU)
	}

	// The largest kB count whose bytes fit the API's int64 is read; the
	// next one, 1<<53 kB, is refused. Catches: the bound `v >= 1<<53` made
	// `>`. It was `v > (1<<54)` until this test: a MemTotal of 1<<54 kB
	// wrapped to 0 bytes, and anything from 1<<53 kB on broke the schema.
	fakeProc(t, proc, stat, "1.0\n", "MemTotal: 9007199254740991 kB\nMemAvailable: 1 kB\n", "0 0 0\n")
	if m := get(); m.Memory.TotalBytes != (1<<53-1)*1024 {
		t.Fatalf("MemTotal of 1<<53-1 kB: %d bytes", m.Memory.TotalBytes)
	}
	for _, kb := range []string{"9007199254740992", "18014398509481984"} {
		fakeProc(t, proc, stat, "1.0\n", "MemTotal: "+kb+" kB\nMemAvailable: 1 kB\n", "0 0 0\n")
		r, err := d.client.MetricsWithResponse(context.Background(), auth(testToken))
		if err != nil {
			t.Fatal(err)
		}
		wantSlug(t, "MemTotal of "+kb+" kB", r.StatusCode(), r.Body, 500, taxonomy.SlugMetricsUnavailable)
	}

	// A negative, not-a-number or absurd load is refused, and the refusal
	// names the field; so does an unreadable cpu column. Catches: `i+1` in
	// either message made `i-1` or `i*1`.
	for _, tc := range []struct{ stat, load, want string }{
		{stat, "-0.5 0 0\n", "/proc/loadavg: field 1 is not a load"},
		{stat, "0 NaN 0\n", "/proc/loadavg: field 2 is not a load"},
		{stat, "0 0 1000000000.5\n", "/proc/loadavg: field 3 is not a load"},
		{"cpu 1 2 x 4\n", "0 0 0\n", "/proc/stat: cpu column 3 is not a counter"},
	} {
		fakeProc(t, proc, tc.stat, "1.0\n", "MemTotal: 1000 kB\nMemAvailable: 400 kB\n", tc.load)
		r, err := d.client.MetricsWithResponse(context.Background(), auth(testToken))
		if err != nil {
			t.Fatal(err)
		}
		wantSlug(t, "loadavg "+tc.load, r.StatusCode(), r.Body, 500, taxonomy.SlugMetricsUnavailable)
		if !strings.Contains(string(r.Body), tc.want) {
			t.Fatalf("stat %q, loadavg %q: %s, want it to say %q", tc.stat, tc.load, r.Body, tc.want)
		}
	}
}
