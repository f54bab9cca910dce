package imagebuild

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/localvm"
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
	// WritableMiB bounds a RUN step's changes, as a guest's writable
	// layer is bounded; 0 is taxonomy.LocalGuestWritableMiB.
	WritableMiB int
}

// BuildEvent is one moment of a build a caller may show.
type BuildEvent struct {
	Step, Steps int    // 1-based; Steps counts FROM
	Line        int    // the instruction's line in the Dockerfile
	Instruction string // its original text
	// Output is a RUN's output, whole lines each ending in a newline (a
	// line longer than taxonomy.LocalBuildLogLineBytes is cut into lines
	// of that size); empty for the start and end.
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
	// FullAtMiB, for a RUN that failed, is its writable layer's bound when
	// the layer was full: the likely cause, named.
	FullAtMiB int64
	Output    string
	Err       error
}

func (e *BuildStepError) Error() string {
	msg := fmt.Sprintf("Dockerfile line %d: %s: ", e.Line, e.Instruction)
	if e.Exit != 0 {
		msg += fmt.Sprintf("the command exited with status %d", e.Exit)
		if e.FullAtMiB > 0 {
			msg += fmt.Sprintf(" with its writable layer full: a build step's changes are bounded at %d MiB, as a guest's writable layer is (LOCAL_GUEST_WRITABLE_MIB)", e.FullAtMiB)
		}
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
		var lines *lineWriter
		if b.Progress != nil {
			lines = &lineWriter{max: taxonomy.LocalBuildLogLineBytes, emit: func(p []byte) {
				emit(BuildEvent{Step: i + 2, Steps: steps, Line: line, Instruction: text, Output: p})
			}}
			output = lines
		}
		before := s.key
		cached, err := b.step(ctx, s, c, args, output)
		if lines != nil {
			lines.Flush()
		}
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
	writable := int64(b.WritableMiB) << 20
	if writable <= 0 {
		writable = int64(taxonomy.LocalGuestWritableMiB) << 20
	}
	var made bool
	res, err := localvm.RunStep(ctx, localvm.StepGuest{
		Root: s.root, Egress: b.Egress, Output: io.MultiWriter(output, tail), Writable: writable,
		Cmd: localvm.StepCommand{Argv: argv, Env: env, Dir: orSlash(s.Workdir), UID: uid, GID: gid, Groups: groups},
		Collect: func(upper string, idOffset int) error {
			_, err := b.commit(s, key, func(root *os.Root) error { return applyUpper(upper, root, idOffset, writable) })
			made = err == nil
			return err
		},
	})
	if err != nil {
		return false, err
	}
	if res.Exit != 0 {
		se := &BuildStepError{Exit: res.Exit, Output: tail.String(), Err: fmt.Errorf("exit status %d", res.Exit)}
		if res.Full {
			se.FullAtMiB = writable >> 20
		}
		return false, se
	}
	if !made {
		return false, errors.New("the build step's changes were not taken")
	}
	return false, nil
}

func orSlash(p string) string {
	if p == "" {
		return "/"
	}
	return p
}
