package checkpoint

import (
	"context"
	"errors"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/taxonomy"
)

// WithVolumes is a sandbox launched with volumes attached: what
// `--volume NAME:/path` on a launch makes.
type WithVolumes struct {
	*sandbox.Sandbox
	Attachments []*Attachment
}

// Launch launches a sandbox through launch and attaches every mount,
// each volume's newest generation laid before Launch returns, and keeps
// the leases renewed until Terminate (or ctx ends: a caller whose process
// outlives ctx renews with Attachment.Renew or Sync). A refused or failed
// attach detaches the volumes already attached without saving and
// terminates the sandbox, so a refusal leaves nothing running or leased.
func (v *Volumes) Launch(ctx context.Context, launch sandbox.Launcher, o sandbox.Options, mounts ...Mount) (*WithVolumes, error) {
	seen := map[string]bool{}
	for _, m := range mounts {
		if err := m.check(); err != nil {
			return nil, err
		}
		if seen[m.Name] {
			return nil, client.Errorf(taxonomy.KindInvalidArg, "", "volume %s is named twice", m.Name)
		}
		seen[m.Name] = true
	}
	sb, err := launch(ctx, o)
	if err != nil {
		return nil, err
	}
	w := &WithVolumes{Sandbox: sb}
	for _, m := range mounts {
		a, err := v.Attach(ctx, sb, m)
		if err != nil {
			for _, done := range w.Attachments {
				_, _ = done.Detach(context.WithoutCancel(ctx), false)
			}
			sb.Terminate(context.WithoutCancel(ctx), sandbox.TeardownOptions{})
			return nil, err
		}
		a.KeepLeased(ctx, nil)
		w.Attachments = append(w.Attachments, a)
	}
	return w, nil
}

// Sync saves a new generation of every attached volume.
func (w *WithVolumes) Sync(ctx context.Context) ([]Manifest, error) {
	var out []Manifest
	for _, a := range w.Attachments {
		m, err := a.Sync(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, m)
	}
	return out, nil
}

// Terminate saves a last generation of every volume, releases the leases
// and then terminates the sandbox, whatever the saves did: a save that
// failed is returned beside the teardown's report, its volume left at its
// previous generation.
func (w *WithVolumes) Terminate(ctx context.Context, o sandbox.TeardownOptions) (sandbox.TeardownReport, []Manifest, error) {
	var saved []Manifest
	var errs []error
	for _, a := range w.Attachments {
		m, err := a.Detach(ctx, true)
		if m != nil {
			saved = append(saved, *m)
		}
		errs = append(errs, err)
	}
	return w.Sandbox.Terminate(ctx, o), saved, errors.Join(errs...)
}
