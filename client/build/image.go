package build

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Spec is one image build.
type Spec struct {
	// Daemon is agentd built for linux/arm64 (for Machine, when set).
	Daemon []byte
	// Machine is the guests' ELF machine; zero is aarch64, the platform's
	// only one (finding arm64-only). The local emulator runs guests on the
	// host and sets the host's.
	Machine elf.Machine
	// Dockerfile is the caller's; empty generates the stanza with Workdir.
	Dockerfile string
	// Context, for a local build, is the directory the Dockerfile's COPY
	// and ADD sources (other than the daemon) are read from; the artifact
	// carries them. Empty, the artifact is the Dockerfile and the daemon
	// alone, as an AWS build's is.
	Context string
	Workdir string
	Base    Base
	// Port is agentd's port and hooks.port; zero means 9000.
	Port int
	// IdleTimeout is the session's SSE idle timeout the keepalive must beat.
	IdleTimeout time.Duration

	// Name is the image name. With Reuse it is instead the prefix of the
	// content-addressed name <Name>-<hash12>, and an image already under that
	// exact name is reused rather than built.
	Name  string
	Reuse bool

	BuildRoleARN     string
	BaseImageVersion string
	Size             client.SizeClass
	RepairIdentity   bool
	InternetEgress   bool
	// ArtifactKeyPrefix is prepended to the S3 key "<name>/<hash>.zip".
	ArtifactKeyPrefix string
	// Ready and Validate bound the build-time hooks; Run the run-time ones.
	Ready, Validate client.BuildHookTimeout
	Run             client.RunHookTimeout

	Wait cplane.WaitOptions
	// Progress, if set, sees the upload and every waiter poll.
	Progress func(Progress)
	// Ledger, if set, records the create before it is sent.
	Ledger *ledger.Record
}

// Progress is one step of a build a caller may display.
type Progress struct {
	Stage      string // "upload" or "build"
	Sent, Size int64
	Poll       *cplane.Progress
}

// Result is a built (or reused) image.
type Result struct {
	Name, ImageARN, Version string
	Hash                    string
	ArtifactURI             string
	LogGroup                string
	// Reused means no build ran: an image of this exact name existed.
	Reused bool
}

