package imagebuild

// What a local build's steps read: USER resolved against the image's own
// passwd and group files, ARG and ENV values, the Dockerfile line of a step,
// and the writers its output goes through.

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
)

// resolveUser turns a USER or --chown value (name or id, optionally with a
// group) into ids, reading the image's /etc/passwd and /etc/group.
func resolveUser(root, spec string) (uid, gid uint32, groups []uint32, err error) {
	if spec == "" {
		return 0, 0, nil, nil
	}
	user, group, hasGroup := strings.Cut(spec, ":")
	passwd := readDB(filepath.Join(root, "etc/passwd"))
	var userName string
	if n, perr := strconv.ParseUint(user, 10, 32); perr == nil {
		uid = uint32(n)
		for _, f := range passwd {
			if len(f) >= 4 && f[2] == user {
				userName = f[0]
				if g, err := strconv.ParseUint(f[3], 10, 32); err == nil && !hasGroup {
					gid = uint32(g)
				}
				break
			}
		}
		if userName == "" && !hasGroup {
			gid = uid
		}
	} else {
		found := false
		for _, f := range passwd {
			if len(f) >= 4 && f[0] == user {
				u, err1 := strconv.ParseUint(f[2], 10, 32)
				g, err2 := strconv.ParseUint(f[3], 10, 32)
				if err1 != nil || err2 != nil {
					return 0, 0, nil, fmt.Errorf("the image's /etc/passwd has a malformed entry for %s", user)
				}
				uid, gid, userName, found = uint32(u), uint32(g), user, true
				break
			}
		}
		if !found {
			return 0, 0, nil, fmt.Errorf("no user %s in the image's /etc/passwd", user)
		}
	}
	groupDB := readDB(filepath.Join(root, "etc/group"))
	if hasGroup {
		if n, perr := strconv.ParseUint(group, 10, 32); perr == nil {
			gid = uint32(n)
		} else {
			found := false
			for _, f := range groupDB {
				if len(f) >= 3 && f[0] == group {
					g, err := strconv.ParseUint(f[2], 10, 32)
					if err != nil {
						break
					}
					gid, found = uint32(g), true
					break
				}
			}
			if !found {
				return 0, 0, nil, fmt.Errorf("no group %s in the image's /etc/group", group)
			}
		}
		return uid, gid, []uint32{gid}, nil
	}
	groups = []uint32{gid}
	if userName != "" {
		for _, f := range groupDB {
			if len(f) >= 4 && slices.Contains(strings.Split(f[3], ","), userName) {
				if g, err := strconv.ParseUint(f[2], 10, 32); err == nil && uint32(g) != gid {
					groups = append(groups, uint32(g))
				}
			}
		}
	}
	return uid, gid, groups, nil
}

// readDB reads a colon-separated database such as /etc/passwd; a missing
// file is empty. It is read on the host from a snapshot the builder made,
// so a symlink in the image's /etc is not followed out of it.
func readDB(p string) [][]string {
	if fi, err := os.Lstat(p); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(io.LimitReader(f, 4<<20))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out
}

func argValue(kv instructions.KeyValuePairOptional, given map[string]string) string {
	if v, ok := given[kv.Key]; ok {
		return v
	}
	return kv.ValueString()
}

func envOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

func setEnv(env []string, k, v string) []string {
	for i, kv := range env {
		if key, _, _ := strings.Cut(kv, "="); key == k {
			env[i] = k + "=" + v
			return env
		}
	}
	return append(env, k+"="+v)
}

func lookupEnv(env []string, k string) (string, bool) {
	for _, kv := range env {
		if key, v, _ := strings.Cut(kv, "="); key == k {
			return v, true
		}
	}
	return "", false
}

func lineOf(r []parser.Range) int {
	if len(r) == 0 {
		return 0
	}
	return r[0].Start.Line
}

// lineWriter cuts a step's output into whole lines for its consumers (the
// build log, the CLI's progress), each at most max bytes before its
// newline: a longer run without one is cut into max-byte lines. Every byte
// written is looked at once (scanned counts them), so output without
// newlines costs what it weighs, and holds at most max bytes here,
// however long it runs (issue 44.5: a per-chunk rescan of the pending
// line was quadratic). emit sees the whole lines of one write at once,
// each ending in a newline.
type lineWriter struct {
	mu      sync.Mutex // the step's output and its egress helper's may both write
	max     int
	emit    func([]byte)
	partial []byte // the current line's bytes, less than max
	scanned int64
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(p)
	var out []byte
	for len(p) > 0 {
		room := w.max - len(w.partial)
		look := p[:min(room, len(p))]
		if i := bytes.IndexByte(look, '\n'); i >= 0 {
			w.scanned += int64(i + 1) // IndexByte stops at the newline
			out = append(append(out, w.partial...), look[:i+1]...)
			w.partial, p = w.partial[:0], p[i+1:]
			continue
		}
		w.scanned += int64(len(look))
		w.partial, p = append(w.partial, look...), p[len(look):]
		if len(w.partial) == w.max {
			out = append(append(out, w.partial...), '\n')
			w.partial = w.partial[:0]
		}
	}
	if len(out) > 0 {
		w.emit(out)
	}
	return n, nil
}

// Flush hands on a last line the output did not end.
func (w *lineWriter) Flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.emit(append(bytes.Clone(w.partial), '\n'))
		w.partial = w.partial[:0]
	}
}

// tailBuffer keeps the last limit bytes written to it.
type tailBuffer struct {
	limit int
	buf   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.limit {
		t.buf = t.buf[len(t.buf)-t.limit:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }
