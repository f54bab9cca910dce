package emulator

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
	"golang.org/x/sys/unix"
)

// The local builder runs a Dockerfile the way the platform's build does:
// FROM is an OCI image (oci.go), each RUN runs in a confined build guest
// on the root built so far (isolate_build_linux.go), COPY and ADD copy
// from the build context, and ENV, ARG, WORKDIR, USER, SHELL, ENTRYPOINT
// and CMD shape what follows and the image's config. Each step that
// changes files yields a snapshot of the whole root under the build cache,
// named by a hash of its parent and of everything the step depends on (its
// instruction, the environment it sees, its user and directory, the bytes
// it copies), so a repeated build, or a --reuse of an unchanged
// Dockerfile, finds every step's result already made. A snapshot shares
// every unchanged file with its parent through hard links: a step's result
// costs what it changed, and no snapshot is ever written in place (a
// guest sees it only as an overlay's lower layer).

// DockerBuild is one local Dockerfile build.
type DockerBuild struct {
	Dockerfile []byte
	// Context is the directory COPY and ADD sources are read from.
	Context string
	// BaseImage is an OCI image layout directory or a `docker save`
	// tarball standing in for FROM; empty pulls FROM from its registry.
	BaseImage string
	// Cache is where bases and step snapshots are kept.
	Cache string
	// Egress lets RUN steps reach the network; without it they have only a
	// loopback.
	Egress bool
	// Args are --build-arg values.
	Args map[string]string
	// Progress, if set, sees every step start, its output and its end.
	Progress func(BuildEvent)
}

// BuildEvent is one moment of a build a caller may show.
type BuildEvent struct {
	Step, Steps int    // 1-based; Steps counts FROM
	Line        int    // the instruction's line in the Dockerfile
	Instruction string // its original text
	// Output is a chunk of a RUN's output; empty for the start and end.
	Output []byte
	// Done marks the step's end; Cached says its result was found made,
	// Made that it was made now (neither: a step that changes no file).
	Done, Cached, Made bool
}

// BuiltImage is a finished build: the image's root and config.
type BuiltImage struct {
	Root       string // the image's root filesystem, never to be written
	BaseDigest string
	Env        []string // KEY=VALUE, in order
	Workdir    string
	User       string
	Entrypoint []string
	Cmd        []string
	Steps      int // instructions performed, FROM included
	// Made and Cached count the steps that change files (RUN, COPY, ADD,
	// WORKDIR of a missing directory): made now, or found made before.
	Made, Cached int
}

// BuildStepError is a step that failed: its line, text and, for a RUN,
// the command's exit status and the end of its output.
type BuildStepError struct {
	Line        int
	Instruction string
	Exit        int // 0 when the step failed before or without a command
	Output      string
	Err         error
}

func (e *BuildStepError) Error() string {
	msg := fmt.Sprintf("Dockerfile line %d: %s: ", e.Line, e.Instruction)
	if e.Exit != 0 {
		msg += fmt.Sprintf("the command exited with status %d", e.Exit)
		if out := strings.TrimSpace(e.Output); out != "" {
			msg += ": " + out
		}
		return msg
	}
	return msg + e.Err.Error()
}

func (e *BuildStepError) Unwrap() error { return e.Err }

// BaseUnavailableError is a FROM that could be neither read from the given
// base image nor pulled (nor found pulled before).
type BaseUnavailableError struct {
	Ref string
	Err error
}

func (e *BaseUnavailableError) Error() string { return e.Err.Error() }
func (e *BaseUnavailableError) Unwrap() error { return e.Err }

// imageState is the build's state between instructions.
type imageState struct {
	key        string // names root: the chain of everything before
	root       string
	Env        []string
	Args       map[string]string
	Workdir    string
	User       string
	Shell      []string
	Entrypoint []string
	Cmd        []string
}

const defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// BuildDockerfile performs b and returns the image it made. A failing step
// is a *BuildStepError; nothing half-made is kept as an image (a step's
// snapshot is renamed into the cache only once complete).
func BuildDockerfile(ctx context.Context, b DockerBuild) (*BuiltImage, error) {
	res, err := parser.Parse(bytes.NewReader(b.Dockerfile))
	if err != nil {
		return nil, fmt.Errorf("the Dockerfile does not parse: %w", err)
	}
	stages, metaArgs, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, fmt.Errorf("the Dockerfile does not parse: %w", err)
	}
	if len(stages) != 1 {
		return nil, fmt.Errorf("the Dockerfile has %d stages; a local build performs exactly one FROM", len(stages))
	}
	lex := shell.NewLex(res.EscapeToken)
	args := map[string]string{}
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			args[kv.Key] = argValue(kv, b.Args)
		}
	}
	st := stages[0]
	steps := 1 + len(st.Commands)
	out := &BuiltImage{Steps: steps}
	emit := func(e BuildEvent) {
		if b.Progress != nil {
			b.Progress(e)
		}
	}
	fromLine := lineOf(st.Location)
	emit(BuildEvent{Step: 1, Steps: steps, Line: fromLine, Instruction: st.SourceCode})
	from, _, err := lex.ProcessWord(st.BaseName, shell.EnvsFromSlice(envOf(args)))
	if err != nil {
		from = st.BaseName
	}
	base, err := resolveBase(ctx, from, b.BaseImage, b.Cache)
	if err != nil {
		return nil, &BuildStepError{Line: fromLine, Instruction: st.SourceCode, Err: &BaseUnavailableError{Ref: from, Err: err}}
	}
	emit(BuildEvent{Step: 1, Steps: steps, Line: fromLine, Instruction: st.SourceCode, Done: true})
	out.BaseDigest = base.digest
	s := &imageState{
		key: "base:" + base.digest, root: base.root, Env: slices.Clone(base.config.Env), Args: map[string]string{},
		Workdir: base.config.WorkingDir, User: base.config.User, Shell: base.config.Shell,
		Entrypoint: base.config.Entrypoint, Cmd: base.config.Cmd,
	}
	if len(s.Shell) == 0 {
		s.Shell = []string{"/bin/sh", "-c"}
	}
	for i, c := range st.Commands {
		line := lineOf(c.Location())
		text := strings.ToUpper(c.Name())
		if str, ok := c.(fmt.Stringer); ok {
			text = str.String()
		}
		emit(BuildEvent{Step: i + 2, Steps: steps, Line: line, Instruction: text})
		// Words are expanded with the ENV and ARG values in force, as the
		// platform's builder does.
		if ex, ok := c.(instructions.SupportsSingleWordExpansion); ok {
			env := shell.EnvsFromSlice(append(envOf(s.Args), s.Env...))
			if err := ex.Expand(func(w string) (string, error) {
				r, _, err := lex.ProcessWord(w, env)
				return r, err
			}); err != nil {
				return nil, &BuildStepError{Line: line, Instruction: text, Err: err}
			}
		}
		var output io.Writer = io.Discard
		if b.Progress != nil {
			output = progressWriter(func(p []byte) {
				emit(BuildEvent{Step: i + 2, Steps: steps, Line: line, Instruction: text, Output: p})
			})
		}
		before := s.key
		cached, err := b.step(ctx, s, c, args, output)
		made := !cached && s.key != before
		if err != nil {
			var se *BuildStepError
			if errors.As(err, &se) {
				se.Line, se.Instruction = line, text
				return nil, se
			}
			return nil, &BuildStepError{Line: line, Instruction: text, Err: err}
		}
		cached = cached && s.key != before
		if cached {
			out.Cached++
		}
		if made {
			out.Made++
		}
		emit(BuildEvent{Step: i + 2, Steps: steps, Line: line, Instruction: text, Done: true, Cached: cached, Made: made})
	}
	out.Root, out.Env, out.Workdir, out.User = s.root, s.Env, s.Workdir, s.User
	out.Entrypoint, out.Cmd = s.Entrypoint, s.Cmd
	return out, nil
}

