package client_test

// A hostile agentd: a real HTTP server on loopback that plays a guest which
// took over agentd's port, sending endless or oversize answers. Every
// reader must stop at its bound with a TooLarge error naming it, having
// allocated a bounded amount (measured as runtime.MemStats.TotalAlloc
// across the call, an upper bound on what it held at once).

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// attackBytes is the most a hostile handler sends on one connection: far
// past every bound, so a reader without one is measured holding it.
const attackBytes = 256 << 20

// hostile serves the routes given, counting requests and bytes sent.
type hostile struct {
	srv      *httptest.Server
	requests atomic.Int64
	sent     atomic.Int64
}

func newHostile(t *testing.T, routes map[string]http.HandlerFunc) *hostile {
	h := &hostile{}
	mux := http.NewServeMux()
	for pattern, fn := range routes {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			h.requests.Add(1)
			fn(w, r)
		})
	}
	h.srv = httptest.NewServer(mux)
	t.Cleanup(h.srv.Close)
	return h
}

// endless writes head, then chunk over and over until the client hangs up
// or attackBytes went out.
func (h *hostile) endless(w http.ResponseWriter, head string, chunk []byte) {
	n, _ := w.Write([]byte(head))
	h.sent.Add(int64(n))
	for total := int64(n); total < attackBytes; {
		n, err := w.Write(chunk)
		h.sent.Add(int64(n))
		total += int64(n)
		if err != nil {
			return
		}
	}
}

// allocated is the bytes f allocated (TotalAlloc across it; the hostile
// handler, writing one reused chunk, adds little).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// wantBound asserts err is the bound error naming key.
func wantBound(t *testing.T, what string, err error, key string) {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) || !errors.Is(err, client.ErrOverBound) {
		t.Fatalf("%s: %v, want a client.Error with ErrOverBound", what, err)
	}
	if w, _ := ce.WireKind(); w != taxonomy.WireTooLarge || ce.Kind() != taxonomy.KindProtocol {
		t.Fatalf("%s: wire kind %v, kind %v, want TooLarge (Protocol): %v", what, w, ce.Kind(), err)
	}
	if !strings.Contains(err.Error(), key) {
		t.Fatalf("%s: the error does not name %s: %v", what, key, err)
	}
}

func filled(n int, c byte) []byte { return bytes.Repeat([]byte{c}, n) }

// One endless SSE data line (issue 44: 3.56 GB in 8 s before). Wrong edits
// caught: readLine gathering a long line without a bound (hundreds of MiB
// allocated), the check made after the loop (the same), and the stream
// reconnecting after the bound (a second request to the same bytes).
func TestHostileEndlessSSELine(t *testing.T) {
	var h *hostile
	h = newHostile(t, map[string]http.HandlerFunc{
		"GET /v1/exec/{id}/stream": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			h.endless(w, "event: output\ndata: ", filled(64<<10, 'A'))
		},
	})
	s := session(t, h.srv.URL, "tok")
	var err error
	alloc := allocated(func() {
		st := s.Exec("x-1").Stream(testCtx(t), 0)
		_, err = st.Next()
		st.Close()
	})
	wantBound(t, "an endless SSE line", err, "MAX_SSE_LINE_BYTES")
	t.Logf("endless SSE line: server sent %d MiB before the client hung up; client allocated %.1f MiB", h.sent.Load()>>20, float64(alloc)/(1<<20))
	if alloc > 4*taxonomy.MaxSSELineBytes {
		t.Fatalf("the client allocated %d bytes against a %d-byte line bound", alloc, taxonomy.MaxSSELineBytes)
	}
	if n := h.requests.Load(); n != 1 {
		t.Fatalf("%d requests: a line over the bound must fail the stream, not reconnect into it", n)
	}
}

// Endless data lines in one event, none of them long. Wrong edit caught:
// gathering a multi-line event's data without a bound.
func TestHostileEndlessSSEEvent(t *testing.T) {
	var h *hostile
	h = newHostile(t, map[string]http.HandlerFunc{
		"GET /v1/exec/{id}/stream": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			h.endless(w, "event: output\n", []byte("data: "+strings.Repeat("B", 1000)+"\n"))
		},
	})
	s := session(t, h.srv.URL, "tok")
	var err error
	alloc := allocated(func() {
		st := s.Exec("x-1").Stream(testCtx(t), 0)
		_, err = st.Next()
		st.Close()
	})
	wantBound(t, "endless data lines", err, "MAX_SSE_EVENT_BYTES")
	if alloc > 4*taxonomy.MaxSSEEventBytes {
		t.Fatalf("the client allocated %d bytes against a %d-byte event bound", alloc, taxonomy.MaxSSEEventBytes)
	}
}

