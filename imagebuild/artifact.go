package imagebuild

import (
	"archive/zip"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"
)

// The artifact's entries as client/build zips them: the Dockerfile and the
// daemon its COPY names.
const (
	artifactDockerfile = "Dockerfile"
	artifactDaemon     = "agentd"
)

// maxArtifactBytes bounds what the emulator reads from a local artifact.
const maxArtifactBytes = 512 << 20

// Unpacked is what a version's build took from a local (file://) artifact:
// the daemon its guests run, the environment and working directory its
// Dockerfile sets, and the steps the emulator did not perform.
type Unpacked struct {
	Daemon  string
	Env     map[string]string
	Workdir string
	Skipped []string
	// dockerfile and context are what a local build runs: the artifact's
	// Dockerfile, and its entries as the build context.
	Dockerfile []byte
	Context    string
	// root is the image's root filesystem once its Dockerfile has been
	// run; "" leaves its guests on the host's system directories.
	Root string
}

// HostMachine is the ELF machine of this host: the architecture a daemon
// must be built for to run as an emulator guest. The platform runs aarch64
// only (finding arm64-only); the emulator runs guests on the host, so an
// emulated image carries a daemon for the host instead.
func HostMachine() elf.Machine {
	switch runtime.GOARCH {
	case "amd64":
		return elf.EM_X86_64
	case "arm64":
		return elf.EM_AARCH64
	case "386":
		return elf.EM_386
	case "arm":
		return elf.EM_ARM
	case "riscv64":
		return elf.EM_RISCV
	case "ppc64", "ppc64le":
		return elf.EM_PPC64
	case "s390x":
		return elf.EM_S390
	}
	return elf.EM_NONE
}

// artifactPath is the local file a file:// codeArtifact URI names, or "" for
// any other scheme (s3:// is the platform's; the emulator cannot read it).
func ArtifactPath(uri string) string {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || (u.Host != "" && u.Host != "localhost") {
		return ""
	}
	return u.Path
}

// artifactObject is the bucket and key an s3:// codeArtifact URI names, ok
// false for any other scheme.
func ArtifactObject(uri string) (bucket, key string, ok bool) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "s3" || u.Host == "" || len(u.Path) < 2 {
		return "", "", false
	}
	return u.Host, strings.TrimPrefix(u.Path, "/"), true
}