// step performs one instruction on s; cached reports a result found made.
func (b *DockerBuild) step(ctx context.Context, s *imageState, c instructions.Command, meta map[string]string, output io.Writer) (cached bool, err error) {
	switch c := c.(type) {
	case *instructions.EnvCommand:
		for _, kv := range c.Env {
			s.Env = setEnv(s.Env, kv.Key, kv.Value)
		}
		return true, nil
	case *instructions.ArgCommand:
		for _, kv := range c.Args {
			v := argValue(kv, b.Args)
			if kv.Value == nil {
				if mv, ok := meta[kv.Key]; ok && b.Args[kv.Key] == "" {
					v = mv
				}
			}
			s.Args[kv.Key] = v
		}
		return true, nil
	case *instructions.UserCommand:
		s.User = c.User
		return true, nil
	case *instructions.ShellCommand:
		s.Shell = slices.Clone(c.Shell)
		return true, nil
	case *instructions.EntrypointCommand:
		s.Entrypoint = b.commandLine(s, c.ShellDependantCmdLine)
		s.Cmd = nil // an ENTRYPOINT resets an inherited CMD, as Docker does
		return true, nil
	case *instructions.CmdCommand:
		s.Cmd = b.commandLine(s, c.ShellDependantCmdLine)
		return true, nil
	case *instructions.LabelCommand, *instructions.ExposeCommand, *instructions.MaintainerCommand,
		*instructions.StopSignalCommand, *instructions.HealthCheckCommand, *instructions.VolumeCommand:
		return true, nil // image metadata a local guest has no use for
	case *instructions.WorkdirCommand:
		p := c.Path
		if !path.IsAbs(p) {
			p = path.Join("/", s.Workdir, p)
		}
		s.Workdir = path.Clean(p)
		return b.workdirStep(s)
	case *instructions.CopyCommand:
		if c.From != "" {
			return false, errors.New("COPY --from names another stage or image; a local build performs one stage")
		}
		return b.copyStep(s, c.SourcesAndDest, c.Chown, c.Chmod, "COPY")
	case *instructions.AddCommand:
		for _, src := range c.SourcePaths {
			if strings.Contains(src, "://") || strings.HasPrefix(src, "git@") {
				return false, fmt.Errorf("ADD of %s: a local build adds files from the build context only", src)
			}
		}
		return b.copyStep(s, c.SourcesAndDest, c.Chown, c.Chmod, "ADD")
	case *instructions.RunCommand:
		return b.runStep(ctx, s, c, output)
	}
	return false, fmt.Errorf("%s is not performed by a local build", strings.ToUpper(c.Name()))
}

// commandLine is a CMD or ENTRYPOINT as the argv it runs.
func (b *DockerBuild) commandLine(s *imageState, c instructions.ShellDependantCmdLine) []string {
	if c.PrependShell && len(c.CmdLine) > 0 {
		return append(slices.Clone(s.Shell), strings.Join(c.CmdLine, " "))
	}
	return slices.Clone(c.CmdLine)
}

// stepEnv is the environment a RUN sees: the image's ENV, then each ARG not
// overridden by one, and a PATH if the image sets none.
func stepEnv(s *imageState) []string {
	env := slices.Clone(s.Env)
	keys := make([]string, 0, len(s.Args))
	for k := range s.Args {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if _, ok := lookupEnv(env, k); !ok {
			env = append(env, k+"="+s.Args[k])
		}
	}
	if _, ok := lookupEnv(env, "PATH"); !ok {
		env = append(env, defaultPath)
	}
	if _, ok := lookupEnv(env, "HOME"); !ok {
		env = append(env, "HOME=/root")
	}
	return env
}

func (b *DockerBuild) runStep(ctx context.Context, s *imageState, c *instructions.RunCommand, output io.Writer) (bool, error) {
	if len(c.FlagsUsed) > 0 {
		return false, fmt.Errorf("RUN --%s is not performed by a local build", c.FlagsUsed[0])
	}
	if len(c.Files) > 0 {
		return false, errors.New("RUN with a here-document is not performed by a local build")
	}
	argv := b.commandLine(s, c.ShellDependantCmdLine)
	if len(argv) == 0 {
		return false, errors.New("RUN names no command")
	}
	env := stepEnv(s)
	uid, gid, groups, err := resolveUser(s.root, s.User)
	if err != nil {
		return false, err
	}
	key := chainKey(s.key, "RUN", argv, env, s.User, s.Workdir, b.Egress)
	if ok := s.adopt(b.Cache, key); ok {
		return true, nil
	}
	tail := &tailBuffer{limit: 4 << 10}
	res, err := runStepGuest(ctx, stepGuest{
		root: s.root, egress: b.Egress, output: io.MultiWriter(output, tail),
		cmd: stepCommand{Argv: argv, Env: env, Dir: orSlash(s.Workdir), UID: uid, GID: gid, Groups: groups},
	})
	if err != nil {
		return false, err
	}
	defer res.cleanup()
	if res.exit != 0 {
		return false, &BuildStepError{Exit: res.exit, Output: tail.String(), Err: fmt.Errorf("exit status %d", res.exit)}
	}
	return b.commit(s, key, func(root *os.Root) error { return applyUpper(res.upper, root, res.idOffset) })
}

