package emulator

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

// progressWriter hands each write to f, copied.
type progressWriter func([]byte)

func (f progressWriter) Write(p []byte) (int, error) {
	f(bytes.Clone(p))
	return len(p), nil
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
