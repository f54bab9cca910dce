package agentd

// Round two of the hostile-caller suite (issue 30): each test here is one row
// of that table, was seen failing on the code before its fix, and runs
// under `make faults`.

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// A timeout_sec below limits.min_timeout_secs is a 400 naming the minimum and
// spawns nothing; the minimum itself is accepted and enforced. Before: 1e-10
// and 1e-300 passed as "finite positive", became a zero Duration, and the
// child ran with no timeout at all. Catches: dropping the minimum check (the
// child runs unbounded), comparing with <= (the minimum itself refused), or a
// minimum the contract does not publish.
func TestRoundTwoTimeoutBelowResolution(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.KillGrace = time.Second })
	marker := filepath.Join(t.TempDir(), "ran")
	for _, tiny := range []float64{1e-10, 1e-300, protocol.DefaultMinTimeoutSecs * 0.999} {
		req := shell("tiny", "touch "+marker)
		req.TimeoutSec = &tiny
		// Off contract on purpose: the contract's minimum is the figure refused.
		resp, err := d.client.ExecStartWithResponse(offContract(context.Background()), req, auth(testToken))
		if err != nil || resp.StatusCode() != http.StatusBadRequest || errorBody(t, resp.Body).Error != taxonomy.SlugMalformedRequest ||
			!strings.Contains(string(resp.Body), "0.001") || !strings.Contains(string(resp.Body), "min_timeout_secs") {
			t.Fatalf("timeout_sec %g: %v %d %s", tiny, err, resp.StatusCode(), resp.Body)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("a start with a timeout below the minimum spawned its child")
	}
	// The minimum edge: accepted, and the child is stopped by it.
	req := shell("edge", "sleep 30")
	edge := protocol.DefaultMinTimeoutSecs
	req.TimeoutSec = &edge
	d.mustStart(req)
	if o := d.waitExited("edge"); o.Signal == nil || *o.Signal != int32(syscall.SIGTERM) {
		t.Fatalf("exec at the minimum timeout: %v", o.raw)
	}
	sch, _ := d.client.SchemaWithResponse(context.Background())
	if !strings.Contains(string(sch.Body), `"min_timeout_secs"`) {
		t.Fatal("/v1/schema does not publish min_timeout_secs")
	}
}

