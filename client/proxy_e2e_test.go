package client_test

// Regression tests for the session-plane review, each against a real agentd
// (startAgentd) over loopback.

import (
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: a proxy 403 only invalidating the token for the caller's next
// call (the call itself fails Credentials after one mint), a retry that
// resends the refused token without re-minting (the proxy refuses it
// again), and an unbounded re-mint loop (a proxy that refuses every token
// must cost exactly two mints).
func TestAgentdProxyRefusalRemintsOnce(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)

	t.Run("SecondTokenAccepted", func(t *testing.T) {
		ctx := testCtx(t)
		px := newRefusingProxy(t, d.base, func(tok string) bool { return tok != "tok-1" })
		var mints atomic.Int64
		s, err := client.Proxied(px.url, token, countingMinter(&mints), quickRetry)
		if err != nil {
			t.Fatal(err)
		}
		// A POST: safe to resend, since the refused one never reached agentd.
		e, err := s.Start(ctx, []string{"true"}, client.StartOptions{})
		if err != nil {
			t.Fatalf("start through a proxy that refused the first token: %v", err)
		}
		if m, f, r := mints.Load(), px.forwarded.Load(), px.refused.Load(); m != 2 || f != 1 || r != 1 {
			t.Fatalf("mints %d forwarded %d refused %d; want 2, 1, 1", m, f, r)
		}
		if got, _ := px.lastForwarded.Load().(string); got != "/v1/exec/start" {
			t.Fatalf("forwarded %q", got)
		}
		// The exec exists, under the id the start carried.
		if _, err := session(t, d.base, token).Exec(e.ID()).Poll(ctx); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("EveryTokenRefused", func(t *testing.T) {
		ctx := testCtx(t)
		px := newRefusingProxy(t, d.base, func(string) bool { return false })
		var mints atomic.Int64
		s, err := client.Proxied(px.url, token, countingMinter(&mints), quickRetry)
		if err != nil {
			t.Fatal(err)
		}
		_, err = s.Start(ctx, []string{"true"}, client.StartOptions{})
		if client.KindOf(err) != taxonomy.KindCredentials {
			t.Fatalf("a proxy refusing every token: %v, want Credentials", err)
		}
		if m, f, r := mints.Load(), px.forwarded.Load(), px.refused.Load(); m != 2 || f != 0 || r != 2 {
			t.Fatalf("mints %d forwarded %d refused %d; want 2, 0, 2", m, f, r)
		}
	})

	// A streamed upload cannot be replayed (its reader was consumed), so a
	// refusal fails it after one mint; the caller's next call re-mints.
	t.Run("StreamedBodyNotResent", func(t *testing.T) {
		ctx := testCtx(t)
		px := newRefusingProxy(t, d.base, func(tok string) bool { return tok != "tok-1" })
		var mints atomic.Int64
		s, err := client.Proxied(px.url, token, countingMinter(&mints), quickRetry)
		if err != nil {
			t.Fatal(err)
		}
		err = s.WriteFile(ctx, filepath.Join(d.dir, "up"), strings.NewReader("data"), 0o600)
		if client.KindOf(err) != taxonomy.KindCredentials || mints.Load() != 1 || px.forwarded.Load() != 0 {
			t.Fatalf("refused upload: %v, mints %d forwarded %d; want Credentials, 1, 0", err, mints.Load(), px.forwarded.Load())
		}
		if err := s.WriteFile(ctx, filepath.Join(d.dir, "up"), strings.NewReader("data"), 0o600); err != nil || mints.Load() != 2 {
			t.Fatalf("the next upload: %v after %d mints", err, mints.Load())
		}
	})
}

// Catches: a direct session's 403 classed Unexpected (a status agentd never
// sends, so the caller is told nothing), or classed as the proxied session's
// refusal (finding allowed-ports-union, which blames a token this session
// never sent), and a direct session resending the refused request: no
// token would change the proxy's answer.
func TestDirectSessionBehindTheProxyIsCredentials(t *testing.T) {
	d := startAgentd(t)
	d.bootstrap(t, token)
	ctx := testCtx(t)
	px := newRefusingProxy(t, d.base, func(tok string) bool { return tok != "" })
	s := session(t, px.url, token)
	_, err := s.Health(ctx)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Kind() != taxonomy.KindCredentials || ce.Finding() != taxonomy.FindingEndpointAuth {
		t.Fatalf("got %v (%T), want Credentials with finding %s", err, err, taxonomy.FindingEndpointAuth)
	}
	if _, ok := ce.WireKind(); ok || !strings.Contains(err.Error(), "HTTP 403") || !strings.Contains(err.Error(), "proxy token") {
		t.Fatalf("message %q: want the status and the proxy token named, and no wire kind", err)
	}
	if n, f := px.refused.Load(), px.forwarded.Load(); n != 1 || f != 0 {
		t.Fatalf("%d requests refused and %d forwarded, want exactly one refused", n, f)
	}
}