func orSlash(p string) string {
	if p == "" {
		return "/"
	}
	return p
}

// copyStep copies sources from the build context into the image.
func (b *DockerBuild) copyStep(s *imageState, sd instructions.SourcesAndDest, chown, chmod, verb string) (bool, error) {
	if len(sd.SourceContents) > 0 {
		return false, fmt.Errorf("%s with a here-document is not performed by a local build", verb)
	}
	if b.Context == "" {
		return false, fmt.Errorf("%s needs a build context, and this build has none", verb)
	}
	var mode os.FileMode
	if chmod != "" {
		m, err := strconv.ParseUint(chmod, 8, 32)
		if err != nil || m > 0o7777 {
			return false, fmt.Errorf("%s --chmod=%s: an octal mode is expected", verb, chmod)
		}
		mode = os.FileMode(m).Perm() | tarSpecialBits(int64(m))
	}
	ctxRoot, err := os.OpenRoot(b.Context)
	if err != nil {
		return false, err
	}
	defer ctxRoot.Close()
	var srcs []string
	for _, p := range sd.SourcePaths {
		rel := strings.TrimPrefix(path.Clean("/"+p), "/")
		if rel == "" {
			rel = "."
		}
		matches, err := fs.Glob(ctxRoot.FS(), rel)
		if err != nil || len(matches) == 0 {
			return false, fmt.Errorf("%s source %s: not in the build context", verb, p)
		}
		srcs = append(srcs, matches...)
	}
	dest := sd.DestPath
	if !path.IsAbs(dest) {
		dest = path.Join("/", s.Workdir, dest)
	}
	intoDir := strings.HasSuffix(sd.DestPath, "/") || len(srcs) > 1
	if !intoDir {
		// A destination the image has as a directory is copied into, as
		// Docker does; resolved inside the image's root.
		if r, err := os.OpenRoot(s.root); err == nil {
			if fi, err := r.Stat(strings.TrimPrefix(dest, "/")); err == nil && fi.IsDir() {
				intoDir = true
			}
			r.Close()
		}
	}
	unpack := verb == "ADD"
	// The key hashes the bytes and modes copied, not their names alone.
	h := sha256.New()
	for _, src := range srcs {
		if err := fs.WalkDir(ctxRoot.FS(), src, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "%s\x00%o\x00", p, fi.Mode())
			if fi.Mode().IsRegular() {
				f, err := ctxRoot.Open(p)
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = io.Copy(h, f)
				return err
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				l, _ := ctxRoot.Readlink(p)
				h.Write([]byte(l))
			}
			return nil
		}); err != nil {
			return false, fmt.Errorf("%s source %s: %w", verb, src, err)
		}
	}
	key := chainKey(s.key, verb, srcs, hex.EncodeToString(h.Sum(nil)), dest, intoDir, chown, chmod, s.Workdir, unpack)
	if s.adopt(b.Cache, key) {
		return true, nil
	}
	uid, gid := -1, -1
	if chown != "" {
		u, g, _, err := resolveUser(s.root, chown)
		if err != nil {
			return false, fmt.Errorf("%s --chown=%s: %w", verb, chown, err)
		}
		uid, gid = int(u), int(g)
	} else if os.Geteuid() == 0 {
		uid, gid = 0, 0
	}
	return b.commit(s, key, func(root *os.Root) error {
		for _, src := range srcs {
			fi, err := ctxRoot.Lstat(src)
			if err != nil {
				return err
			}
			target := strings.TrimPrefix(dest, "/")
			if unpack && fi.Mode().IsRegular() {
				// ADD unpacks a local tar archive (plain or gzip) into the
				// destination directory, as Docker does; anything else is
				// copied.
				if done, err := addArchive(ctxRoot, src, root, target); done || err != nil {
					return err
				}
			}
			if fi.IsDir() {
				// A directory's contents are copied, not the directory.
			} else if intoDir {
				target = path.Join(target, path.Base(src))
			}
			if err := copyFromContext(ctxRoot, src, root, target, uid, gid, mode); err != nil {
				return err
			}
		}
		return nil
	})
}

