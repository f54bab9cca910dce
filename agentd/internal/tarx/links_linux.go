//go:build linux

package tarx

// Symbolic and hard links: a member's name split into parts, a link's
// target resolved against the tree as extraction has built it so far, and
// refused when it would leave the root or loop.

import (
	"fmt"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// Symbolic and hard links: a member's name split into parts, a link's
// target resolved against the tree as extraction has built it so far, and
// refused when it would leave the root or loop.

// Normalize splits a member name into components, absorbing "." and empty
// components and popping on "..", entirely lexically. It refuses a leading
// "/" rather than stripping it (a rewrite teaches the caller nothing) and a
// ".." that climbs above the root. An empty result names the root itself.
func Normalize(name string) ([]string, bool) {
	if strings.HasPrefix(name, "/") {
		return nil, false
	}
	var parts []string
	for _, c := range strings.Split(name, "/") {
		switch c {
		case "", ".":
		case "..":
			if len(parts) == 0 {
				return nil, false
			}
			parts = parts[:len(parts)-1]
		default:
			parts = append(parts, c)
		}
	}
	return parts, true
}

// TargetInTree reports whether a relative link target, read from a directory
// baseDepth components below the root, stays at or below the root.
func TargetInTree(baseDepth int, target string) bool {
	if strings.HasPrefix(target, "/") {
		return false
	}
	depth := baseDepth
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return false
			}
		default:
			depth++
		}
	}
	return true
}

func (x *extractor) symlink(name string, parts []string, target string, m *meta) error {
	if target == "" {
		return &MemberError{name, "link member has no target"}
	}
	if m != nil {
		return x.exactSymlink(name, parts, target, m)
	}
	if strings.HasPrefix(target, "/") {
		return &MemberError{name, "absolute link target " + target}
	}
	// A symlink is read by the kernel from the directory that holds it.
	if !TargetInTree(len(parts)-1, target) {
		return &MemberError{name, "link target " + target + " resolves outside the root"}
	}
	// The link's directory is made first: the walk below starts from it.
	if _, _, werr := x.parentOf(parts); werr != nil {
		return werr.refusal(name, "")
	}
	// The lexical check judges ".." as popping a name; the kernel pops the
	// directory the name resolves to. Through a symlink the two differ
	// ("sub/up -> .." then "sub/esc -> up/.." is lexically "sub", physically
	// the root's parent), so the target is also resolved against the tree,
	// and so are the links written earlier that this one would redirect.
	recs, err := x.checkLink(name, parts, target)
	if err != nil {
		return err
	}
	// Looked up again: the walk may have trimmed the descriptor cache.
	if _, _, err := x.placeSymlink(name, parts, target); err != nil {
		return err
	}
	for path, rec := range recs {
		x.setLink(path, rec)
	}
	return nil
}

// placeSymlink writes the symlink member name at parts, replacing what is
// there (but never a device, fifo or socket), and returns its directory and
// leaf. The target is written verbatim and never resolved: a tree may
// carry a symlink whose target arrives later, or never, and that is still
// what the tree was.
func (x *extractor) placeSymlink(name string, parts []string, target string) (int, string, error) {
	parent, leaf, werr := x.parentOf(parts)
	if werr != nil {
		return -1, "", werr.refusal(name, "")
	}
	if err := x.clear(parent, leaf); err != nil {
		return -1, "", (&walkError{leaf, err}).refusal(name, "")
	}
	if err := unix.Symlinkat(target, parent, leaf); err != nil {
		return -1, "", (&walkError{leaf, err}).refusal(name, "")
	}
	x.forget(parts)
	return parent, leaf, nil
}

// exactSymlink writes an Exact archive's symlink with its target as
// written, then its owner and times (the link's own: never followed). No
// target is judged: nothing in an extraction follows a symlink (every
// lookup refuses them), and what the tree was is what Exact restores.
func (x *extractor) exactSymlink(name string, parts []string, target string, m *meta) error {
	parent, leaf, err := x.placeSymlink(name, parts, target)
	if err != nil {
		return err
	}
	x.setLink(strings.Join(parts, "/"), nil)
	if err := unix.Fchownat(parent, leaf, m.uid, m.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("extract %s: owner %d:%d: %w", name, m.uid, m.gid, err)
	}
	if err := unix.UtimesNanoAt(parent, leaf, m.times[:], unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("extract %s: times: %w", name, err)
	}
	return nil
}

// maxLinkHops bounds how many existing symlinks one target walk may expand,
// as the kernel's MAXSYMLINKS does (40).
const maxLinkHops = 40

