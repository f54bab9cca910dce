package agentd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/agentd/internal/tartest"
	"github.com/microvms/microvms/gen/protocol"
)

// The fault suite (`make faults`; every test here also runs in `make check`):
// the real agentd binary killed with SIGKILL mid-upload and started again, a
// client killed mid-upload, a filesystem filling up mid-file and mid-tar on a
// small tmpfs in a private mount namespace, and a stream disconnected and
// resumed. Each asserts that nothing was lost and nothing destroyed: the file
// that was at the path is whole, no temporary name is left, and the daemon
// still serves.

const faultToken = "fault-token"

// faultSkip skips a fault test whose tool or privilege is missing, except
// under `make faults` (AGENTD_FAULTS_STRICT=1), where a fault that cannot be
// injected is a failure: CI must never pass the suite by skipping it.
func faultSkip(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("AGENTD_FAULTS_STRICT") == "1" {
		t.Fatalf("fault suite cannot run here: %s", why)
	}
	t.Skip(why)
}

// faultDaemon is an agentd binary run through an optional wrapper command
// (unshare), bootstrapped with faultToken.
type faultDaemon struct {
	cmd    *exec.Cmd
	base   string
	exited chan error
}

func startFaultDaemon(t *testing.T, wrap []string, env ...string) *faultDaemon {
	t.Helper()
	port := freePort(t)
	argv := append(append([]string(nil), wrap...), agentdBinary(t))
	cmd := exec.Command(argv[0], argv[1:]...)
	// A daemon dies with the test binary, even one a timeout or a mutation run kills:
	// an orphaned agentd once spun on a core for minutes after its test was gone.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Dir = t.TempDir()
	cmd.Env = append([]string{
		"AGENTD_PORT=" + strconv.Itoa(port),
		"AGENTD_IDENTITY_REPAIR=0",
		"PATH=" + os.Getenv("PATH"),
	}, env...)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &faultDaemon{cmd: cmd, base: fmt.Sprintf("http://127.0.0.1:%d", port), exited: make(chan error, 1)}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if testing.Verbose() {
				t.Log(sc.Text())
			}
		}
		d.exited <- cmd.Wait()
	}()
	t.Cleanup(d.kill)
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := http.Get(d.base + "/v1/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		select {
		case err := <-d.exited:
			d.exited <- err
			t.Fatalf("agentd exited before answering health: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agentd never answered health: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	payload := `{"agent_token":"` + faultToken + `"}`
	body, _ := json.Marshal(protocol.RunHookEnvelope{RunHookPayload: &payload})
	resp, err := http.Post(d.base+protocol.HookPrefix+"/run", "application/json", bytes.NewReader(body))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("run hook: %v %v", err, resp)
	}
	resp.Body.Close()
	return d
}

// kill sends SIGKILL and waits for the process; safe to call twice.
func (d *faultDaemon) kill() {
	_ = d.cmd.Process.Kill()
	err := <-d.exited
	d.exited <- err
}

func (d *faultDaemon) pid() int { return d.cmd.Process.Pid }