// copyFromContext copies src (a file or a directory's tree) from the
// context to target in the image, owned by uid:gid (-1 keeps the
// builder's) with mode (0 keeps the source's).
func copyFromContext(ctxRoot *os.Root, src string, root *os.Root, target string, uid, gid int, mode os.FileMode) error {
	return fs.WalkDir(ctxRoot.FS(), src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := path.Join(target, filepath.ToSlash(rel))
		if out == "" || out == "." {
			out = "."
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if dir := path.Dir(out); dir != "." {
			if err := root.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		m := fi.Mode().Perm()
		if mode != 0 {
			m = mode
		}
		switch {
		case fi.IsDir():
			if out != "." {
				if st, err := root.Lstat(out); err == nil && !st.IsDir() {
					_ = root.Remove(out)
				}
				if err := root.Mkdir(out, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
					return err
				}
			}
		case fi.Mode().IsRegular():
			_ = root.RemoveAll(out)
			in, err := ctxRoot.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			f, err := root.OpenFile(out, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, in)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := ctxRoot.Readlink(p)
			if err != nil {
				return err
			}
			_ = root.RemoveAll(out)
			if err := root.Symlink(l, out); err != nil {
				return err
			}
			if uid >= 0 {
				return root.Lchown(out, uid, gid)
			}
			return nil
		default:
			return nil
		}
		if uid >= 0 && (out != "." || fi.IsDir()) {
			if err := root.Lchown(out, uid, gid); err != nil {
				return err
			}
		}
		if fi.IsDir() && mode == 0 {
			m = fi.Mode().Perm() | 0o700
		}
		return root.Chmod(out, m)
	})
}

// chainKey names a step's result: its parent's key and everything the step
// depends on.
func chainKey(parent string, parts ...any) string {
	raw, _ := json.Marshal(parts)
	h := sha256.Sum256(append([]byte(parent+"\n"), raw...))
	return hex.EncodeToString(h[:])
}

// stepDir is where the snapshot named key lives.
func stepDir(cache, key string) string { return filepath.Join(cache, "steps", key) }

// adopt moves s onto the snapshot named key if it has been made already.
func (s *imageState) adopt(cache, key string) bool {
	dir := stepDir(cache, key)
	if _, err := os.Stat(filepath.Join(dir, "complete")); err != nil {
		return false
	}
	s.key, s.root = key, filepath.Join(dir, "root")
	return true
}

// workdirStep makes the WORKDIR in the image when it is missing (a
// snapshot of its own); an existing one leaves the image as it is. The
// path is resolved inside the image's root.
func (b *DockerBuild) workdirStep(s *imageState) (bool, error) {
	rel := strings.TrimPrefix(s.Workdir, "/")
	if rel == "" {
		return true, nil
	}
	if r, err := os.OpenRoot(s.root); err == nil {
		_, serr := r.Stat(rel)
		r.Close()
		if serr == nil {
			return true, nil
		}
	}
	key := chainKey(s.key, "WORKDIR", s.Workdir)
	if s.adopt(b.Cache, key) {
		return true, nil
	}
	return b.commit(s, key, func(root *os.Root) error { return root.MkdirAll(rel, 0o755) })
}

// commit makes the snapshot named key: the parent's root linked file by
// file, then change applied to it, renamed into the cache only when
// complete.
func (b *DockerBuild) commit(s *imageState, key string, change func(*os.Root) error) (bool, error) {
	steps := filepath.Join(b.Cache, "steps")
	if err := os.MkdirAll(steps, 0o700); err != nil {
		return false, err
	}
	tmp, err := os.MkdirTemp(steps, ".step-")
	if err != nil {
		return false, err
	}
	defer os.RemoveAll(tmp)
	// The snapshot shares every unchanged file's inode with its parent:
	// the builder only ever replaces a file, never writes one in place,
	// and a guest sees a snapshot only as an overlay's lower layer. It
	// stays 0700: an image's setuid files are nobody else's to reach.
	newRoot := filepath.Join(tmp, "root")
	if err := linkTree(s.root, newRoot); err != nil {
		return false, fmt.Errorf("snapshotting the image root: %w", err)
	}
	root, err := os.OpenRoot(newRoot)
	if err != nil {
		return false, err
	}
	err = change(root)
	root.Close()
	if err != nil {
		return false, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "complete"), []byte(key+"\n"), 0o600); err != nil {
		return false, err
	}
	dir := stepDir(b.Cache, key)
	_ = os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return false, err
	}
	s.key, s.root = key, filepath.Join(dir, "root")
	return false, nil
}