// readArtifactFile reads a local artifact, bounded by maxArtifactBytes.
func ReadArtifactFile(src string) ([]byte, error) {
	f, err := os.Open(src)
	if err != nil {
		return nil, fmt.Errorf("reading the code artifact: %v", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || st.Size() > maxArtifactBytes {
		return nil, fmt.Errorf("the code artifact %s is unreadable or larger than %d bytes", src, maxArtifactBytes)
	}
	return io.ReadAll(io.LimitReader(f, maxArtifactBytes))
}

// unpack reads the artifact zip, checks its daemon runs on this host, and
// extracts it under dir. The error is the build's stateReason.
func Unpack(artifact []byte, dir string) (*Unpacked, error) {
	zr, err := zip.NewReader(bytes.NewReader(artifact), int64(len(artifact)))
	if err != nil {
		return nil, fmt.Errorf("the code artifact is not a zip: %v", err)
	}
	read := func(name string) ([]byte, error) {
		for _, e := range zr.File {
			if e.Name == name {
				rc, err := e.Open()
				if err != nil {
					return nil, err
				}
				defer rc.Close()
				return io.ReadAll(io.LimitReader(rc, maxArtifactBytes))
			}
		}
		return nil, fmt.Errorf("the code artifact has no %s entry", name)
	}
	df, err := read(artifactDockerfile)
	if err != nil {
		return nil, err
	}
	daemon, err := read(artifactDaemon)
	if err != nil {
		return nil, err
	}
	ef, err := elf.NewFile(bytes.NewReader(daemon))
	if err != nil {
		return nil, fmt.Errorf("the artifact's agentd is not an ELF executable: %v", err)
	}
	machine := ef.Machine
	ef.Close()
	if machine != HostMachine() {
		return nil, fmt.Errorf("the artifact's agentd is built for %s, but emulator guests run on this host (%s); build it for %s/%s", machine, HostMachine(), runtime.GOOS, runtime.GOARCH)
	}
	u := &Unpacked{Env: map[string]string{}}
	if err := u.readDockerfile(df); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	u.Daemon = filepath.Join(dir, artifactDaemon)
	if err := os.WriteFile(u.Daemon, daemon, 0o755); err != nil {
		return nil, err
	}
	u.Dockerfile, u.Context = df, filepath.Join(dir, "context")
	if err := unpackContext(zr, u.Context); err != nil {
		return nil, fmt.Errorf("unpacking the code artifact: %v", err)
	}
	return u, nil
}

// unpackContext writes the artifact's entries into dir, the context its
// Dockerfile's COPY and ADD read from. Every name is resolved inside dir
// (os.Root), so an entry named "../x" cannot land outside it; the total is
// bounded by maxArtifactBytes.
func unpackContext(zr *zip.Reader, dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	budget := int64(maxArtifactBytes)
	for _, e := range zr.File {
		name := strings.TrimPrefix(path.Clean("/"+e.Name), "/")
		if name == "" {
			continue
		}
		if e.FileInfo().IsDir() {
			if err := root.MkdirAll(name, 0o755); err != nil {
				return err
			}
			continue
		}
		if !e.FileInfo().Mode().IsRegular() {
			continue
		}
		if d := path.Dir(name); d != "." {
			if err := root.MkdirAll(d, 0o755); err != nil {
				return err
			}
		}
		rc, err := e.Open()
		if err != nil {
			return err
		}
		f, err := root.OpenFile(name, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, e.Mode().Perm()|0o600)
		if err != nil {
			rc.Close()
			return err
		}
		n, err := io.Copy(f, io.LimitReader(rc, budget+1))
		rc.Close()
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if budget -= n; budget < 0 {
			return fmt.Errorf("the artifact unpacks to more than %d bytes", maxArtifactBytes)
		}
		if err := root.Chmod(name, e.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

// UnperformedSteps lists, by their original text, the Dockerfile
// instructions an emulated build without a base image (no
// Options.BaseImage, no pull) does not carry out; with one, every step is
// run (BuildDockerfile). Without, the emulator performs
// what makes the daemon run as the platform would run it: FROM (the host
// stands in for the base), ARG and LABEL, COPY or ADD of the daemon, a RUN
// that only chmods the daemon or mkdirs directories, WORKDIR and those
// directories (inside the guest's own directory, which stands in for /),
// ENV, EXPOSE, ENTRYPOINT and CMD. Anything else (a RUN installing packages,
// a COPY of other files, USER, VOLUME) is named here so a caller can warn,
// never dropped in silence.
func UnperformedSteps(dockerfile []byte) ([]string, error) {
	u := &Unpacked{Env: map[string]string{}}
	if err := u.readDockerfile(dockerfile); err != nil {
		return nil, err
	}
	return u.Skipped, nil
}

func (u *Unpacked) readDockerfile(dockerfile []byte) error {
	res, err := parser.Parse(bytes.NewReader(dockerfile))
	if err != nil {
		return fmt.Errorf("the artifact's Dockerfile does not parse: %v", err)
	}
	lex := shell.NewLex(res.EscapeToken)
	var env []string
	for _, n := range res.AST.Children {
		kw := strings.ToLower(n.Value)
		var args []string
		for a := n.Next; a != nil; a = a.Next {
			args = append(args, a.Value)
		}
		performed := true
		switch kw {
		case "from", "arg", "label", "expose", "entrypoint", "cmd":
		case "env":
			// The parser yields (key, value, separator) triples.
			for k := n.Next; k != nil && k.Next != nil; {
				v := k.Next
				word, _, err := lex.ProcessWord(v.Value, shell.EnvsFromSlice(env))
				if err != nil {
					word = v.Value
				}
				env = append(env, k.Value+"="+word)
				u.Env[k.Value] = word
				k = v.Next
				if k != nil && (k.Value == "=" || k.Value == "") {
					k = k.Next
				}
			}
		case "workdir":
			if len(args) == 1 && filepath.IsAbs(args[0]) {
				u.Workdir = filepath.Clean(args[0])
			} else {
				performed = false
			}
		case "copy", "add":
			performed = len(args) == 2 && args[0] == artifactDaemon
		case "run":
			performed = simpleRun(n)
		default:
			performed = false
		}
		if !performed {
			u.Skipped = append(u.Skipped, strings.TrimSpace(n.Original))
		}
	}
	return nil
}

// simpleRun reports whether a RUN only makes the daemon executable or makes
// directories, the two things the generated stanza runs.
func simpleRun(n *parser.Node) bool {
	if n.Next == nil || n.Attributes["json"] {
		return false
	}
	words := strings.Fields(n.Next.Value)
	if len(words) < 2 || strings.ContainsAny(n.Next.Value, ";&|$`<>") {
		return false
	}
	switch words[0] {
	case "chmod":
		return len(words) == 3 && words[2] == "/"+artifactDaemon
	case "mkdir":
		for _, w := range words[1:] {
			if w != "-p" && !filepath.IsAbs(w) {
				return false
			}
		}
		return true
	}
	return false
}
