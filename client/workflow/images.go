package workflow

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/taxonomy"
)

var sprintf = fmt.Sprintf

// ResolveImage turns an image's ARN or name into its ARN and name: an ARN
// passes through (its name read by cplane.ParseImageRef), a name is looked
// up through every page of the account's listing.
func ResolveImage(ctx context.Context, p *platform.Platform, id string) (arn, name string, err error) {
	if strings.HasPrefix(id, "arn:") {
		// A malformed ARN passes too: the launch refuses it with the
		// finding that says why (cplane.ParseImageRef).
		return id, cplane.ImageName(id), nil
	}
	arn, err = p.FindImage(ctx, id)
	if err != nil {
		return "", "", err
	}
	if arn == "" {
		return "", "", client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingImageARNColon,
			"no image named %s in %s; `microvm build` makes one (the service answers a bare name with a 400 that says nothing about names)", id, p.Region())
	}
	return arn, id, nil
}

// DeleteImage deletes an image a workflow built but never launched from,
// and its build log group; it returns, as "<kind> <id>", what it could not
// delete, each also said to warn.
func DeleteImage(ctx context.Context, p *platform.Platform, arn, group string, logs sandbox.LogGroupDeleter, warn func(string)) []string {
	ctx = context.WithoutCancel(ctx)
	say := func(format string, args ...any) {
		if warn != nil {
			warn(sprintf(format, args...))
		}
	}
	var leaked []string
	if _, err := cplane.ParseImageRef(arn); err == nil {
		if err := p.DeleteImage(ctx, arn); err != nil {
			leaked = append(leaked, "image "+arn)
			say("could not delete image %s: %v", arn, err)
		}
	}
	if group != "" && logs != nil {
		if err := p.DeleteLogGroup(ctx, group); err != nil {
			leaked = append(leaked, "log_group "+group)
			say("could not delete the build log group %s: %v", group, err)
		}
	}
	return leaked
}

// RemoveLocalArtifact deletes a file:// artifact and its directory when that
// is left empty; any other URI is left alone.
func RemoveLocalArtifact(uri string) {
	u, err := url.Parse(uri)
	if err != nil || u.Scheme != "file" || u.Path == "" {
		return
	}
	if os.Remove(u.Path) == nil {
		_ = os.Remove(filepath.Dir(u.Path)) // only if empty
	}
}

// existingImage resolves img.Identifier for a run or a fleet, says it was
// found when it was given by name, records it on rec, and sets *size to
// the image's own class when the control plane names one (a launch runs
// at its image's class, whatever it asks).
func existingImage(ctx context.Context, p *platform.Platform, img Image, rec *ledger.Record, event func(Event), size *client.SizeClass) (arn, name string, err error) {
	if arn, name, err = ResolveImage(ctx, p, img.Identifier); err != nil {
		return "", "", err
	}
	if !strings.HasPrefix(img.Identifier, "arn:") {
		event(Event{Step: ImageFound, Name: name, Image: arn})
	}
	update(rec, func(r *ledger.Run) { r.Image, r.ImageARN = name, arn })
	if cls, err := build.ImageClass(ctx, p.Control(), arn, img.Version); err == nil {
		*size = cls
	}
	return arn, name, nil
}