// maxWalkSteps bounds the components all target resolutions of one archive
// may take together. Each symlink member is judged once and re-judges only
// the links that consulted its path, so an ordinary archive stays far below
// it; an archive that replaces one symlink over and over under many links
// consulting it would otherwise cost the square of its member count.
const maxWalkSteps = 1 << 24

// linkRec is a symlink this extraction wrote, kept so that a later member
// that changes a path its target was resolved through can re-judge it.
type linkRec struct {
	dir    []string // the directory holding the link
	target string
	deps   []string // every tree path the resolution consulted
}

// overlay is a symlink about to be written at path, seen by a walk as if it
// were already there.
type overlay struct {
	path, target string
}

// walkRefusal is a target the walk resolved above the root, or could not
// judge; it becomes a MemberError for whichever member caused it.
type walkRefusal struct{ reason string }

// resolveTarget resolves a symlink target the way realpath does at this
// moment (the CPython data filter's os.path.realpath check): from the link's
// directory dir (a real directory), each symlink present in the tree is
// expanded (readlinkat on a descriptor the confined walk reached, at most
// maxLinkHops of them), a component that is missing or not a directory is
// kept lexically, so a ".." after it pops it as normpath would, and a ".."
// from a real directory pops to its parent. It refuses a resolution that
// climbs above the root, or that meets an absolute symlink in the tree. ov,
// when set, stands in for the symlink about to be written. It returns every
// tree path the resolution consulted: a later symlink at one of them changes
// the answer, so the link is judged again then (linkChanged).
func (x *extractor) resolveTarget(dir []string, target string, ov *overlay) ([]string, *walkRefusal, *walkError) {
	cur := append([]string(nil), dir...)
	lexical := 0 // trailing components of cur that are not real directories
	queue := strings.Split(target, "/")
	var deps []string
	hops := 0
	for len(queue) > 0 {
		c := queue[0]
		queue = queue[1:]
		if x.walkSteps++; x.walkSteps > maxWalkSteps {
			return deps, &walkRefusal{"needs more resolution than one archive may ask for (its links are re-judged too often)"}, nil
		}
		switch c {
		case "", ".":
			continue
		case "..":
			if len(cur) == 0 {
				return deps, &walkRefusal{"resolves above the extraction root"}, nil
			}
			cur = cur[:len(cur)-1]
			if lexical > 0 {
				lexical--
			}
			continue
		}
		path := strings.Join(append(cur, c), "/")
		deps = append(deps, path)
		if lexical > 0 {
			cur = append(cur, c)
			lexical++
			continue
		}
		var link string
		if ov != nil && path == ov.path {
			link = ov.target
		} else {
			fd, werr := x.makeDirs(cur, false)
			if werr != nil {
				return deps, nil, werr
			}
			var sb unix.Stat_t
			err := unix.Fstatat(fd, c, &sb, unix.AT_SYMLINK_NOFOLLOW)
			switch {
			case err == unix.ENOENT || err == nil && sb.Mode&unix.S_IFMT != unix.S_IFDIR && sb.Mode&unix.S_IFMT != unix.S_IFLNK:
				// Missing, or a file: judged lexically, as realpath does.
				cur = append(cur, c)
				lexical = 1
				continue
			case err != nil:
				return deps, nil, &walkError{c, err}
			case sb.Mode&unix.S_IFMT == unix.S_IFDIR:
				cur = append(cur, c)
				continue
			}
			if link, err = readlinkat(fd, c); err != nil {
				return deps, nil, &walkError{c, err}
			}
		}
		if hops++; hops > maxLinkHops {
			return deps, &walkRefusal{"passes through more than 40 symlinks"}, nil
		}
		if strings.HasPrefix(link, "/") {
			return deps, &walkRefusal{"passes through symlink " + path + ", whose target " + link + " is absolute"}, nil
		}
		queue = append(strings.Split(link, "/"), queue...)
	}
	return deps, nil, nil
}