// A binary frame announcing a 4 GiB payload. Wrong edit caught: the frame
// reader allocating the announced length before checking it.
func TestHostileHugeFrameLength(t *testing.T) {
	var h *hostile
	h = newHostile(t, map[string]http.HandlerFunc{
		"GET /v1/exec/{id}/stream": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", protocol.FramesMediaType)
			hdr := make([]byte, protocol.FrameHeaderBytes)
			hdr[0] = protocol.FrameStdout
			binary.BigEndian.PutUint32(hdr[9:], 0xFFFFFFFF)
			h.endless(w, string(hdr), filled(64<<10, 'C'))
		},
	})
	s := session(t, h.srv.URL, "tok")
	var err error
	alloc := allocated(func() {
		st := s.Exec("x-1").Stream(testCtx(t), 0)
		_, err = st.Next()
		st.Close()
	})
	wantBound(t, "a 4 GiB frame", err, "x-frames max_payload_bytes")
	if alloc > 4*protocol.FrameMaxPayloadBytes {
		t.Fatalf("the client allocated %d bytes for a refused frame", alloc)
	}
}

// Endless JSON on the small answers and on the record answers. Wrong edits
// caught: decodeJSON without its bound reader (the decoder buffers the whole
// value), the bound reported as truncated JSON (no ErrOverBound, no key),
// and a Content-Length past the bound read anyway.
func TestHostileEndlessJSON(t *testing.T) {
	var h *hostile
	h = newHostile(t, map[string]http.HandlerFunc{
		"GET /v1/health": func(w http.ResponseWriter, r *http.Request) {
			h.endless(w, `{"status":"`, filled(64<<10, 'a'))
		},
		"GET /v1/fs/stat": func(w http.ResponseWriter, r *http.Request) {
			h.endless(w, `{"path":"/x","type":"file","size":1,"mode":"0644","modified":"`, filled(64<<10, '9'))
		},
		"GET /v1/exec/{id}": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", "1099511627776") // 1 TiB announced
			w.Write([]byte(`{"exec_id":"`))
		},
	})
	s := session(t, h.srv.URL, "tok")
	ctx := testCtx(t)
	var err error
	alloc := allocated(func() { _, err = s.Health(ctx) })
	wantBound(t, "endless health JSON", err, "MAX_ANSWER_BYTES")
	if alloc > 6*taxonomy.MaxAnswerBytes {
		t.Fatalf("health allocated %d bytes against a %d-byte answer bound", alloc, taxonomy.MaxAnswerBytes)
	}
	alloc = allocated(func() { _, err = s.Stat(ctx, "/x") })
	wantBound(t, "endless stat JSON", err, "MAX_ANSWER_BYTES")
	if alloc > 6*taxonomy.MaxAnswerBytes {
		t.Fatalf("stat allocated %d bytes against a %d-byte answer bound", alloc, taxonomy.MaxAnswerBytes)
	}
	alloc = allocated(func() { _, err = s.Exec("x-1").Poll(ctx) })
	wantBound(t, "a 1 TiB record", err, "MAX_RECORD_ANSWER_BYTES")
	if alloc > 1<<20 {
		t.Fatalf("a record refused by its Content-Length allocated %d bytes", alloc)
	}
}

// An endless watch line, and endless data lines in one watch event, before
// and after the ready event. Wrong edits caught: a bufio.ErrTooLong reported
// as a broken connection (Transport, retryable), and data lines gathered
// without a bound.
func TestHostileEndlessWatch(t *testing.T) {
	const ready = "event: ready\ndata: {\"path\":\"/w\",\"watched_dirs\":1}\n\n"
	for name, tc := range map[string]struct{ head, chunk string }{
		"line before ready": {"event: ready\ndata: ", "x"},
		"line":              {ready + "event: fs\ndata: ", "x"},
		"data lines":        {ready + "event: fs\n", "data: {}\n"},
	} {
		t.Run(name, func(t *testing.T) {
			var h *hostile
			h = newHostile(t, map[string]http.HandlerFunc{
				"GET /v1/fs/watch": func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", "text/event-stream")
					h.endless(w, tc.head, []byte(strings.Repeat(tc.chunk, 64<<10/len(tc.chunk))))
				},
			})
			s := session(t, h.srv.URL, "tok")
			var err error
			alloc := allocated(func() {
				var wt *client.Watch
				wt, err = s.Watch(testCtx(t), "/w", false)
				if err == nil {
					_, err = wt.Next()
					wt.Close()
				}
			})
			wantBound(t, name, err, "MAX_WATCH_EVENT_BYTES")
			if alloc > 64*taxonomy.MaxWatchEventBytes {
				t.Fatalf("the watch allocated %d bytes against a %d-byte bound", alloc, taxonomy.MaxWatchEventBytes)
			}
		})
	}
}

