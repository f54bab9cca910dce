package platform

import (
	"context"
	"errors"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: a volume store that needs no bucket (writing under AWS's
// default), one that reaches AWS's S3 from an emulator's control plane,
// and one on an in-process emulator whose bucket was never made (every
// listing NoSuchBucket).
func TestVolumesStore(t *testing.T) {
	ctx := context.Background()
	s := emulator.New(emulator.Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	local := &Emulator{Credentials: emu.Credentials, CreateBucket: s.CreateBucket}
	p, err := Open(ctx, Options{Region: client.USEast1, Endpoint: base, Emulator: local, Getenv: env(map[string]string{"AWS_ENDPOINT_URL": base})})
	if err != nil {
		t.Fatal(err)
	}
	var ce *client.Error
	// No bucket named, an emulator's volumes live beside its checkpoints
	// (LocalCheckpointBucket), made on first use, as `checkpoint` keeps them.
	if v, err := p.Volumes(ctx, ""); err != nil || v.Store.Bucket != LocalCheckpointBucket {
		t.Fatalf("no bucket on an emulator: %+v, %v", v, err)
	}
	v, err := p.Volumes(ctx, "vols")
	if err != nil {
		t.Fatal(err)
	}
	if l, err := v.List(ctx); err != nil || len(l) != 0 {
		t.Fatalf("List = %+v, %v", l, err)
	}
	if _, err := p.BakeImage(ctx, "vols", "nothing", ""); !errors.As(err, &ce) || ce.Kind() != taxonomy.KindPrecondition {
		t.Fatalf("baking a missing checkpoint: %v", err)
	}
	remote, err := Open(ctx, Options{Region: client.USEast1, Endpoint: base, Emulator: local, Getenv: env(map[string]string{"AWS_ENDPOINT_URL_LAMBDA_MICROVMS": base})})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := remote.Volumes(ctx, "vols"); !errors.As(err, &ce) || ce.Kind() != taxonomy.KindPrecondition {
		t.Fatalf("an emulator's control plane with AWS's S3: %v", err)
	}
}
