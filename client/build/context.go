package build

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// maxContextBytes bounds the build context a local artifact carries: what
// the emulator reads of an artifact at most.
const maxContextBytes = 512 << 20

// ContextFile is one file of a build context an artifact carries beside the
// Dockerfile and the daemon.
type ContextFile struct {
	Name string // slash-separated, relative to the context
	Mode fs.FileMode
	Data []byte
}

// ContextFiles reads, from the directory dir, the files the Dockerfile's
// COPY and ADD instructions name (a name may be a glob or a directory),
// other than the daemon the artifact always carries. Only those: the
// context directory may hold anything else. A source that matches nothing
// is left for the build to report, with its line.
func ContextFiles(dockerfile []byte, dir string) ([]ContextFile, error) {
	res, err := parser.Parse(bytes.NewReader(dockerfile))
	if err != nil {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "the Dockerfile does not parse: %w", err)
	}
	stages, _, err := instructions.Parse(res.AST, nil)
	if err != nil {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "the Dockerfile does not parse: %w", err)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "reading the build context: %w", err)
	}
	defer root.Close()
	seen := map[string]bool{}
	var out []ContextFile
	var total int64
	for _, st := range stages {
		for _, c := range st.Commands {
			var srcs []string
			switch c := c.(type) {
			case *instructions.CopyCommand:
				if c.From == "" {
					srcs = c.SourcePaths
				}
			case *instructions.AddCommand:
				srcs = c.SourcePaths
			}
			for _, src := range srcs {
				rel := strings.TrimPrefix(path.Clean("/"+src), "/")
				if rel == "" || rel == daemonEntry || rel == dockerfileEntry || strings.Contains(src, "://") {
					continue
				}
				matches, _ := fs.Glob(root.FS(), rel)
				for _, m := range matches {
					err := fs.WalkDir(root.FS(), m, func(p string, d fs.DirEntry, err error) error {
						if err != nil {
							return err
						}
						fi, err := d.Info()
						if err != nil || !fi.Mode().IsRegular() || seen[p] || p == daemonEntry || p == dockerfileEntry {
							return err
						}
						seen[p] = true
						if total += fi.Size(); total > maxContextBytes {
							return client.Errorf(taxonomy.KindInvalidArg, "", "the build context the Dockerfile copies is larger than %d bytes", maxContextBytes)
						}
						data, err := root.ReadFile(p)
						if err != nil {
							return err
						}
						out = append(out, ContextFile{Name: p, Mode: fi.Mode().Perm(), Data: data})
						return nil
					})
					if err != nil {
						return nil, client.Errorf(taxonomy.KindPrecondition, "", "reading the build context: %w", err)
					}
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b ContextFile) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// ArtifactWith is Artifact with the build context's files after the
// Dockerfile and the daemon, in name order; with none it is Artifact,
// byte for byte.
func ArtifactWith(dockerfile string, daemon []byte, context []ContextFile) ([]byte, error) {
	if len(context) == 0 {
		return Artifact(dockerfile, daemon)
	}
	base, err := Artifact(dockerfile, daemon)
	if err != nil {
		return nil, err
	}
	zr, err := zip.NewReader(bytes.NewReader(base), int64(len(base)))
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, f := range zr.File {
		if err := zw.Copy(f); err != nil {
			return nil, err
		}
	}
	for _, c := range context {
		h := &zip.FileHeader{Name: c.Name, Method: zip.Deflate, Modified: zipEpoch}
		h.SetMode(c.Mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(c.Data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ContentHashWith is ContentHash over the build context too; with none it
// is ContentHash, so an image built without one keeps its name.
func ContentHashWith(dockerfile string, daemon []byte, context []ContextFile) string {
	if len(context) == 0 {
		return ContentHash(dockerfile, daemon)
	}
	h := sha256.New()
	h.Write([]byte(ContentHash(dockerfile, daemon)))
	var n [8]byte
	for _, c := range context {
		for _, part := range [][]byte{[]byte(c.Name), []byte(c.Mode.String()), c.Data} {
			binary.BigEndian.PutUint64(n[:], uint64(len(part)))
			h.Write(n[:])
			h.Write(part)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
