package client

// Keeping a busy VM awake: the platform suspends a MicroVM after its idle
// policy's maxIdleDurationSeconds without an inbound request through the
// endpoint, however busy the guest is, and a request a guest process sends
// never counts (finding idle-policy). So while something this session
// started is in flight it sends GET /v1/health through the endpoint, the
// request measured to hold a VM awake, and it sends nothing otherwise, so
// an idle sandbox still suspends and stops billing at the running rate.

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/microvms/microvms/gen/taxonomy"
)

// keepAwake is one session's in-flight count and its pinger.
type keepAwake struct {
	every time.Duration

	mu      sync.Mutex
	n       int  // calls, streams and transfers in flight
	running bool // the pinger goroutine is alive
	pings   atomic.Int64
}

// WithKeepAwake makes the session send GET /v1/health through the endpoint
// every interval while a Run, an open exec stream (Stream, StartStream,
// Spawn) or a file transfer it started is in flight, and nothing while
// nothing is. Pick a fraction of the VM's maxIdleDurationSeconds
// (KeepAwakeInterval); zero or less leaves the session silent, which is
// also the default: an open stream is not counted as traffic by the
// platform as far as anyone measured.
func WithKeepAwake(interval time.Duration) Option {
	return func(s *Session) error {
		if interval <= 0 {
			s.awake = nil
			return nil
		}
		s.awake = &keepAwake{every: interval}
		return nil
	}
}

// KeepAwakeInterval is the interval a session keeping a VM with the given
// maxIdleDurationSeconds awake pings at: a quarter of the window, so three
// pings can be lost or late before the idle policy can fire.
func KeepAwakeInterval(maxIdle time.Duration) time.Duration {
	if maxIdle <= 0 {
		maxIdle = taxonomy.MinIdleDurationSec * time.Second
	}
	return maxIdle / 4
}

// KeepAwakePings is how many keep-awake pings the session has sent.
func (s *Session) KeepAwakePings() int64 {
	if s.awake == nil {
		return 0
	}
	return s.awake.pings.Load()
}

// busy marks one thing in flight until the returned function is called
// (more than once is harmless). Without WithKeepAwake it does nothing.
func (s *Session) busy() (done func()) {
	k := s.awake
	if k == nil {
		return func() {}
	}
	k.mu.Lock()
	k.n++
	if !k.running {
		k.running = true
		go s.pinger(k)
	}
	k.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			k.mu.Lock()
			k.n--
			k.mu.Unlock()
		})
	}
}

// pinger pings on each tick while anything is in flight, and exits at the
// first tick that finds nothing: an in-flight count that drops to zero and
// rises again between ticks (a stream reconnecting) keeps one ticker.
func (s *Session) pinger(k *keepAwake) {
	tick := time.NewTicker(k.every)
	defer tick.Stop()
	for range tick.C {
		k.mu.Lock()
		if k.n == 0 {
			k.running = false
			k.mu.Unlock()
			return
		}
		k.mu.Unlock()
		// Bounded by the interval, so a ping that hangs (a frozen VM) never
		// stacks up behind the next; its failure is not the work's failure.
		ctx, cancel := context.WithTimeout(context.Background(), k.every)
		_, _ = s.Health(ctx)
		cancel()
		k.pings.Add(1)
	}
}
