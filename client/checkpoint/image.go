package checkpoint

import (
	"archive/zip"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/klauspost/compress/zstd"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/gen/taxonomy"
)

// A checkpoint baked into an image: a new image built from the same
// artifact as the image the checkpoint was taken on (its Dockerfile, its
// agentd, its build context, on the same base and base version, with the
// same hooks, resources, capabilities, egress and environment), plus the
// checkpoint's files as one plain tar the Dockerfile ADDs at "/" as its last
// step. The platform snapshots the built image, so every launch of it starts
// with the files already there and no transfer per launch; the tar keeps
// modes, owners, times, symlinks and hard links as ADD unpacks them.

// BakedTar is the name of the checkpoint's tar inside the baked artifact.
const BakedTar = "microvm-checkpoint.tar"

// maxBakedArtifactBytes bounds the artifact a bake holds in memory and
// uploads: the emulator reads an artifact up to 512 MiB. What the platform
// accepts is not measured here.
const maxBakedArtifactBytes = 512 << 20

// BakeOptions describe one bake.
type BakeOptions struct {
	// Control is the control-plane client.
	Control *lambdamicrovms.Client
	// Uploader puts the new artifact where the build reads it; nil is the
	// store's bucket under Prefix+"images/".
	Uploader build.Uploader
	// Name names the new image; empty is "<source image name>-<digest12>".
	Name string
	// Wait bounds the build.
	Wait cplane.WaitOptions
}

// Baked is an image made from a checkpoint.
type Baked struct {
	Name, ImageARN, Version string
	ArtifactURI             string
	// Checkpoint is the checkpoint's manifest.
	Checkpoint Manifest
}

// BakeImage makes a new image whose launches start with checkpoint ref's
// files in place. The checkpoint is verified before anything is uploaded
// or created; the source image version must still be readable (its
// artifact is the new one's starting point).
func BakeImage(ctx context.Context, store *Store, ref string, o BakeOptions) (Baked, error) {
	if o.Control == nil {
		return Baked{}, client.Errorf(taxonomy.KindInvalidArg, "", "baking an image needs a control-plane client")
	}
	p, err := store.Prepare(ctx, ref)
	if err != nil {
		return Baked{}, err
	}
	defer p.Close()
	m := p.Manifest()
	src, err := o.Control.GetMicrovmImageVersion(ctx, &lambdamicrovms.GetMicrovmImageVersionInput{ImageIdentifier: aws.String(m.ImageARN), ImageVersion: aws.String(m.ImageVersion)})
	if err != nil {
		return Baked{}, cplane.SDKError("GetMicrovmImageVersion", err)
	}
	uri := ""
	if u, ok := src.CodeArtifact.(*types.CodeArtifactMemberUri); ok {
		uri = u.Value
	}
	old, err := readArtifact(ctx, store, uri)
	if err != nil {
		return Baked{}, err
	}
	zipped, err := bakeArtifact(old, p.v.file)
	if err != nil {
		return Baked{}, err
	}
	name := o.Name
	if name == "" {
		srcName := m.ImageARN[strings.LastIndex(m.ImageARN, ":")+1:]
		name = fmt.Sprintf("%s-%s", srcName, strings.TrimPrefix(m.Digest, "sha256:")[:12])
	}
	up := o.Uploader
	if up == nil {
		up = build.NewS3Uploader(store.S3, store.Bucket)
	}
	newURI, err := up.Upload(ctx, store.prefix()+"images/"+name+"/"+strings.Replace(m.Digest, ":", "-", 1)+".zip", zipped, nil)
	if err != nil {
		return Baked{}, err
	}
	in := &lambdamicrovms.CreateMicrovmImageInput{
		Name: aws.String(name), BaseImageArn: src.BaseImageArn, BaseImageVersion: bareBaseVersion(src.BaseImageVersion), BuildRoleArn: src.BuildRoleArn,
		Description:  aws.String(fmt.Sprintf("checkpoint %s of %s version %s", m.Digest, m.ImageARN, m.ImageVersion)),
		CodeArtifact: &types.CodeArtifactMemberUri{Value: newURI}, Logging: src.Logging,
		EgressNetworkConnectors: src.EgressNetworkConnectors, CpuConfigurations: src.CpuConfigurations, Resources: src.Resources,
		AdditionalOsCapabilities: src.AdditionalOsCapabilities, Hooks: src.Hooks, EnvironmentVariables: src.EnvironmentVariables,
	}
	if _, ok := src.Logging.(*types.LoggingMemberCloudWatch); ok {
		// The source's log group is named after the source image.
		in.Logging = &types.LoggingMemberCloudWatch{Value: types.CloudWatchLogging{LogGroup: aws.String(build.LogGroup(name))}}
	}
	out, err := o.Control.CreateMicrovmImage(ctx, in)
	if err != nil {
		return Baked{}, cplane.SDKError("CreateMicrovmImage", err)
	}
	b := Baked{Name: name, ImageARN: aws.ToString(out.ImageArn), Version: aws.ToString(out.ImageVersion), ArtifactURI: newURI, Checkpoint: m}
	if err := build.WaitBuilt(ctx, o.Control, b.ImageARN, b.Version, o.Wait); err != nil {
		return b, err
	}
	return b, refuseUnperformedBake(ctx, o.Control, store, b)
}