// Every fs route refuses a relative path with 400 before touching the
// filesystem. Before: ../../etc was a 404 and a deeper ../…/etc or ./ a 200,
// resolved against the daemon's working directory. Catches: a route that
// checks only for a NUL or length (badPath alone), or one route left out.
func TestRoundTwoRelativePathsAre400(t *testing.T) {
	d := bootedDaemon(t, nil)
	// The routes that change things get a relative path that resolves into a
	// temp dir, so a regression writes only there; the read-only ones also get
	// the shapes, a deep ../…/etc and ./.
	cwd, _ := os.Getwd()
	scratch := t.TempDir()
	if err := os.WriteFile(filepath.Join(scratch, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	intoScratch, err := filepath.Rel(cwd, filepath.Join(scratch, "f"))
	if err != nil || filepath.IsAbs(intoScratch) {
		t.Fatalf("no relative path from %s to %s: %v", cwd, scratch, err)
	}
	type route struct{ method, path string }
	var routes []route
	for _, rel := range []string{strings.Repeat("../", 40) + "etc", "./", ".", intoScratch} {
		q := url.Values{"path": {rel}}.Encode()
		routes = append(routes, route{"GET", "/v1/fs/file?" + q}, route{"GET", "/v1/fs/tar?" + q}, route{"GET", "/v1/fs/tar/exact?" + q},
			route{"GET", "/v1/fs/stat?" + q}, route{"GET", "/v1/fs/list?" + q}, route{"GET", "/v1/fs/watch?" + q})
	}
	q := url.Values{"path": {intoScratch}}.Encode()
	routes = append(routes, route{"PUT", "/v1/fs/file?" + q}, route{"PUT", "/v1/fs/tar?" + q}, route{"PUT", "/v1/fs/tar/exact?" + q},
		route{"POST", "/v1/fs/mkdir?" + url.Values{"path": {intoScratch + "-dir"}}.Encode()},
		route{"POST", "/v1/fs/remove?" + q},
		route{"POST", "/v1/fs/move?" + url.Values{"from": {intoScratch}, "to": {filepath.Join(scratch, "g")}}.Encode()},
		route{"POST", "/v1/fs/move?" + url.Values{"from": {filepath.Join(scratch, "f")}, "to": {intoScratch + "-moved"}}.Encode()})
	// Every fs route of the contract is in the list above. Catches: a new
	// path-taking route added to api/openapi.yaml but left out of this test,
	// so nothing proves it refuses a relative path.
	covered := map[string]bool{}
	for _, r := range routes {
		p, _, _ := strings.Cut(r.path, "?")
		covered[r.method+" "+p] = true
	}
	for _, op := range protocol.Operations {
		if strings.HasPrefix(op.Pattern, "/v1/fs/") && !covered[op.Method+" "+op.Pattern] {
			t.Errorf("%s %s (%s) is an fs route this test does not send a relative path to: add it to the routes list above", op.Method, op.Pattern, op.ID)
		}
	}
	for _, route := range routes {
		var body io.Reader
		if route.method == "PUT" {
			body = strings.NewReader("x")
		}
		// A watch the old code accepted streams forever; the deadline ends it.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		req, _ := http.NewRequestWithContext(ctx, route.method, d.base+route.path, body)
		req.Header.Set("Authorization", "Bearer "+testToken)
		if strings.HasPrefix(route.path, "/v1/fs/tar") {
			req.Header.Set("Content-Type", "application/x-tar")
		} else if route.method == "PUT" {
			req.Header.Set("Content-Type", "application/octet-stream")
		}
		resp, err := d.http.Do(req)
		if err != nil {
			cancel()
			t.Fatalf("%s %s: %v", route.method, route.path, err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), "absolute") {
			t.Errorf("%s %s: %d %.120q, want 400 naming an absolute path", route.method, route.path, resp.StatusCode, got)
		}
	}
	if b, err := os.ReadFile(filepath.Join(scratch, "f")); err != nil || string(b) != "x" {
		t.Errorf("a refused relative path still reached the file it resolves to: %q %v", b, err)
	}
}

// openCappedWatch starts a watch stream of dir and returns once its ready event
// arrived (or the refusal, with its status and body), never waiting past a
// deadline: a cap must refuse, not hang.
func openCappedWatch(t *testing.T, d *daemon, dir string) (status int, body string, stop func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	req, _ := http.NewRequestWithContext(ctx, "GET", d.base+"/v1/fs/watch?"+url.Values{"path": {dir}}.Encode(), nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := d.http.Do(req)
	if err != nil {
		cancel()
		t.Fatalf("watch: %v", err)
	}
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		return resp.StatusCode, string(b), func() {}
	}
	buf := make([]byte, 0, 256)
	chunk := make([]byte, 256)
	for !strings.Contains(string(buf), "event: ready") {
		n, err := resp.Body.Read(chunk)
		buf = append(buf, chunk[:n]...)
		if err != nil {
			cancel()
			t.Fatalf("watch ended before ready: %v %q", err, buf)
		}
	}
	// The deadline bounds the whole stream; the test is done well within it.
	return resp.StatusCode, "", func() { cancel(); resp.Body.Close() }
}

func inotifyInstances(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "anon_inode:inotify" {
			n++
		}
	}
	return n
}

// Concurrent watches are capped at limits.max_watches and terminals at
// limits.max_ptys: one over is 429 at_capacity at once, creating nothing, and
// a slot comes back when its holder ends. Before: 100 watches made 100 inotify
// instances (a root process could then open only 28) and terminals had no
// cap at all. Catches: no cap, a cap that blocks instead of refusing (the
// request hangs to the deadline), a slot never given back (the retry after
// one ends is refused too), or a refusal with a slug the contract does not
// list.
func TestRoundTwoWatchesAndTerminalsAreCapped(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.MaxPtys = 2 })
	dir := t.TempDir()
	before := inotifyInstances(t)
	var stops []func()
	for range protocol.DefaultMaxWatches {
		status, body, stop := openCappedWatch(t, d, dir)
		if status != http.StatusOK {
			t.Fatalf("watch within the cap: %d %s", status, body)
		}
		stops = append(stops, stop)
	}
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	began := time.Now()
	status, body, _ := openCappedWatch(t, d, dir)
	if status != http.StatusTooManyRequests || errorBody(t, []byte(body)).Error != taxonomy.SlugAtCapacity || !strings.Contains(body, "max_watches") {
		t.Fatalf("watch over the cap: %d %s", status, body)
	}
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("the refusal took %v", took)
	}
	if n := inotifyInstances(t) - before; n > int(protocol.DefaultMaxWatches) {
		t.Fatalf("%d inotify instances for a cap of %d", n, protocol.DefaultMaxWatches)
	}
	stops[0]()
	stops = stops[1:]
	deadline := time.Now().Add(10 * time.Second)
	for {
		status, body, stop := openCappedWatch(t, d, dir)
		if status == http.StatusOK {
			stops = append(stops, stop)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a watch slot was not given back after its stream ended: %d %s", status, body)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Terminals.
	tty := func(id string) protocol.StartRequest {
		return protocol.StartRequest{ExecID: id, Command: []string{"sleep", "30"}, Tty: &protocol.TTYSize{Rows: 24, Cols: 80}}
	}
	d.mustStart(tty("t1"))
	d.mustStart(tty("t2"))
	resp := d.start(tty("t3"))
	if resp.StatusCode() != http.StatusTooManyRequests || errorBody(t, resp.Body).Error != taxonomy.SlugAtCapacity || !strings.Contains(string(resp.Body), "max_ptys") {
		t.Fatalf("terminal over the cap: %d %s", resp.StatusCode(), resp.Body)
	}
	if d.srv.execs.get("t3") != nil {
		t.Fatal("the refused terminal exec was registered")
	}
	if _, err := d.srv.execs.get("t1").signalGroup(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	d.waitExited("t1")
	deadline = time.Now().Add(10 * time.Second)
	for resp := d.start(tty("t4")); resp.StatusCode() != http.StatusOK; resp = d.start(tty("t4")) {
		if time.Now().After(deadline) {
			t.Fatalf("a terminal slot was not given back after its exec finished: %d %s", resp.StatusCode(), resp.Body)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// passwdEntry reads uid's primary gid from this machine's passwd file, which
// is the guest's database when the daemon runs here.
func passwdEntry(t *testing.T, uid string) (name, gid string, ok bool) {
	t.Helper()
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Skip("no /etc/passwd to check against")
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 4 && f[2] == uid {
			return f[0], f[3], true
		}
	}
	return "", "", false
}

// memberOf lists the gids whose /etc/group line names user as a member.
func memberOf(t *testing.T, user string) []string {
	t.Helper()
	b, _ := os.ReadFile("/etc/group")
	var gids []string
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) == 4 {
			for _, m := range strings.Split(f[3], ",") {
				if m == user {
					gids = append(gids, f[2])
				}
			}
		}
	}
	return gids
}

// user without group takes the user's primary group from the passwd
// database (gid = uid for a uid with no entry), and the supplementary groups
// come from the group database, never root's. Before: user 65534 alone ran
// with gid 0, and so did an unknown uid. Catches: keeping the daemon's gid
// when group is absent, taking gid = uid for a user who has an entry (sync,
// uid 4, whose group is 65534), or leaving the supplementary list to the
// daemon's.
func TestRoundTwoUserWithoutGroup(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("demoting to another user needs root")
	}
	d := bootedDaemon(t, nil)
	type row struct {
		uid       uint32
		gid       string
		wantExtra []string
	}
	rows := []row{{uid: 54321, gid: "54321"}} // no entry: gid = uid, no groups
	for _, uid := range []string{"65534", "4", "101"} {
		name, gid, ok := passwdEntry(t, uid)
		if !ok {
			continue
		}
		n, _ := strconv.ParseUint(uid, 10, 32)
		rows = append(rows, row{uid: uint32(n), gid: gid, wantExtra: memberOf(t, name)})
	}
	if len(rows) < 2 {
		t.Fatal("this machine's passwd has none of the users the test checks against")
	}
	for i, r := range rows {
		id := "user-" + strconv.Itoa(i)
		uid := r.uid
		d.mustStart(protocol.StartRequest{ExecID: id, Command: []string{"sh", "-c", `grep -E '^(Uid|Gid|Groups):' /proc/self/status`}, User: &uid})
		o := d.waitExited(id)
		if o.Stdout == nil {
			t.Fatalf("uid %d: %v", uid, o.raw)
		}
		fields := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(*o.Stdout), "\n") {
			k, v, _ := strings.Cut(line, ":")
			fields[k] = strings.Fields(v)
		}
		if len(fields["Gid"]) == 0 || fields["Gid"][0] != r.gid || fields["Gid"][1] != r.gid {
			t.Errorf("uid %d ran with gid %v, want %s from the passwd database", uid, fields["Gid"], r.gid)
		}
		want := map[string]bool{}
		if r.uid != 54321 {
			want[r.gid] = true
		}
		for _, g := range r.wantExtra {
			want[g] = true
		}
		got := map[string]bool{}
		for _, g := range fields["Groups"] {
			got[g] = true
		}
		if got["0"] || len(got) != len(want) {
			t.Errorf("uid %d ran with supplementary groups %v, want those of the group database %v", uid, fields["Groups"], want)
		}
		for g := range want {
			if !got[g] {
				t.Errorf("uid %d lacks group %s from the group database: %v", uid, g, fields["Groups"])
			}
		}
	}
}

