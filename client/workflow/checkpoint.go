package workflow

import (
	"context"
	"strings"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// CheckpointOptions describe `microvm checkpoint ID`: the running MicroVM
// (attached by its id and the agent token its launch installed), the store
// (Platform's checkpoint bucket) and what to save.
type CheckpointOptions struct {
	Platform   *platform.Platform
	Bucket     string
	MicrovmID  string
	AgentToken string
	Save       checkpoint.Options
}

// Checkpoint attaches to a running MicroVM and saves its paths; it returns
// the manifest and the bucket it is in. The MicroVM is left running.
func Checkpoint(ctx context.Context, o CheckpointOptions) (checkpoint.Manifest, string, error) {
	store, err := o.Platform.CheckpointStore(ctx, o.Bucket)
	if err != nil {
		return checkpoint.Manifest{}, "", err
	}
	sb, err := sandbox.Attach(ctx, o.Platform.Control(), o.MicrovmID, o.AgentToken, sandbox.Options{})
	if err != nil {
		return checkpoint.Manifest{}, store.Bucket, err
	}
	m, err := save(ctx, sb, store, o.Save)
	return m, store.Bucket, err
}

// CheckpointSandbox saves paths of a sandbox this process holds into the
// platform's store (the engine's checkpoint op).
func CheckpointSandbox(ctx context.Context, p *platform.Platform, bucket string, sb *sandbox.Sandbox, o checkpoint.Options) (checkpoint.Manifest, string, error) {
	store, err := p.CheckpointStore(ctx, bucket)
	if err != nil {
		return checkpoint.Manifest{}, "", err
	}
	m, err := save(ctx, sb, store, o)
	return m, store.Bucket, err
}

// save is checkpoint.Checkpoint with the refusal of a default "/" saying
// what every surface passes instead of the library's option name.
func save(ctx context.Context, sb *sandbox.Sandbox, store *checkpoint.Store, o checkpoint.Options) (checkpoint.Manifest, error) {
	m, err := checkpoint.Checkpoint(ctx, sb, store, o)
	if err != nil && len(o.Paths) == 0 && client.KindOf(err) == taxonomy.KindInvalidArg && strings.Contains(err.Error(), "no default to save") {
		return m, client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingBaseImagesLackWorkdir,
			"MicroVM %s runs its commands in \"/\" (its image sets no WORKDIR), and the whole filesystem is not a default checkpoint: name what to save (--path /dir, repeatable; paths=[...] in Python and TypeScript)", sb.ID())
	}
	if err != nil {
		return m, err
	}
	return normal(m), nil
}

// normal gives a manifest's lists as empty, not null, for the closed
// shapes the envelopes and engine answers declare.
func normal(m checkpoint.Manifest) checkpoint.Manifest {
	if m.Labels == nil {
		m.Labels = []cliapi.CheckpointLabel{}
	}
	if m.ChangedUnderneath == nil {
		m.ChangedUnderneath = []string{}
	}
	if m.Paths == nil {
		m.Paths = []string{}
	}
	return m
}

// Checkpoints lists the stored checkpoints, newest first; name keeps the
// one of that name (or digest).
func Checkpoints(ctx context.Context, p *platform.Platform, bucket, name string) ([]checkpoint.Manifest, string, error) {
	store, err := p.CheckpointStore(ctx, bucket)
	if err != nil {
		return nil, "", err
	}
	if name != "" {
		m, err := store.Get(ctx, name)
		if err != nil {
			return nil, store.Bucket, err
		}
		return []checkpoint.Manifest{normal(m)}, store.Bucket, nil
	}
	list, err := store.List(ctx)
	for i := range list {
		list[i] = normal(list[i])
	}
	return list, store.Bucket, err
}

// RemoveCheckpoint deletes a checkpoint by name or digest: its manifest,
// and its object when no other manifest names it. It returns the manifest
// removed and the keys deleted.
func RemoveCheckpoint(ctx context.Context, p *platform.Platform, bucket, ref string) (checkpoint.Manifest, []string, string, error) {
	store, err := p.CheckpointStore(ctx, bucket)
	if err != nil {
		return checkpoint.Manifest{}, nil, "", err
	}
	m, err := store.Get(ctx, ref)
	if err != nil {
		return m, nil, store.Bucket, err
	}
	keys, err := store.Remove(ctx, ref)
	return normal(m), keys, store.Bucket, err
}