// do sends an authorized request and returns the status and body.
func (d *faultDaemon) do(t *testing.T, method, path string, query string, body io.Reader, ctype string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, d.base+path+"?"+query, body)
	req.Header.Set("Authorization", "Bearer "+faultToken)
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitTempOpen waits, bounded, until process pid holds an anonymous
// (O_TMPFILE) file in dir open: the upload is under way there.
func waitTempOpen(t *testing.T, pid int, dir string) {
	t.Helper()
	fds := "/proc/" + strconv.Itoa(pid) + "/fd"
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		entries, _ := os.ReadDir(fds)
		for _, e := range entries {
			if target, err := os.Readlink(filepath.Join(fds, e.Name())); err == nil && strings.HasPrefix(target, dir+"/#") {
				return
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("no upload under way in %s", dir)
}

// onlyNames fails unless dir holds exactly the given names.
func onlyNames(t *testing.T, dir string, names ...string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range entries {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("%s holds %v, want exactly %v", dir, got, names)
	}
}

// slowSource yields prefix, then blocks until the test ends: an upload that
// stays mid-transfer until something is killed.
type slowSource struct {
	prefix []byte
	stop   <-chan struct{}
}

func (s *slowSource) Read(p []byte) (int, error) {
	if len(s.prefix) > 0 {
		n := copy(p, s.prefix)
		s.prefix = s.prefix[n:]
		return n, nil
	}
	<-s.stop
	return 0, io.ErrUnexpectedEOF
}

// SIGKILL of the daemon mid-PUT, of a file and of a tar, then a fresh start:
// the file that was at the path is whole, and no temporary name exists, then
// or after the restart. Catches: a named temp file beside the target (the
// kill left .NAME.agentd-* files forever) and writing in place.
func TestFaultDaemonKilledMidUpload(t *testing.T) {
	dir := t.TempDir()
	spool := t.TempDir()
	intact := precious(t, filepath.Join(dir, "keep"))
	// The tar is killed twice: while its body is spooled, and once the whole
	// archive is in and its member is being extracted over keep.
	big := tartest.Build(tartest.File("keep", strings.Repeat("t", 64<<20)))
	for _, mode := range []string{"file", "tar-spooling", "tar-extracting"} {
		d := startFaultDaemon(t, nil, "TMPDIR="+spool)
		stop := make(chan struct{})
		var body io.Reader
		route, target, watch, ctype := "/v1/fs/file", filepath.Join(dir, "keep"), dir, "application/octet-stream"
		switch mode {
		case "file":
			body = &slowSource{prefix: bytes.Repeat([]byte("f"), 2<<20), stop: stop}
		case "tar-spooling":
			route, target, watch, ctype = "/v1/fs/tar", dir, spool, "application/x-tar"
			body = &slowSource{prefix: big[:2<<20], stop: stop}
		case "tar-extracting":
			route, target, ctype = "/v1/fs/tar", dir, "application/x-tar"
			body = bytes.NewReader(big)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			req, _ := http.NewRequest("PUT", d.base+route+"?path="+target, body)
			req.Header.Set("Authorization", "Bearer "+faultToken)
			req.Header.Set("Content-Type", ctype)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}()
		waitTempOpen(t, d.pid(), watch)
		d.kill()
		close(stop)
		<-done
		intact()
		onlyNames(t, dir, "keep")
		onlyNames(t, spool)
		// A new daemon over the same tree finds nothing to clean and serves.
		d = startFaultDaemon(t, nil, "TMPDIR="+spool)
		if code, body := d.do(t, "GET", "/v1/fs/file", "path="+filepath.Join(dir, "keep"), nil, ""); code != 200 || len(body) != 16000 {
			t.Fatalf("read after restart: %d, %d bytes", code, len(body))
		}
		onlyNames(t, dir, "keep")
		d.kill()
	}
}

// SIGKILL of a client process (curl) mid-PUT: the daemon sees the body cut,
// keeps the old file whole, leaves no temp name, and goes on serving.
// Catches: a truncated body committed as the file, or a handler that does
// not clean up after a vanished client.
func TestFaultClientKilledMidUpload(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		faultSkip(t, "curl plays the client that is killed; none on PATH")
	}
	dir := t.TempDir()
	intact := precious(t, filepath.Join(dir, "keep"))
	src := filepath.Join(t.TempDir(), "upload")
	if err := os.WriteFile(src, bytes.Repeat([]byte("c"), 64<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startFaultDaemon(t, nil)
	client := exec.Command(curl, "-sS", "-X", "PUT", "--limit-rate", "1M",
		"-H", "Authorization: Bearer "+faultToken, "-H", "Content-Type: application/octet-stream",
		"--data-binary", "@"+src, d.base+"/v1/fs/file?path="+filepath.Join(dir, "keep"))
	if err := client.Start(); err != nil {
		t.Fatal(err)
	}
	waitTempOpen(t, d.pid(), dir)
	_ = client.Process.Signal(syscall.SIGKILL)
	_ = client.Wait()
	// The daemon notices the cut connection; wait, bounded, for its temp file
	// to close, then check nothing changed.
	deadline := time.Now().Add(20 * time.Second)
	for tempOpen(d.pid(), dir) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if tempOpen(d.pid(), dir) {
		t.Fatal("the daemon still holds the upload 20 s after its client died")
	}
	intact()
	onlyNames(t, dir, "keep")
	if code, _ := d.do(t, "PUT", "/v1/fs/file", "path="+filepath.Join(dir, "next"), strings.NewReader("next"), "application/octet-stream"); code != 204 {
		t.Fatalf("a write after the killed client: %d", code)
	}
}

func tempOpen(pid int, dir string) bool {
	fds := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, _ := os.ReadDir(fds)
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join(fds, e.Name())); err == nil && strings.HasPrefix(target, dir+"/#") {
			return true
		}
	}
	return false
}

// A filesystem that fills up mid-file and mid-tar (an 8 MiB tmpfs, mounted in
// a private mount namespace the daemon runs in, with the disk reserve off so
// the kernel's ENOSPC is what stops the write) answers 507, keeps the file
// that was there whole, leaves no temporary name and gives the space back.
// Catches: unlinking or truncating the old file before the new content is
// complete (a precious file became a partial), and ENOSPC reported as 500.
func TestFaultDiskFullMidFileAndMidTar(t *testing.T) {
	if os.Geteuid() != 0 {
		faultSkip(t, "mounting a tmpfs in a private mount namespace needs root")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		faultSkip(t, "unshare(1) runs the daemon in a private mount namespace; none on PATH")
	}
	mnt := t.TempDir()
	spool := t.TempDir()
	script := `mount -t tmpfs -o size=8m,mode=0755 tmpfs "$1" && shift && exec "$@"`
	wrap := []string{unshare, "-m", "--propagation", "private", "sh", "-c", script, "sh", mnt}
	d := startFaultDaemon(t, wrap, "TMPDIR="+spool, "AGENTD_DISK_RESERVE_BYTES=0")
	// The test sees the daemon's tmpfs through its root in /proc.
	view := "/proc/" + strconv.Itoa(d.pid()) + "/root" + mnt
	var st unix.Statfs_t
	if err := unix.Statfs(view, &st); err != nil || st.Type != unix.TMPFS_MAGIC {
		t.Fatalf("the daemon's %s is not its own tmpfs: %v (type %x)", mnt, err, st.Type)
	}
	free := func() uint64 {
		var st unix.Statfs_t
		_ = unix.Statfs(view, &st)
		return st.Bfree * uint64(st.Bsize)
	}
	keep := filepath.Join(mnt, "sub", "keep")
	if code, body := d.do(t, "PUT", "/v1/fs/file", "path="+keep, bytes.NewReader(bytes.Repeat([]byte("p"), 16000)), "application/octet-stream"); code != 204 {
		t.Fatalf("seed: %d %q", code, body)
	}
	intact := func() {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(view, "sub", "keep"))
		if err != nil || !bytes.Equal(got, bytes.Repeat([]byte("p"), 16000)) {
			t.Fatalf("the file at the path was damaged: %d bytes, %v", len(got), err)
		}
	}
	before := free()
	// Mid-file: 16 MiB into 8 MiB.
	code, body := d.do(t, "PUT", "/v1/fs/file", "path="+keep, bytes.NewReader(bytes.Repeat([]byte("x"), 16<<20)), "application/octet-stream")
	if code != 507 || !strings.Contains(body, "space") {
		t.Fatalf("mid-file ENOSPC: %d %q", code, body)
	}
	intact()
	onlyNames(t, filepath.Join(view, "sub"), "keep")
	// Mid-tar: a first member that fits, then one over the old file that
	// does not. The first stays (extraction is not transactional across
	// members), the old file is whole.
	archive := tartest.Build(tartest.File("sub/first", "first"), tartest.File("sub/keep", strings.Repeat("y", 16<<20)))
	code, body = d.do(t, "PUT", "/v1/fs/tar", "path="+mnt, bytes.NewReader(archive), "application/x-tar")
	if code != 507 || !strings.Contains(body, "space") {
		t.Fatalf("mid-tar ENOSPC: %d %q", code, body)
	}
	intact()
	onlyNames(t, filepath.Join(view, "sub"), "first", "keep")
	onlyNames(t, spool)
	// The anonymous temp files' space came back with their descriptors.
	if after := free(); after+64<<10 < before {
		t.Fatalf("%d bytes free before, %d after: space leaked", before, after)
	}
	// And the daemon still writes once there is room.
	if code, _ := d.do(t, "PUT", "/v1/fs/file", "path="+keep, strings.NewReader("fits"), "application/octet-stream"); code != 204 {
		t.Fatalf("write after ENOSPC: %d", code)
	}
}

