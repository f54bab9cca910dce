// Package tartest builds tar archives for tests, including the hostile ones a
// real packer would never produce. It is shared by the handler tests, the
// extraction tests and the extraction fuzz target's seed corpus, so the
// archives the guards are proven against are the archives the fuzzer starts
// from. Test-only: nothing in the daemon imports it.
package tartest

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Member is one archive entry. Zero Mode means 0644 for files, 0755 for dirs.
type Member struct {
	Name     string
	Type     byte
	Body     string
	Link     string
	Mode     int64
	Devmajor int64
}

// File, Dir, Symlink and Hardlink are shorthands.
func File(name, body string) Member { return Member{Name: name, Type: tar.TypeReg, Body: body} }
func Dir(name string) Member        { return Member{Name: name, Type: tar.TypeDir} }
func Symlink(name, target string) Member {
	return Member{Name: name, Type: tar.TypeSymlink, Link: target}
}
func Hardlink(name, target string) Member {
	return Member{Name: name, Type: tar.TypeLink, Link: target}
}

// Build writes the members with archive/tar, which writes names verbatim:
// "..", a leading "/" and the like go through untouched.
func Build(ms ...Member) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range ms {
		hdr := &tar.Header{Name: m.Name, Typeflag: m.Type, Linkname: m.Link, Mode: m.Mode, Devmajor: m.Devmajor}
		if hdr.Mode == 0 {
			hdr.Mode = 0o644
			if m.Type == tar.TypeDir {
				hdr.Mode = 0o755
			}
		}
		if m.Type == tar.TypeReg {
			hdr.Size = int64(len(m.Body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			panic(fmt.Sprintf("tartest: header %q: %v", m.Name, err))
		}
		if m.Body != "" {
			if _, err := tw.Write([]byte(m.Body)); err != nil {
				panic(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

// RawHeader hand-crafts a ustar header block whose size field says
// declaredSize whatever the data that follows, which archive/tar's writer
// refuses to produce. size is written as octal, or base-256 when it does not
// fit in 11 octal digits, as GNU tar does for huge members.
func RawHeader(name string, typ byte, declaredSize int64) []byte {
	b := make([]byte, 512)
	copy(b[0:100], name)
	copy(b[100:108], "0000644\x00")
	copy(b[108:116], "0000000\x00")
	copy(b[116:124], "0000000\x00")
	if declaredSize < 1<<33 {
		copy(b[124:136], fmt.Sprintf("%011o\x00", declaredSize))
	} else {
		f := b[124:136]
		f[0] = 0x80
		for i := 11; i >= 4; i-- {
			f[i] = byte(declaredSize)
			declaredSize >>= 8
		}
	}
	copy(b[136:148], "00000000000\x00")
	b[156] = typ
	copy(b[257:263], "ustar\x00")
	copy(b[263:265], "00")
	for i := 148; i < 156; i++ {
		b[i] = ' '
	}
	var sum int64
	for _, c := range b {
		sum += int64(c)
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return b
}

// Pad rounds data up to whole 512-byte blocks.
func Pad(data []byte) []byte {
	if r := len(data) % 512; r != 0 {
		data = append(data, make([]byte, 512-r)...)
	}
	return data
}

// End is the two zero blocks that close an archive.
func End() []byte { return make([]byte, 1024) }

// Case is one hostile archive and the answer it must get.
type Case struct {
	Name    string
	Archive []byte
	Status  int
	// Member is the name the refusal body must carry ("" when the refusal
	// is about the archive as a whole).
	Member string
	// Caps to run with; zero means generous.
	MaxMembers, MaxBytes int64
}

// Hostile returns the corpus. outside is an absolute directory next to the
// extraction root that must stay empty whatever the archive says.
func Hostile(outside string) []Case {
	outsideRel := "../" + lastElem(outside)
	sizeLieShort := append(RawHeader("short.txt", tar.TypeReg, 1<<20), Pad([]byte("only ten b"))...)
	sizeLieLong := append(RawHeader("long.txt", tar.TypeReg, 5), Pad([]byte("hello, and then much more than five bytes of data"))...)
	sizeLieLong = append(sizeLieLong, Pad([]byte("this block is not a tar header at all"))...)
	sizeLieLong = append(sizeLieLong, End()...)
	many := make([]Member, 11)
	for i := range many {
		many[i] = File(fmt.Sprintf("f%02d", i), "")
	}
	return []Case{
		{Name: "dotdot", Archive: Build(File(outsideRel+"/pwned", "x")), Status: 400, Member: outsideRel + "/pwned"},
		{Name: "deep-dotdot", Archive: Build(File("a/b/../../"+outsideRel+"/pwned", "x")), Status: 400, Member: "a/b/../../" + outsideRel + "/pwned"},
		{Name: "absolute-path", Archive: Build(File(outside+"/pwned", "x")), Status: 400, Member: outside + "/pwned"},
		{Name: "absolute-symlink", Archive: Build(Symlink("s", outside), File("s/pwned", "x")), Status: 400, Member: "s"},
		{Name: "escaping-symlink", Archive: Build(Dir("d/"), Symlink("d/s", "../"+outsideRel), File("d/s/pwned", "x")), Status: 400, Member: "d/s"},
		{Name: "symlink-to-dir-then-through", Archive: Build(Dir("sub/"), Symlink("link", "sub"), File("link/pwned", "x")), Status: 400, Member: "link/pwned"},
		// Judged lexically, "V/a/a/.." is V/a at depth 2 and its target stays in
		// tree; written through the V -> . symlink it would land one level
		// shallower and its target would climb out. Only the kernel walk sees it.
		{Name: "symlink-redirects-depth", Archive: Build(Symlink("V/a/..", "."), Symlink("V/a/a/..", outsideRel)), Status: 400, Member: "V/a/a/.."},
		// Judged by normpath, "up/.." is "." and stays in sub; the kernel
		// follows up -> .. to the root first, so esc is the root's parent.
		// Extracted, readlink -f root/sub/esc is outside the root.
		{Name: "symlink-through-symlink-dotdot", Archive: Build(Dir("sub/"), Symlink("sub/up", ".."), Symlink("sub/esc", "up/..")), Status: 400, Member: "sub/esc"},
		// The same pair in the other order: when esc lands, up does not exist
		// yet, so where its ".." goes is decided by a later member.
		{Name: "dotdot-through-later-symlink", Archive: Build(Dir("sub/"), Symlink("sub/esc", "up/.."), Symlink("sub/up", "..")), Status: 400, Member: "sub/esc"},
		// up first points somewhere harmless, then is replaced by a climbing
		// target: esc was judged through the old up.
		{Name: "dotdot-through-replaced-symlink", Archive: Build(Dir("sub/"), Symlink("sub/up", "."), Symlink("sub/esc", "up/.."), Symlink("sub/up", "..")), Status: 400, Member: "sub/esc"},
		// A ".." after a name two levels down that a later member makes a
		// climbing symlink.
		{Name: "dotdot-through-later-nested-symlink", Archive: Build(Symlink("sub/esc", "x/y/../.."), Dir("sub/x/"), Symlink("sub/x/y", "../..")), Status: 400, Member: "sub/esc"},
		// esc reaches sub/p only through sub/q -> p; a later p -> .. redirects it.
		{Name: "dotdot-through-later-symlink-via-chain", Archive: Build(Symlink("sub/q", "p"), Symlink("sub/esc", "q/../.."), Symlink("sub/p", "..")), Status: 400, Member: "sub/esc"},
		// realpath at extraction time: bin -> usr/bin is expanded, so its ".."
		// is usr, and usr/../.. is above the root.
		{Name: "dotdot-through-dir-symlink-above-root", Archive: Build(Symlink("bin", "usr/bin"), Symlink("sbin/x", "../bin/../../y")), Status: 400, Member: "sbin/x"},
		{Name: "hardlink-outside", Archive: Build(Hardlink("h", outsideRel+"/secret")), Status: 400, Member: "h"},
		{Name: "hardlink-absolute", Archive: Build(Hardlink("h", "/etc/passwd")), Status: 400, Member: "h"},
		// The hard link's own directory is shallower than the symlink's, so
		// the same target text would climb out from there.
		{Name: "hardlink-to-symlink", Archive: Build(Dir("a/b/"), Symlink("a/b/s", "../../x"), Hardlink("h", "a/b/s")), Status: 400, Member: "h"},
		{Name: "symlink-replaced-by-dir", Archive: Build(Dir("sub/"), Symlink("s", "sub"), Dir("s/"), File("s/pwned", "x")), Status: 400, Member: "s/"},
		{Name: "duplicate-dir-then-file", Archive: Build(Dir("x/"), File("x", "y")), Status: 400, Member: "x"},
		{Name: "root-as-symlink", Archive: Build(Symlink(".", outside)), Status: 400, Member: "."},
		{Name: "root-as-file", Archive: Build(File(".", "x")), Status: 400, Member: "."},
		{Name: "char-device", Archive: Build(Member{Name: "null", Type: tar.TypeChar, Devmajor: 1}), Status: 400, Member: "null"},
		{Name: "block-device", Archive: Build(Member{Name: "sda", Type: tar.TypeBlock, Devmajor: 8}), Status: 400, Member: "sda"},
		{Name: "fifo", Archive: Build(Member{Name: "pipe", Type: tar.TypeFifo}), Status: 400, Member: "pipe"},
		{Name: "too-many-members", Archive: Build(many...), Status: 413, MaxMembers: 10},
		{Name: "too-many-bytes", Archive: Build(File("a", strings.Repeat("a", 600)), File("b", strings.Repeat("b", 600))), Status: 413, MaxBytes: 1000},
		{Name: "size-lies-huge", Archive: append(append(RawHeader("huge.bin", tar.TypeReg, 1<<40), Pad([]byte("tiny"))...), End()...), Status: 413, MaxBytes: 1 << 30},
		{Name: "size-lies-longer-than-body", Archive: sizeLieShort, Status: 400, Member: "short.txt"},
		{Name: "size-lies-shorter-than-body", Archive: sizeLieLong, Status: 400},
		{Name: "not-a-tar", Archive: Pad([]byte("this is plainly not an archive")), Status: 400},
	}
}

// Legit is one archive the CPython data filter accepts that must extract,
// and the regular file each named symlink must read through to once it has.
type Legit struct {
	Name    string
	Archive []byte
	// Reads maps a path under the root to the content reading it must give.
	Reads map[string]string
}

// Legitimate returns link targets the data filter's realpath check accepts
// but a walk stricter than realpath refuses: a ".." after a name that does not
// exist yet, after a regular file, and after an in-tree directory symlink.
// Each is judged as realpath judges it at extraction time; each archive then
// adds the members that make its links readable, to prove where they land.
func Legitimate() []Legit {
	return []Legit{
		// realpath(a/b/../c) with a/b missing is a/c.
		{Name: "dotdot-after-missing-name", Archive: Build(Symlink("a/l", "b/../c"), Dir("a/b/"), File("a/c", "c")), Reads: map[string]string{"a/l": "c"}},
		// a/f is a file: realpath keeps it lexically, so f/../c is a/c.
		// (The kernel answers ENOTDIR through a file; only the verdict is
		// checked for this one.)
		{Name: "dotdot-after-regular-file", Archive: Build(File("a/f", "f"), Symlink("a/l", "f/../c"), File("a/c", "c"))},
		// bin -> usr/bin, then ../bin/../lib/y from sbin is usr/lib/y.
		// A name a later member makes a symlink: esc is judged again then,
		// through it, and still lands in the tree (sub/d/../x is sub/x).
		{Name: "dotdot-through-later-harmless-symlink", Archive: Build(Symlink("sub/esc", "up/../x"), Symlink("sub/up", "d"), Dir("sub/d/"), File("sub/x", "x")), Reads: map[string]string{"sub/esc": "x"}},
		{Name: "dotdot-after-dir-symlink", Archive: Build(Symlink("bin", "usr/bin"), Symlink("sbin/x", "../bin/../lib/y"), File("usr/bin/true", "t"), File("usr/lib/y", "y")), Reads: map[string]string{"sbin/x": "y", "bin/true": "t"}},
	}
}

func lastElem(p string) string {
	p = strings.TrimRight(p, "/")
	return p[strings.LastIndex(p, "/")+1:]
}

// Confined checks the invariant every extraction must keep, whatever the
// archive: under base there is the root and the outside directory and
// nothing else; outside is empty; and every symlink under root, read from its
// own directory, stays inside root. It checks the disk, not the verdict, so
// it cannot be satisfied by restating the code under test.
func Confined(base, root, outside string) error {
	if err := WroteOnlyInside(base, root, outside); err != nil {
		return err
	}
	if _, err := os.Lstat(root); os.IsNotExist(err) {
		return nil
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		if filepath.IsAbs(target) {
			return fmt.Errorf("symlink %s has absolute target %s", p, target)
		}
		resolved := filepath.Join(filepath.Dir(p), target)
		if resolved != root && !strings.HasPrefix(resolved, root+"/") {
			return fmt.Errorf("symlink %s -> %s leaves the root", p, target)
		}
		// Lexically inside is not enough: resolve it the way the kernel will
		// (readlink -f, missing components allowed).
		physical, err := Resolve(p)
		if errors.Is(err, ErrLoop) {
			return nil // the kernel answers ELOOP: it leads nowhere
		}
		if err != nil {
			return err
		}
		if physical != realRoot && !strings.HasPrefix(physical, realRoot+"/") {
			return fmt.Errorf("symlink %s -> %s resolves to %s, outside the root", p, target, physical)
		}
		return nil
	})
}

// ErrLoop is a resolution through more than 40 symlinks.
var ErrLoop = errors.New("too many levels of symbolic links")

// Resolve is readlink -m: p with every existing symlink expanded, missing
// components kept as written, and a symlink loop reported as an error.
func Resolve(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("resolve %s: not absolute", p)
	}
	queue := strings.Split(p, "/")
	cur := "/"
	hops := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			cur = filepath.Dir(cur)
			continue
		}
		next := filepath.Join(cur, c)
		fi, err := os.Lstat(next)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			cur = next
			continue
		}
		if hops++; hops > 40 {
			return "", fmt.Errorf("resolve %s: %w", p, ErrLoop)
		}
		link, err := os.Readlink(next)
		if err != nil {
			return "", err
		}
		if filepath.IsAbs(link) {
			cur = "/"
		}
		queue = append(strings.Split(link, "/"), queue...)
	}
	return cur, nil
}

// WroteOnlyInside is Confined's half about writes: nothing beside root and
// the sentinel under base, and the sentinel empty. An exact extraction,
// which keeps an absolute or climbing symlink as the archive has it, is
// judged by this alone.
func WroteOnlyInside(base, root, outside string) error {
	entries, err := os.ReadDir(base)
	if err != nil {
		return err
	}
	for _, e := range entries {
		p := filepath.Join(base, e.Name())
		if p != root && p != outside {
			return fmt.Errorf("%s was created outside the extraction root", p)
		}
	}
	if inside, err := os.ReadDir(outside); err != nil {
		return err
	} else if len(inside) > 0 {
		return fmt.Errorf("%s was written into the sentinel directory", filepath.Join(outside, inside[0].Name()))
	}
	return nil
}