// checkLink judges a symlink member's target against the tree, and every
// symlink already written whose resolution consulted the member's path
// against the tree with the member in place: "sub/esc -> up/.." is harmless
// while sub/up is missing or "up -> .", and escapes once "up -> .." lands.
// It returns the records to store once the member is written.
func (x *extractor) checkLink(name string, parts []string, target string) (map[string]*linkRec, error) {
	dir := parts[:len(parts)-1]
	deps, ref, err := x.resolveTarget(dir, target, nil)
	if err != nil {
		return nil, x.walkFailure(name, target, err)
	}
	if ref != nil {
		return nil, &MemberError{name, "link target " + target + " " + ref.reason}
	}
	path := strings.Join(parts, "/")
	recs := map[string]*linkRec{path: {dir: append([]string(nil), dir...), target: target, deps: deps}}
	ov := &overlay{path, target}
	for _, other := range sortedKeys(x.dependents[path]) {
		rec := x.links[other]
		if other == path || rec == nil {
			continue
		}
		deps, ref, err := x.resolveTarget(rec.dir, rec.target, ov)
		if err != nil {
			return nil, x.walkFailure(name, target, err)
		}
		if ref != nil {
			return nil, &MemberError{name, "with this link in place, symlink " + other + " -> " + rec.target + " " + ref.reason}
		}
		recs[other] = &linkRec{dir: rec.dir, target: rec.target, deps: deps}
	}
	return recs, nil
}

func (x *extractor) walkFailure(name, target string, werr *walkError) error {
	return werr.refusal(name, "link target "+target+": ")
}

// setLink records (rec != nil) or forgets the symlink at path, keeping the
// dependents index in step with the paths each record consulted.
func (x *extractor) setLink(path string, rec *linkRec) {
	if old := x.links[path]; old != nil {
		for _, d := range old.deps {
			if m := x.dependents[d]; m != nil {
				delete(m, path)
				if len(m) == 0 {
					delete(x.dependents, d)
				}
			}
		}
		delete(x.links, path)
	}
	if rec == nil {
		return
	}
	if x.links == nil {
		x.links = map[string]*linkRec{}
		x.dependents = map[string]map[string]struct{}{}
	}
	x.links[path] = rec
	for _, d := range rec.deps {
		m := x.dependents[d]
		if m == nil {
			m = map[string]struct{}{}
			x.dependents[d] = m
		}
		m[path] = struct{}{}
	}
}

func sortedKeys(m map[string]struct{}) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func readlinkat(dirfd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dirfd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size >= 1<<16 {
			return "", unix.ENAMETOOLONG
		}
	}
}

func (x *extractor) hardlink(name string, parts []string, target string) error {
	if target == "" {
		return &MemberError{name, "link member has no target"}
	}
	if strings.HasPrefix(target, "/") {
		return &MemberError{name, "absolute link target " + target}
	}
	// A hard link's target is a member name, so it is read from the root.
	src, ok := Normalize(target)
	if !ok || !TargetInTree(0, target) {
		return &MemberError{name, "link target " + target + " resolves outside the root"}
	}
	if len(src) == 0 {
		return &MemberError{name, "hard link to the extraction root"}
	}
	if strings.Join(src, "/") == strings.Join(parts, "/") {
		// Replacing the name first would delete the only copy.
		return &MemberError{name, "hard link to itself"}
	}
	srcParent, werr := x.makeDirs(src[:len(src)-1], false)
	if werr != nil {
		return werr.refusal(name, "hard link target "+target+": ")
	}
	// Duplicated because creating the destination's parents may trim the
	// cache and close the cached descriptor under us.
	srcParent, err := unix.FcntlInt(uintptr(srcParent), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("extract %s: %w", name, err)
	}
	defer unix.Close(srcParent)
	srcLeaf := src[len(src)-1]
	var st unix.Stat_t
	if err := unix.Fstatat(srcParent, srcLeaf, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if err == unix.ENOENT {
			return &MemberError{name, "hard link target " + target + " is not in the archive"}
		}
		return (&walkError{srcLeaf, err}).refusal(name, "hard link target "+target+": ")
	}
	// A hard link to a symlink is a second symlink with the same target text
	// in a different directory, where that text may now climb out of the root.
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return &MemberError{name, "hard link target " + target + " is a symlink"}
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return &MemberError{name, "hard link target " + target + " is a directory"}
	}
	parent, leaf, werr := x.parentOf(parts)
	if werr != nil {
		return werr.refusal(name, "")
	}
	if err := x.clear(parent, leaf); err != nil {
		return (&walkError{leaf, err}).refusal(name, "")
	}
	// No AT_SYMLINK_FOLLOW: the source was just checked not to be a symlink,
	// and following would leave the confined walk.
	if err := unix.Linkat(srcParent, srcLeaf, parent, leaf, 0); err != nil {
		return (&walkError{leaf, err}).refusal(name, "")
	}
	x.setLink(strings.Join(parts, "/"), nil)
	return nil
}