// reuseKey is content (the hash of the image's files) together with
// everything else the image is built with, as the create request carries
// it: its size class (memory and so CPU), base and base version, hook
// port and timeouts, capabilities and egress. An image reused under
// <name>-<hash12> was then built with all of them, not only from the same
// files: a reuse asking for 512 MiB launched the 2048 MiB image built
// before and reported 512 (issue 51.2). What names the build rather than
// shapes the image (name, artifact, log group, role) is left out.
func reuseKey(region, content string, s Spec) (string, error) {
	in, err := createInput(region, "", s, "", "")
	if err != nil {
		return "", err
	}
	in.Name, in.CodeArtifact, in.Logging, in.BuildRoleArn = nil, nil, nil, nil
	raw, err := json.Marshal(in)
	if err != nil {
		return "", client.Errorf(taxonomy.KindUnexpected, "", "keying the build: %w", err)
	}
	h := sha256.New()
	h.Write([]byte(content + "\n"))
	h.Write(raw)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ImageClass is the size class image arn's version (its latest active one
// when version is empty) was built with: a launch takes no size, so its
// guests get this class whatever the caller asked (finding
// memory-selects-baseline). A version created without resources has the
// default class.
func ImageClass(ctx context.Context, c *lambdamicrovms.Client, arn, version string) (client.SizeClass, error) {
	if version == "" {
		img, err := c.GetMicrovmImage(ctx, &lambdamicrovms.GetMicrovmImageInput{ImageIdentifier: &arn})
		if err != nil {
			return client.SizeClass{}, cplane.SDKError("GetMicrovmImage", err)
		}
		if img.LatestActiveImageVersion == nil {
			return client.SizeClass{}, client.Errorf(taxonomy.KindPrecondition, "", "image %s has no active version", arn)
		}
		version = *img.LatestActiveImageVersion
	}
	out, err := c.GetMicrovmImageVersion(ctx, &lambdamicrovms.GetMicrovmImageVersionInput{ImageIdentifier: &arn, ImageVersion: &version})
	if err != nil {
		return client.SizeClass{}, cplane.SDKError("GetMicrovmImageVersion", err)
	}
	mib := taxonomy.DefaultBaselineMiB
	if len(out.Resources) > 0 && out.Resources[0].MinimumMemoryInMiB != nil {
		mib = int(*out.Resources[0].MinimumMemoryInMiB)
	}
	return client.SizeClassFromBaseline(mib)
}

// Build preflights, uploads and builds an image, or reuses an identical one.
// Every local refusal comes before the upload; the only billable call is
// CreateMicrovmImage, and the waiter fails fast on a wedged build.
func Build(ctx context.Context, c *lambdamicrovms.Client, up Uploader, s Spec) (*Result, error) {
	if s.Base == (Base{}) {
		s.Base = ManagedBase()
	}
	if s.Port == 0 {
		s.Port = taxonomy.DefaultAgentPort
	}
	if s.BuildRoleARN == "" {
		// Checked here so a missing role costs no upload either.
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "an image build needs a build role ARN")
	}
	if err := CheckDaemonFor(s.Daemon, s.Machine); err != nil {
		return nil, err
	}
	df := s.Dockerfile
	if df == "" {
		var err error
		if df, err = Dockerfile(DockerfileOptions{Base: s.Base, Port: s.Port, Workdir: s.Workdir}); err != nil {
			return nil, err
		}
	}
	if err := Preflight([]byte(df), Check{Base: s.Base, Port: s.Port, IdleTimeout: s.IdleTimeout, RepairIdentity: s.RepairIdentity}); err != nil {
		return nil, err
	}
	var context []ContextFile
	if s.Context != "" {
		var err error
		if context, err = ContextFiles([]byte(df), s.Context); err != nil {
			return nil, err
		}
	}
	hash, err := reuseKey(c.Options().Region, ContentHashWith(df, s.Daemon, context), s)
	if err != nil {
		return nil, err
	}
	name := s.Name
	if s.Reuse {
		var err error
		if name, err = ReuseName(s.Name, hash); err != nil {
			return nil, err
		}
	}
	res := &Result{Name: name, Hash: hash, LogGroup: LogGroup(name)}

	// A second create under an existing name is refused by the service, so
	// look first: with Reuse a match is the same inputs; without it, a clash.
	existing, err := lambdamicrovms.FindMicrovmImage(ctx, c, name)
	if err != nil {
		return nil, cplane.SDKError("ListMicrovmImages", err)
	}
	if existing != nil {
		if !s.Reuse {
			return nil, client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingDuplicateImageName,
				"an image named %s already exists; choose another name or build with reuse", name)
		}
		if slices.Contains(taxonomy.ImageReadyStates, string(existing.State)) && existing.LatestActiveImageVersion != nil {
			res.ImageARN, res.Version, res.Reused = aws.ToString(existing.ImageArn), *existing.LatestActiveImageVersion, true
			return res, nil
		}
		return nil, client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingDuplicateImageName,
			"image %s exists in state %s, so it can be neither reused nor built again under that name; delete it (or wait for its build) and retry", name, existing.State)
	}

	zip, err := ArtifactWith(df, s.Daemon, context)
	if err != nil {
		return nil, client.Errorf(taxonomy.KindUnexpected, "", "building the artifact: %w", err)
	}
	key := s.ArtifactKeyPrefix + name + "/" + hash + ".zip"
	res.ArtifactURI, err = up.Upload(ctx, key, zip, func(sent, total int64) {
		if s.Progress != nil {
			s.Progress(Progress{Stage: "upload", Sent: sent, Size: total})
		}
	})
	if err != nil {
		return nil, err
	}

	in, err := createInput(c.Options().Region, name, s, res.ArtifactURI, res.LogGroup)
	if err != nil {
		return nil, err
	}
	var after func(string, error) error
	if s.Ledger != nil {
		if err := s.Ledger.Update(func(r *ledger.Run) {
			r.Image, r.ArtifactURI, r.LogGroup, r.ImageOwned = name, res.ArtifactURI, res.LogGroup, true
		}); err != nil {
			return nil, err
		}
		if after, err = s.Ledger.Before("CreateMicrovmImage", name); err != nil {
			return nil, err
		}
	}
	created, err := c.CreateMicrovmImage(ctx, in)
	err = cplane.SDKError("CreateMicrovmImage", err)
	if after != nil {
		arn := ""
		if created != nil {
			arn = aws.ToString(created.ImageArn)
		}
		if lerr := after(arn, err); lerr != nil && err == nil {
			err = lerr
		}
	}
	if err != nil {
		return nil, err
	}
	res.ImageARN, res.Version = aws.ToString(created.ImageArn), aws.ToString(created.ImageVersion)
	if s.Ledger != nil {
		_ = s.Ledger.Update(func(r *ledger.Run) { r.ImageARN = res.ImageARN })
	}
	w := s.Wait
	if s.Progress != nil {
		prev := w.Progress
		w.Progress = func(p cplane.Progress) {
			if prev != nil {
				prev(p)
			}
			s.Progress(Progress{Stage: "build", Poll: &p})
		}
	}
	if err := waitBuilt(ctx, c, res.ImageARN, res.Version, w); err != nil {
		return res, err
	}
	return res, nil
}
