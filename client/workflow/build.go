package workflow

import (
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/gen/taxonomy"
)

// DefaultWorkdir is the WORKDIR the generated Dockerfile sets: the managed
// base declares none (finding base-images-lack-workdir).
const DefaultWorkdir = "/workspace"

// BuildOptions are one image build's, as `microvm build`, `run` and the
// engine's build op ask for it.
type BuildOptions struct {
	// Daemon is the path of the agentd baked into the image as its CMD.
	Daemon string
	// Dockerfile is the path of a Dockerfile to build instead of the
	// generated stanza; a local build carries its directory as the context.
	Dockerfile string
	// Name is the image's; empty, a fresh per-invocation one (or, with
	// Reuse, the stable stem the inputs' hash makes unique).
	Name           string
	Reuse          bool
	Size           client.SizeClass
	Port           int
	RepairIdentity bool
	BaseVersion    string
	// ArtifactURI is where the artifact already is; Bucket where it is
	// uploaded on AWS; ArtifactDir the local store (platform.Uploader).
	ArtifactURI, Bucket, BuildRoleARN string
	ArtifactDir                       func() (string, error)
	// Machine is the ELF machine the daemon must be built for (0: aarch64).
	Machine  elf.Machine
	Ledger   *ledger.Record
	Progress func(build.Progress)
}

// freshName is a per-invocation image name: a fixed one can replay a
// clientToken (finding client-token-permanent).
func freshName() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("microvm-cli-%d-%s", time.Now().Unix(), hex.EncodeToString(b[:]))
}

// imageName is the name a build with these options gets.
func (o BuildOptions) imageName() string {
	switch {
	case o.Name != "":
		return o.Name
	case o.Reuse:
		return "microvm-cli" // the stable stem: the hash makes it unique
	}
	return freshName()
}

// Build reads the daemon and the Dockerfile, resolves the build role and
// the artifact's store, and runs build.Build on p. Name is the image name
// it chose, for progress said before the build answers.
func Build(ctx context.Context, p *platform.Platform, o BuildOptions, name func(string)) (*build.Result, error) {
	daemon, err := os.ReadFile(o.Daemon)
	if err != nil {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "reading the daemon binary: %w", err)
	}
	var dockerfile, bctx string
	if o.Dockerfile != "" {
		if p.Local() {
			// A local build carries what the Dockerfile copies from its
			// directory; an AWS artifact stays the Dockerfile and the daemon.
			bctx = filepath.Dir(o.Dockerfile)
		}
		b, err := os.ReadFile(o.Dockerfile)
		if err != nil {
			return nil, client.Errorf(taxonomy.KindPrecondition, "", "reading the Dockerfile: %w", err)
		}
		dockerfile = string(b)
	}
	if o.BaseVersion != "" {
		if err := cplane.CheckImageVersion(o.BaseVersion); err != nil {
			return nil, err
		}
	}
	role, err := p.BuildRole(o.BuildRoleARN)
	if err != nil {
		return nil, err
	}
	up, err := p.Uploader(ctx, o.ArtifactURI, o.Bucket, o.ArtifactDir)
	if err != nil {
		return nil, err
	}
	n := o.imageName()
	if name != nil {
		name(n)
	}
	spec := build.Spec{
		Daemon: daemon, Dockerfile: dockerfile, Context: bctx, Workdir: DefaultWorkdir, Port: o.Port, Name: n, Reuse: o.Reuse,
		BuildRoleARN: role, BaseImageVersion: o.BaseVersion, Size: o.Size, RepairIdentity: o.RepairIdentity,
		Machine: o.Machine, Wait: p.Wait(30 * time.Minute), Ledger: o.Ledger, Progress: o.Progress,
	}
	return build.Build(ctx, p.Control(), up, spec)
}

// ArtifactDir is the local artifact store: $MICROVM_ARTIFACT_DIR, else the
// user's cache directory. An artifact is a cache entry: the emulator unpacks
// what it reads into its own state.
func ArtifactDir(getenv func(string) string) (string, error) {
	if d := getenv("MICROVM_ARTIFACT_DIR"); d != "" {
		return d, nil
	}
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", client.Errorf(taxonomy.KindPrecondition, "", "no local artifact store: %v; set MICROVM_ARTIFACT_DIR", err)
	}
	return filepath.Join(dir, "microvm", "artifacts"), nil
}