// linkTree recreates src at dst: directories made anew (with src's owner
// and mode), every other entry hard-linked. src is a snapshot the builder
// made, so no path in it leads elsewhere.
func linkTree(src, dst string) error {
	asRoot := os.Geteuid() == 0
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		out := filepath.Join(dst, rel)
		if !d.IsDir() {
			err := os.Link(p, out)
			if errors.Is(err, syscall.EMLINK) {
				// An inode at the filesystem's link limit (a busybox
				// image's hundreds of links, once per snapshot): a copy.
				return copyEntry(p, out, asRoot)
			}
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if err := os.Mkdir(out, 0o700); err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && asRoot {
			if err := os.Lchown(out, int(st.Uid), int(st.Gid)); err != nil {
				return err
			}
		}
		return os.Chmod(out, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	})
}

// applyUpper applies an overlay upper layer (a RUN's changes) to root: a
// whiteout (a 0:0 character device) deletes, an opaque directory replaces
// the parent's, anything else replaces what is there. Owners are the host's
// ids less offset: the image's.
func applyUpper(upper string, root *os.Root, offset int) error {
	asRoot := os.Geteuid() == 0
	return filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(upper, p)
		if rel == "." {
			return nil
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&fs.ModeCharDevice != 0 && st != nil && st.Rdev == 0 {
			return root.RemoveAll(rel)
		}
		uid, gid := 0, 0
		if st != nil {
			uid, gid = max(int(st.Uid)-offset, 0), max(int(st.Gid)-offset, 0)
		}
		perm := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
		switch {
		case fi.IsDir():
			if cur, err := root.Lstat(rel); err == nil && (!cur.IsDir() || opaque(p)) {
				if err := root.RemoveAll(rel); err != nil {
					return err
				}
			}
			if err := root.Mkdir(rel, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
				return err
			}
		case fi.Mode().IsRegular():
			if err := root.RemoveAll(rel); err != nil {
				return err
			}
			in, err := os.Open(p)
			if err != nil {
				return err
			}
			defer in.Close()
			f, err := root.OpenFile(rel, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, in)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case fi.Mode()&fs.ModeSymlink != 0:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if err := root.RemoveAll(rel); err != nil {
				return err
			}
			if err := root.Symlink(l, rel); err != nil {
				return err
			}
			if asRoot {
				return root.Lchown(rel, uid, gid)
			}
			return nil
		default:
			return nil // fifos, sockets, devices: not part of an image
		}
		if asRoot {
			if err := root.Lchown(rel, uid, gid); err != nil {
				return err
			}
		}
		return root.Chmod(rel, perm)
	})
}

// opaque reports an overlay directory that hides the lower one's contents.
func opaque(dir string) bool {
	for _, attr := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
		buf := make([]byte, 8)
		if n, err := unix.Lgetxattr(dir, attr, buf); err == nil && n > 0 && buf[0] == 'y' {
			return true
		}
	}
	return false
}

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

// addArchive unpacks src into target if it is a tar archive, plain or
// gzip-compressed, and reports whether it was one. The archive's entries
// are confined to the image's root like a base layer's.
func addArchive(ctxRoot *os.Root, src string, root *os.Root, target string) (bool, error) {
	f, err := ctxRoot.Open(src)
	if err != nil {
		return false, err
	}
	defer f.Close()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	head = head[:n]
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return false, err
	}
	var r io.Reader = f
	if bytes.HasPrefix(head, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(f)
		if err != nil {
			return false, nil
		}
		defer zr.Close()
		r = zr
	} else if len(head) < 262 || string(head[257:262]) != "ustar" {
		return false, nil
	}
	into := root
	if target != "" && target != "." {
		if err := root.MkdirAll(target, 0o755); err != nil {
			return false, err
		}
		if into, err = root.OpenRoot(target); err != nil {
			return false, err
		}
		defer into.Close()
	}
	if err := extractTarIn(r, into, maxImageBytes); err != nil {
		return true, fmt.Errorf("unpacking %s: %w", src, err)
	}
	return true, nil
}

// copyEntry copies the file or symlink at src to dst with its owner (as
// root) and mode.
func copyEntry(src, dst string, asRoot bool) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		l, err := os.Readlink(src)
		if err != nil {
			return err
		}
		if err := os.Symlink(l, dst); err != nil {
			return err
		}
	case fi.Mode().IsRegular():
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			return err
		}
		_, err = io.Copy(out, in)
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	default:
		return nil
	}
	if asRoot && st != nil {
		if err := os.Lchown(dst, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return nil
	}
	return os.Chmod(dst, fi.Mode()&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
}
