package client_test

import (
	"errors"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestResultUsageOnEveryPath: Result.Usage is filled from the exit frame of
// the run route and from the record a poll reads, with the output bytes the
// command wrote. The wrong edit it catches: a path that builds its Result
// from the exit event but drops usage (run.go and process.go each do).
func TestResultUsageOnEveryPath(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	ctx := testCtx(t)
	s := session(t, d.base, token)
	r, err := s.Run(ctx, []string{`head -c 3000 /dev/zero; printf ee >&2`}, client.RunOptions{StartOptions: client.StartOptions{Shell: true}})
	if err != nil {
		t.Fatal(err)
	}
	checkUsage(t, "run", r)
	e, err := s.Start(ctx, []string{`head -c 3000 /dev/zero; printf ee >&2`}, client.StartOptions{Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	p := e.Attach(ctx, 0)
	if _, _, oerr, eerr := readBoth(ctx, p); oerr != nil || eerr != nil {
		t.Fatal(oerr, eerr)
	}
	r, err = p.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkUsage(t, "attach", r)
	// A record read by poll carries it too.
	e, err = s.Start(ctx, []string{`head -c 3000 /dev/zero; printf ee >&2`}, client.StartOptions{Shell: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 2000 {
		if r, err = e.Poll(ctx); err != nil || r.Phase != protocol.PhaseRunning {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	checkUsage(t, "poll", r)
}

func checkUsage(t *testing.T, path string, r client.Result) {
	t.Helper()
	u := r.Usage
	if u == nil || u.Source != protocol.Rusage || u.StdoutBytes != 3000 || u.StderrBytes != 2 || u.WallSecs <= 0 || len(u.Missing) == 0 || r.OOMKilled {
		t.Fatalf("%s: usage %+v oom %v", path, u, r.OOMKilled)
	}
}

// TestLimitsRefusedByAGuestWithoutCgroups: a start with limits against an
// agentd with no delegated cgroup fails with the limits_unavailable slug
// (a protocol error, not retried), and runs nothing.
func TestLimitsRefusedByAGuestWithoutCgroups(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	ctx := testCtx(t)
	s := session(t, d.base, token)
	mem := uint64(64 << 20)
	_, err := s.Run(ctx, []string{"true"}, client.RunOptions{StartOptions: client.StartOptions{Limits: &protocol.ExecLimits{MemoryBytes: &mem}}})
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Slug() != taxonomy.SlugLimitsUnavailable || ce.Retryable() {
		t.Fatalf("err %v, want limits_unavailable, not retryable", err)
	}
}