// A stream cut mid-output and resumed from the last offset read delivers
// every byte exactly once, with no gap. Catches: a resume that replays from
// 0 or skips, or a disconnect that disturbs the command.
func TestFaultStreamDisconnectAndResume(t *testing.T) {
	d := startFaultDaemon(t, nil)
	start := `{"exec_id":"resume","command":["seq 1 100000"],"shell":true}`
	if code, body := d.do(t, "POST", "/v1/exec/start", "", strings.NewReader(start), "application/json"); code != 200 {
		t.Fatalf("start: %d %q", code, body)
	}
	want, _ := exec.Command("seq", "1", "100000").Output()
	var got []byte
	var gaps int
	// Each pass reads a little, then hangs up.
	for pass := 0; pass < 50 && !bytes.Equal(got, want); pass++ {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", d.base+"/v1/exec/resume/stream?offset="+strconv.Itoa(len(got)), nil)
		req.Header.Set("Authorization", "Bearer "+faultToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		events := readSSE(t, io.LimitReader(resp.Body, 160<<10))
		cancel()
		resp.Body.Close()
		for _, e := range events {
			switch e.name {
			case protocol.EventOutput:
				off, _, data := e.output()
				if off != uint64(len(got)) {
					t.Fatalf("pass %d: output at %d, want %d", pass, off, len(got))
				}
				got = append(got, data...)
			case protocol.EventGap:
				gaps++
			}
		}
	}
	if gaps != 0 || !bytes.Equal(got, want) {
		t.Fatalf("resumed stream: %d of %d bytes, %d gaps", len(got), len(want), gaps)
	}
}