// withNULAt returns archive with the first occurrence of marker (a byte
// string unique to the archive) turned into a NUL, leaving lengths and
// checksums as they are (recomputing the one of a header block it falls in).
func withNULAt(t *testing.T, archive []byte, marker string) []byte {
	t.Helper()
	i := bytes.Index(archive, []byte(marker))
	if i < 0 {
		t.Fatalf("marker %q not in the archive", marker)
	}
	out := bytes.Clone(archive)
	out[i] = 0
	blk := out[i&^511 : i&^511+512]
	if string(blk[257:262]) == "ustar" && i%512 < 500 {
		for j := 148; j < 156; j++ {
			blk[j] = ' '
		}
		var sum int64
		for _, c := range blk {
			sum += int64(c)
		}
		copy(blk[148:156], fmt.Sprintf("%06o\x00 ", sum))
	}
	return out
}

// A tar member whose name holds a NUL is refused in every header form, and
// nothing of that archive lands, not even the good member before it. Before:
// a GNU long-name record "aaa…\0tail" was written as "aaa…" with a 204
// (archive/tar cuts the name at the NUL), and a NUL inside a ustar name field
// likewise. Catches: checking only the parsed name (the NUL is gone by then),
// checking only one header form, or refusing after the first member landed.
func TestRoundTwoTarNameWithNULIsRefused(t *testing.T) {
	d := bootedDaemon(t, nil)
	long := strings.Repeat("a", 150) + "Qtail"
	build := func(format tar.Format, name string, link string) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		_ = tw.WriteHeader(&tar.Header{Name: "first", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg, Format: format})
		_, _ = tw.Write([]byte("1"))
		h := &tar.Header{Name: name, Mode: 0o644, Typeflag: tar.TypeReg, Format: format}
		if link != "" {
			h.Typeflag, h.Linkname = tar.TypeSymlink, link
		} else {
			h.Size = 1
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if link == "" {
			_, _ = tw.Write([]byte("2"))
		}
		if err := tw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	cases := map[string][]byte{
		"GNU long name":    withNULAt(t, build(tar.FormatGNU, long, ""), "Qtail"),
		"GNU long link":    withNULAt(t, build(tar.FormatGNU, "ln", long), "Qtail"),
		"ustar name field": withNULAt(t, build(tar.FormatUSTAR, "shortQtail", ""), "Qtail"),
		"ustar prefix":     withNULAt(t, build(tar.FormatUSTAR, strings.Repeat("p", 20)+"Qx/"+strings.Repeat("n", 90), ""), "Qx"),
		"ustar linkname":   withNULAt(t, build(tar.FormatUSTAR, "ln", "targetQtail"), "Qtail"),
		"PAX path record":  withNULAt(t, build(tar.FormatPAX, long, ""), "Qtail"),
		"PAX linkpath":     withNULAt(t, build(tar.FormatPAX, "ln", long), "Qtail"),
	}
	for name, archive := range cases {
		root := t.TempDir()
		r := daemonPut(t, d, "/v1/fs/tar", root, bytes.NewReader(archive), int64(len(archive)))
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %d %q, want 400", name, r.status, r.body)
		}
		if ents, _ := os.ReadDir(root); len(ents) != 0 {
			var names []string
			for _, e := range ents {
				names = append(names, e.Name())
			}
			t.Errorf("%s: the refused archive left %v in the root", name, names)
		}
	}
	// The same archives without the NUL extract: the refusal is the NUL's.
	root := t.TempDir()
	good := build(tar.FormatGNU, long, "")
	if r := daemonPut(t, d, "/v1/fs/tar", root, bytes.NewReader(good), int64(len(good))); r.status != http.StatusNoContent {
		t.Fatalf("the same archive without a NUL: %d %q", r.status, r.body)
	}
}
