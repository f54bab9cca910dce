package embedded

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/emulator"
)

// Catches issue 18's emulator stumbles coming back: a relative agentd path
// kept relative (the guest then died after the wait), the AWS default
// credential chain consulted (it went to IMDS and printed a WARN; here IMDS
// and every credential variable point nowhere, so consulting them fails the
// launch), and the waiter's 10 s default interval (Launch must poll at
// PollInterval when the caller sets none).
func TestLaunchOneCall(t *testing.T) {
	if err := emulator.CheckIsolation(); err != nil {
		t.Skip(err)
	}
	bin := buildAgentd(t)
	wd, _ := os.Getwd()
	rel, err := filepath.Rel(wd, bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"} {
		t.Setenv(v, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", "http://127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	emu, err := Start(ctx, Options{Agentd: rel})
	if err != nil {
		t.Fatal(err)
	}
	defer emu.Close()
	if !filepath.IsAbs(emu.Agentd) {
		t.Fatalf("agentd kept relative: %s", emu.Agentd)
	}
	sb, err := emu.Launch(ctx, sandbox.Options{Wait: cplane.WaitOptions{Progress: func(cplane.Progress) {}}})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx, sandbox.TeardownOptions{})
	r, err := sb.Run(ctx, []string{"true"}, client.RunOptions{})
	if err != nil || r.ExitStatus != 0 {
		t.Fatalf("%+v %v", r, err)
	}
	w := emu.fastWait(cplane.WaitOptions{Timeout: time.Minute, Progress: func(cplane.Progress) {}})
	if w.Interval != PollInterval || w.Timeout != time.Minute || w.Progress == nil || w.Grace != Grace {
		t.Fatalf("fast wait: %+v", w)
	}
}