// refuseUnperformedBake deletes a baked image an emulator built without
// performing its steps, and says why: with no base image for FROM it runs
// guests on this machine's system directories and performs no ADD, so
// every launch would start without the checkpoint's files. AWS performs
// every step or fails the build, and is never asked.
func refuseUnperformedBake(ctx context.Context, c *lambdamicrovms.Client, store *Store, b Baked) error {
	lb, local, err := build.LocalBuild(ctx, c, b.Name, b.Version)
	if err != nil || !local || lb.Root == "image" {
		return err
	}
	life := context.WithoutCancel(ctx)
	_, derr := c.DeleteMicrovmImage(life, &lambdamicrovms.DeleteMicrovmImageInput{ImageIdentifier: aws.String(b.ImageARN)})
	if derr == nil && strings.HasPrefix(b.ArtifactURI, "s3://") {
		// Its artifact goes too; nothing else reads it.
		bucket, key, _ := strings.Cut(strings.TrimPrefix(b.ArtifactURI, "s3://"), "/")
		_, derr = store.S3.DeleteObject(life, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	}
	left := "deleted it and its artifact"
	if derr != nil {
		left = fmt.Sprintf("deleting it failed (%v), so image %s or its artifact %s is left", derr, b.Name, b.ArtifactURI)
	}
	return client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingNoUserSnapshot,
		"the emulator built image %s without its checkpoint's files: it has no base image for FROM, so it performed none of %q and its guests would run on this machine's system directories; %s. Start the emulator with `microvm emulator --base-image PATH` (the checkpoint's base as an OCI layout or docker-save tarball) and bake again",
		b.Name, lb.NotPerformed, left)
}

// readArtifact reads the source image's artifact: an s3:// object through
// the store's client, or a file:// one (a local build's).
func readArtifact(ctx context.Context, store *Store, uri string) ([]byte, error) {
	var r io.Reader
	switch {
	case strings.HasPrefix(uri, "s3://"):
		bucket, key, _ := strings.Cut(strings.TrimPrefix(uri, "s3://"), "/")
		out, err := store.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
		if err != nil {
			return nil, client.Errorf(taxonomy.KindPrecondition, "", "reading the source image's artifact %s: %w", uri, err).WithCause(err)
		}
		defer out.Body.Close()
		r = out.Body
	case strings.HasPrefix(uri, "file://"):
		f, err := os.Open(strings.TrimPrefix(uri, "file://"))
		if err != nil {
			return nil, client.Errorf(taxonomy.KindPrecondition, "", "reading the source image's artifact: %w", err)
		}
		defer f.Close()
		r = f
	default:
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "the source image's artifact %q is not an s3:// or file:// object this client can read", uri)
	}
	raw, err := io.ReadAll(io.LimitReader(r, maxBakedArtifactBytes+1))
	if err != nil {
		return nil, client.Errorf(taxonomy.KindPlatform, "", "reading the source image's artifact %s: %w", uri, err)
	}
	if len(raw) > maxBakedArtifactBytes {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "the source image's artifact is over %d bytes", maxBakedArtifactBytes)
	}
	return raw, nil
}

// bakeArtifact is the source artifact with its Dockerfile ending in an ADD
// of the checkpoint's tar, and that tar (the verified object, unpacked
// from zstd) beside it. Entries keep their order; the tar comes last.
func bakeArtifact(old []byte, object string) ([]byte, error) {
	zr, err := zip.NewReader(bytes.NewReader(old), int64(len(old)))
	if err != nil {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "the source image's artifact is not a zip: %w", err)
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	found := false
	for _, f := range zr.File {
		switch f.Name {
		case BakedTar:
			return nil, client.Errorf(taxonomy.KindInvalidArg, "", "the source image's artifact already carries %s", BakedTar)
		case "Dockerfile":
			rc, err := f.Open()
			if err != nil {
				return nil, err
			}
			df, err := io.ReadAll(io.LimitReader(rc, 1<<20))
			rc.Close()
			if err != nil {
				return nil, err
			}
			df = append(bytes.TrimRight(df, "\n"), []byte("\nADD "+BakedTar+" /\n")...)
			h := f.FileHeader
			w, err := zw.CreateHeader(&h)
			if err != nil {
				return nil, err
			}
			if _, err := w.Write(df); err != nil {
				return nil, err
			}
			found = true
		default:
			if err := zw.Copy(f); err != nil {
				return nil, err
			}
		}
	}
	if !found {
		return nil, client.Errorf(taxonomy.KindPrecondition, "", "the source image's artifact has no Dockerfile to add the checkpoint to")
	}
	obj, err := os.Open(object)
	if err != nil {
		return nil, err
	}
	defer obj.Close()
	zd, err := zstd.NewReader(obj)
	if err != nil {
		return nil, err
	}
	defer zd.Close()
	h := &zip.FileHeader{Name: BakedTar, Method: zip.Deflate, Modified: time.Unix(315532800, 0).UTC()}
	h.SetMode(0o644)
	w, err := zw.CreateHeader(h)
	if err != nil {
		return nil, err
	}
	if _, err := io.Copy(w, zd); err != nil {
		return nil, client.Errorf(taxonomy.KindUnexpected, "", "unpacking the verified checkpoint: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if buf.Len() > maxBakedArtifactBytes {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "the baked artifact is %d bytes, over %d", buf.Len(), maxBakedArtifactBytes)
	}
	return buf.Bytes(), nil
}

// bareBaseVersion is a read-back baseImageVersion in the bare integer a
// create takes: the service reads a pin of 1 back as 1.0 and refuses 1.0
// in a create (docs/PLATFORM.md, base-image-version-normalised and
// managed-base-versions).
func bareBaseVersion(v *string) *string {
	if v == nil {
		return nil
	}
	whole, frac, ok := strings.Cut(*v, ".")
	if ok && strings.Trim(frac, "0") == "" && whole != "" && strings.Trim(whole, "0123456789") == "" {
		return aws.String(whole)
	}
	return v
}