// Downloads: an endless file (non-zero bytes) and an endless run of zeros
// (the 100 GiB sparse guest file of issue 44) stop at MaxBytes, naming it,
// with nothing left at the target or beside it; a sparse file within the
// bound arrives whole, at its length, as holes. Wrong edits caught:
// Download writing through an unbounded copy (the target grows to the
// attack's 256 MiB), the temporary file left behind or renamed after a
// failure, and zeros written as data (64 MiB of blocks on disk).
func TestHostileOversizeDownload(t *testing.T) {
	var mu sync.Mutex
	files := map[string][]byte{} // path -> repeated chunk; "/sparse" is served whole
	sparse := make([]byte, 64<<20)
	copy(sparse[len(sparse)-3:], "end")
	var h *hostile
	h = newHostile(t, map[string]http.HandlerFunc{
		"GET /v1/fs/tar": func(w http.ResponseWriter, r *http.Request) {
			h.endless(w, "", filled(1<<20, 'T'))
		},
		"GET /v1/fs/file": func(w http.ResponseWriter, r *http.Request) {
			p := r.URL.Query().Get("path")
			if p == "/sparse" {
				w.Write(sparse)
				return
			}
			mu.Lock()
			chunk := files[p]
			mu.Unlock()
			h.endless(w, "", chunk)
		},
	})
	files["/endless"] = filled(1<<20, 'D')
	files["/zeros"] = make([]byte, 1<<20)
	s := session(t, h.srv.URL, "tok")
	ctx := testCtx(t)
	dir := t.TempDir()
	const max = 8 << 20
	for _, remote := range []string{"/endless", "/zeros"} {
		local := filepath.Join(dir, "out"+strings.TrimPrefix(remote, "/"))
		var err error
		alloc := allocated(func() {
			_, err = s.Download(ctx, remote, local, client.DownloadOptions{MaxBytes: max})
		})
		wantBound(t, remote, err, "MaxBytes")
		if alloc > 16<<20 {
			t.Fatalf("%s: the download allocated %d bytes", remote, alloc)
		}
	}
	// A tar download (cp --tar) has the same bound.
	var n int64
	_, err := s.Download(ctx, "/tree", filepath.Join(dir, "tree.tar"), client.DownloadOptions{Tar: true, MaxBytes: max})
	wantBound(t, "an endless tar", err, "MaxBytes")
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("a failed download left %v behind", ents)
	}
	local := filepath.Join(dir, "sparse.img")
	n, err = s.Download(ctx, "/sparse", local, client.DownloadOptions{})
	if err != nil || n != int64(len(sparse)) {
		t.Fatalf("the sparse file: %d bytes, %v", n, err)
	}
	fi, err := os.Stat(local)
	if err != nil || fi.Size() != int64(len(sparse)) {
		t.Fatalf("the sparse file's length: %v %v", fi, err)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blocks*512 > 1<<20 {
		t.Fatalf("%d bytes on disk for 3 bytes of data: the zeros were written", st.Blocks*512)
	}
	if got, _ := os.ReadFile(local); !bytes.Equal(got, sparse) {
		t.Fatal("the sparse file reads back different")
	}
}

// Endless gap events, each past the last: a Process keeps at most 4096
// ranges, the last one widened over the rest. Wrong edit caught: appending
// every gap (the slice grows with the attack: 100000 ranges here).
func TestHostileEndlessGaps(t *testing.T) {
	const gaps = 100000
	h := newHostile(t, map[string]http.HandlerFunc{
		"GET /v1/exec/{id}/stream": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			var b strings.Builder
			for i := range uint64(gaps) {
				fmt.Fprintf(&b, "event: gap\ndata: {\"from\":%d,\"to\":%d}\n\n", 2*i, 2*i+1)
			}
			fmt.Fprintf(&b, "event: exit\ndata: {\"exit_code\":0,\"signal\":null,\"truncated\":false,\"writers_may_be_alive\":false,\"offset\":%d}\n\n", 2*gaps-1)
			w.Write([]byte(b.String()))
		},
	})
	s := session(t, h.srv.URL, "tok")
	p := s.Exec("x-1").Attach(testCtx(t), 0)
	io.Copy(io.Discard, p.Stdout())
	got := p.Gaps()
	if len(got) != 4096 {
		t.Fatalf("%d gap ranges kept, want 4096", len(got))
	}
	if last := got[len(got)-1]; last.From != 2*4095 || last.To != 2*gaps-1 {
		t.Fatalf("the last range %+v does not cover the rest (to %d)", last, 2*gaps-1)
	}
}

