package agentd

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// watchSSE is one event of a watch stream, with its id line if it had one.
type watchSSE struct {
	name, id, data string
}

// rawWatch is a watch stream read line by line, ids included, with every
// read bounded.
type rawWatch struct {
	t    *testing.T
	dir  string
	resp *http.Response
	br   *bufio.Reader
}

func openRawWatch(t *testing.T, d *daemon, dir string, recursive bool) *rawWatch {
	t.Helper()
	resp := openWatch(t, d, dir, recursive)
	return &rawWatch{t: t, dir: dir, resp: resp, br: bufio.NewReader(resp.Body)}
}

// next reads one event (keepalives skipped); io.EOF when the daemon ended
// the stream. A stream still open after 20 s fails the test.
func (w *rawWatch) next() (watchSSE, error) {
	w.t.Helper()
	timer := time.AfterFunc(20*time.Second, func() { w.resp.Body.Close() })
	defer timer.Stop()
	var ev watchSSE
	for {
		line, err := w.br.ReadString('\n')
		if err != nil {
			if !timer.Stop() {
				w.t.Fatalf("watch of %s still open after 20 s (last partial event %+v)", w.dir, ev)
			}
			if errors.Is(err, io.EOF) && ev.name == "" {
				return ev, io.EOF
			}
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "id: "):
			ev.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			ev.data = strings.TrimPrefix(line, "data: ")
		case line == "" && ev.name != "":
			return ev, nil
		}
	}
}

func (w *rawWatch) mustNext() watchSSE {
	w.t.Helper()
	ev, err := w.next()
	if err != nil {
		w.t.Fatalf("watch stream ended: %v", err)
	}
	return ev
}

// ready reads the ready event and returns what it says.
func (w *rawWatch) ready() protocol.WatchReady {
	w.t.Helper()
	ev := w.mustNext()
	var r protocol.WatchReady
	if ev.name != "ready" || json.Unmarshal([]byte(ev.data), &r) != nil {
		w.t.Fatalf("first event %+v, want ready", ev)
	}
	return r
}

// The ready event counts the directories the watch covers: one for a plain
// watch, the root and every directory below it for a recursive one.
// Catches, in FsWatch's add, `dirs++` made `dirs--` (the count wraps to
// 2^64-1 for one directory).
func TestWatchReadyCountsItsDirectories(t *testing.T) {
	d := bootedDaemon(t, nil)
	dir := t.TempDir()
	for _, sub := range []string{"a", "a/b", "c"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "a", "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		recursive bool
		want      uint
	}{{false, 1}, {true, 4}} {
		if r := openRawWatch(t, d, dir, c.recursive).ready(); r.Directories != c.want || r.Recursive != c.recursive {
			t.Errorf("recursive=%v: ready says %d directories (recursive %v), want %d", c.recursive, r.Directories, r.Recursive, c.want)
		}
	}
}

// Each fs event's SSE id is one past its seq, so a client resuming from the
// last id it saw asks for exactly the events after it; seqs count from 0
// without holes when nothing is dropped. Catches, in FsWatch, the event's
// id `qe.ev.Seq+1` made `qe.ev.Seq-1`.
func TestWatchEventIDIsOnePastItsSeq(t *testing.T) {
	d := bootedDaemon(t, nil)
	dir := t.TempDir()
	w := openRawWatch(t, d, dir, false)
	w.ready()
	for i := range 3 {
		if err := os.Mkdir(filepath.Join(dir, "d"+strconv.Itoa(i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for want := range uint64(3) {
		ev := w.mustNext()
		var fe protocol.WatchEvent
		if ev.name != "fs" || json.Unmarshal([]byte(ev.data), &fe) != nil {
			t.Fatalf("event %+v, want fs", ev)
		}
		if fe.Seq != want || ev.id != strconv.FormatUint(want+1, 10) {
			t.Fatalf("event %+v: seq %d id %q, want seq %d id %d", ev, fe.Seq, ev.id, want, want+1)
		}
	}
}

// A watch whose root goes away, removed or renamed, reports that and then
// ends: there is nothing left to watch. Catches, in FsWatch's reader, either
// op test of `(op == Remove || op == Rename) && Clean(name) == root`
// negated (a root removed, or a root renamed, leaves the stream open
// forever).
func TestWatchEndsWhenItsRootGoes(t *testing.T) {
	d := bootedDaemon(t, nil)
	for _, c := range []struct {
		name string
		op   protocol.WatchOp
		gone func(root string) error
	}{
		{"removed", protocol.WatchOpRemove, os.Remove},
		{"renamed", protocol.WatchOpRename, func(root string) error { return os.Rename(root, root+".moved") }},
	} {
		root := filepath.Join(t.TempDir(), "root-"+c.name)
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		w := openRawWatch(t, d, root, false)
		w.ready()
		if err := c.gone(root); err != nil {
			t.Fatal(err)
		}
		saw := false
		for {
			ev, err := w.next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("root %s: %v", c.name, err)
			}
			var fe protocol.WatchEvent
			if ev.name == "fs" && json.Unmarshal([]byte(ev.data), &fe) == nil && fe.Op == c.op && fe.Path == root {
				saw = true
			}
		}
		if !saw {
			t.Errorf("root %s: the stream ended without a %s event for %s", c.name, c.op, root)
		}
	}
}
