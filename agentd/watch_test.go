package agentd

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// watchStream is an open GET /v1/fs/watch, read event by event.
type watchStream struct {
	t    *testing.T
	resp *http.Response
	br   *bufio.Reader
}

func (d *daemon) watch(t *testing.T, dir string, recursive bool) *watchStream {
	t.Helper()
	resp := openWatch(t, d, dir, recursive)
	w := &watchStream{t: t, resp: resp, br: bufio.NewReader(resp.Body)}
	name, data := w.next()
	var ready protocol.WatchReady
	if name != "ready" || json.Unmarshal([]byte(data), &ready) != nil || ready.Path != dir || ready.Directories < 1 {
		t.Fatalf("first event %s %s, want ready", name, data)
	}
	return w
}

// openWatch starts a watch of dir and returns its 200 event stream, closed
// when the test ends.
func openWatch(t *testing.T, d *daemon, dir string, recursive bool) *http.Response {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	q := url.Values{"path": {dir}}
	if recursive {
		q.Set("recursive", "true")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+"/v1/fs/watch?"+q.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("watch %s: %d %s", dir, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return resp
}

// next reads one event (keepalives skipped), failing after a bound.
func (w *watchStream) next() (name, data string) {
	w.t.Helper()
	timer := time.AfterFunc(20*time.Second, func() { w.resp.Body.Close() })
	defer timer.Stop()
	for {
		line, err := w.br.ReadString('\n')
		if err != nil {
			w.t.Fatalf("watch stream ended: %v", err)
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data = strings.TrimPrefix(line, "data: ")
		case line == "" && name != "":
			return name, data
		}
	}
}

// expect reads fs events until one with op at path, failing on a gap.
func (w *watchStream) expect(op protocol.WatchOp, path string) {
	w.t.Helper()
	for range 100 {
		name, data := w.next()
		if name != "fs" {
			w.t.Fatalf("event %s %s while waiting for %s %s", name, data, op, path)
		}
		var ev protocol.WatchEvent
		if err := json.Unmarshal([]byte(data), &ev); err != nil {
			w.t.Fatal(err)
		}
		if ev.Op == op && ev.Path == path {
			return
		}
	}
	w.t.Fatalf("no %s %s in 100 events", op, path)
}

// TestFsWatch follows a directory through create, write, rename and remove,
// and a recursive watch into a directory created after it began. Wrong edits
// caught: the ready event sent before the inotify watch is added (the first
// create would be missed); chmod reported; a new subdirectory not added to a
// recursive watch; a watch on a file accepted.
func TestFsWatch(t *testing.T) {
	d := startDaemon(t, nil)
	d.bootstrap(nil)
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		query, slug string
		status      int
	}{
		{"/v1/fs/watch?path=" + file, taxonomy.SlugNotADirectory, 400},
		{"/v1/fs/watch?path=" + filepath.Join(dir, "missing"), taxonomy.SlugPathNotFound, 404},
		{"/v1/fs/watch", taxonomy.SlugMalformedRequest, 400},
	} {
		status, body := d.rawGet(t, c.query)
		wantSlug(t, c.query, status, body, c.status, c.slug)
	}

	w := d.watch(t, dir, false)
	a := filepath.Join(dir, "a")
	if err := os.WriteFile(a, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	w.expect(protocol.WatchOpCreate, a)
	if err := os.Chmod(a, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(a, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("more")
	f.Close()
	w.expect(protocol.WatchOpWrite, a)
	b := filepath.Join(dir, "b")
	if err := os.Rename(a, b); err != nil {
		t.Fatal(err)
	}
	w.expect(protocol.WatchOpRename, a)
	w.expect(protocol.WatchOpCreate, b)
	if err := os.Remove(b); err != nil {
		t.Fatal(err)
	}
	w.expect(protocol.WatchOpRemove, b)

	rdir := t.TempDir()
	rw := d.watch(t, rdir, true)
	sub := filepath.Join(rdir, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	rw.expect(protocol.WatchOpCreate, sub)
	// The subdirectory's watch is added before its create event is queued,
	// so a file made after that event is seen.
	inner := filepath.Join(sub, "inner")
	if err := os.WriteFile(inner, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rw.expect(protocol.WatchOpCreate, inner)
}

// TestWatchQueueGap: a full queue drops and reports exactly the dropped
// sequence numbers. Wrong edits caught: an unbounded queue; a gap whose range
// is off by one; an overflow counted but never reported.
func TestWatchQueueGap(t *testing.T) {
	q := newWatchQueue(2)
	for i := range 5 {
		q.push(protocol.WatchOpCreate, "p"+string(rune('0'+i)))
	}
	got, gap := q.take(nil)
	if len(got) != 2 || got[0].ev.Seq != 0 || got[1].ev.Seq != 1 {
		t.Fatalf("kept %+v, want seq 0 and 1", got)
	}
	if gap == nil || gap.From != 2 || gap.To != 5 {
		t.Fatalf("gap %+v, want [2,5)", gap)
	}
	// A kernel-side overflow while there is room is reported before the
	// next kept event, in order.
	q.mu.Lock()
	q.next++
	q.dropped++
	q.mu.Unlock()
	q.push(protocol.WatchOpWrite, "later")
	got, gap = q.take(got)
	if gap != nil || len(got) != 1 || got[0].droppedBefore != 1 || got[0].ev.Seq != 6 {
		t.Fatalf("after an overflow: %+v gap %+v, want seq 6 with one dropped before it", got, gap)
	}
}