// Run over the run route against a guest whose output runs past the
// daemon's max_output_bytes while its exit event claims nothing was cut:
// Run holds at most that cap of each stream and says Truncated. Wrong edits
// caught: a capBuffer without its limit (the 64 MiB sent are held), and
// Truncated taken from the exit event alone (false, over a cut result).
func TestHostileRunOutputPastItsCap(t *testing.T) {
	const capBytes, sent = 1 << 20, 64 << 20
	h := newHostile(t, map[string]http.HandlerFunc{
		"GET /v1/schema": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"routes":[{"method":"POST","path":"/v1/exec/run"}],"frames":{"media_type":%q},"limits":{"max_output_bytes":%d}}`, protocol.FramesMediaType, capBytes)
		},
		"POST /v1/exec/run": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", protocol.FramesMediaType)
			payload := filled(protocol.FrameMaxPayloadBytes, 'F')
			var off uint64
			hdr := make([]byte, protocol.FrameHeaderBytes)
			for off < sent {
				hdr[0] = protocol.FrameStdout
				binary.BigEndian.PutUint64(hdr[1:], off)
				binary.BigEndian.PutUint32(hdr[9:], uint32(len(payload)))
				if _, err := w.Write(hdr); err != nil {
					return
				}
				if _, err := w.Write(payload); err != nil {
					return
				}
				off += uint64(len(payload))
			}
			exit := fmt.Sprintf(`{"exit_code":0,"signal":null,"truncated":false,"writers_may_be_alive":false,"offset":%d}`, off)
			hdr = []byte{protocol.FrameExit}
			hdr = binary.BigEndian.AppendUint64(hdr, off)
			hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(exit)))
			w.Write(append(hdr, exit...))
		},
	})
	s := session(t, h.srv.URL, "tok")
	var r client.Result
	var err error
	alloc := allocated(func() { r, err = s.Run(testCtx(t), []string{"yes"}, client.RunOptions{}) })
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Stdout) != capBytes || !r.Truncated {
		t.Fatalf("stdout %d bytes, truncated %v: want the %d-byte head and truncated", len(r.Stdout), r.Truncated, capBytes)
	}
	if alloc > 16*capBytes {
		t.Fatalf("Run allocated %d bytes for a %d-byte cap", alloc, capBytes)
	}
}

// A listing that pages without end (every page names a next cursor) stops
// at MAX_LIST_ENTRIES, and one of few, huge entries at MAX_LIST_BYTES (the
// bounds made small here). Wrong edits caught: List following cursors
// without counting (it never returns), and counting entries only (a few
// entries with megabyte paths pass any entry count).
func TestHostileEndlessListing(t *testing.T) {
	defer client.SetListBounds(5000, 8<<20)()
	var big atomic.Bool
	h := newHostile(t, map[string]http.HandlerFunc{
		"GET /v1/fs/list": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			path := "/d/entry"
			if big.Load() {
				path = "/d/" + strings.Repeat("p", 1<<20)
			}
			var b strings.Builder
			b.WriteString(`{"entries":[`)
			for i := range 100 {
				if i > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"path":%q,"name":"entry","type":"file","size":1,"mode":"0644","mtime":"2026-01-01T00:00:00Z","uid":0,"gid":0}`, path)
			}
			b.WriteString(`],"next_cursor":"again"}`)
			w.Write([]byte(b.String()))
		},
	})
	s := session(t, h.srv.URL, "tok")
	ctx := testCtx(t)
	seen := 0
	err := s.List(ctx, "/d", client.ListOptions{}, func(protocol.FileInfo) error { seen++; return nil })
	wantBound(t, "endless pages", err, "MAX_LIST_ENTRIES")
	if seen != 5000 {
		t.Fatalf("%d entries visited before the bound, want 5000", seen)
	}
	big.Store(true)
	seen = 0
	err = s.List(ctx, "/d", client.ListOptions{}, func(protocol.FileInfo) error { seen++; return nil })
	wantBound(t, "huge entries", err, "MAX_LIST_BYTES")
	if seen > 8 {
		t.Fatalf("%d megabyte entries visited past an 8 MiB bound", seen)
	}
}
