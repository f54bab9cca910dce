package sandbox

import (
	"context"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws/retry"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/gen/taxonomy"
)

// PoolOptions describe a warm pool.
type PoolOptions struct {
	// Size is how many sandboxes the pool keeps launched and suspended,
	// 1..taxonomy.MaxPoolSize.
	Size int
	// Refill bounds the launches in flight at once while the pool fills,
	// 1..taxonomy.MaxFleetParallel; zero is taxonomy.DefaultFleetParallel,
	// or Size when smaller.
	Refill int
	// Launch launches each member (LaunchOn(c), or emu.Launch).
	Launch Launcher
	// Options is every member's launch. Each member gets a token of its own,
	// so AgentToken and Ledger must be unset. Env is delivered at launch,
	// long before Acquire, so it cannot carry one tenant's secrets: pass
	// those to the acquired sandbox (WriteFile, RunOptions) instead. Keep
	// Idle.SuspendedFor longer than members wait in the pool: one suspended
	// past its window is terminated by the platform, and Acquire then
	// discards it and takes the next.
	Options Options
	// MaxBackoff caps one delay between launches the control plane
	// throttled (default 20 s).
	MaxBackoff time.Duration
	// RefillAfter is how long after Acquire hands a member out its
	// replacement's launch starts (default DefaultRefillAfter; negative
	// starts it at once). Where members launch on the caller's own machine
	// (the local emulator), a guest start takes both of a small host's
	// cores for tens of milliseconds, and the tenant's first command would
	// queue behind it; on AWS the delay only postpones a remote call.
	RefillAfter time.Duration
}

// DefaultRefillAfter is PoolOptions.RefillAfter's default: measured on a
// 2-core host, a tenant's first command after Acquire took 9 ms with the
// replacement launching beside it and 2.3 ms without (BenchmarkTTI's pool
// row), and a short first command is done well within it.
const DefaultRefillAfter = 25 * time.Millisecond

// Pool keeps sandboxes of one image launched and suspended, so that a
// sandbox costs a resume rather than a launch. Acquire hands one out
// RUNNING; Release terminates it. A sandbox is never put back: whatever a
// tenant left in its files, processes or memory goes with it, and the pool
// launches a fresh one in its place. Its methods are safe for concurrent use.
//
// What idling costs: a suspended member bills snapshot storage, and the
// platform bills each snapshot at least its one-week minimum retention
// (docs/PLATFORM.md, "What is billed"), so a pool of N costs N weeks of
// storage of its snapshot size however briefly members wait, plus the
// running seconds between each launch and its suspend and a snapshot write
// and read per member served. Cost prices exactly that, from the platform's
// record of every member.
type Pool struct {
	o       PoolOptions
	refill  int
	backoff *retry.ExponentialJitterBackoff
	ctx     context.Context // the refill's, cancelled by Close
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu       sync.Mutex
	changed  chan struct{} // closed and replaced on every change below
	ready    []*Sandbox    // suspended, oldest first
	inflight int           // launches under way
	slots    chan struct{}
	closed   bool
	failures int   // refill launches that failed, ever
	lastErr  error // the latest of them
	all      []*Sandbox
	leased   map[*Sandbox]bool
	reports  []TeardownReport
	served   int
}

// NewPool starts filling a pool of o.Size in the background and returns at
// once; WaitReady waits for it to be full. A refused PoolOptions is the
// error, and nothing is launched. ctx bounds nothing after NewPool returns:
// the pool lives until Close.
func NewPool(ctx context.Context, o PoolOptions) (*Pool, error) {
	refill, err := checkFleet("a pool", o.Size, taxonomy.MaxPoolSize, o.Refill, o.Launch, o.Options)
	if err != nil {
		return nil, err
	}
	bg, stop := context.WithCancel(context.WithoutCancel(ctx))
	p := &Pool{
		o: o, refill: refill, backoff: newLaunchBackoff(o.MaxBackoff), ctx: bg, stop: stop,
		changed: make(chan struct{}), slots: make(chan struct{}, refill), leased: map[*Sandbox]bool{},
	}
	p.mu.Lock()
	p.fillLocked()
	p.mu.Unlock()
	return p, nil
}

// broadcastLocked wakes everyone waiting on a change.
func (p *Pool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// fillLocked starts launches until ready and in-flight members make Size.
func (p *Pool) fillLocked() {
	for !p.closed && len(p.ready)+p.inflight < p.o.Size {
		p.inflight++
		p.wg.Add(1)
		go p.launchMember()
	}
}

// refillLater starts the fill after o.RefillAfter (at once when negative).
// A Close in between is seen by fillLocked.
func (p *Pool) refillLater() {
	d := p.o.RefillAfter
	if d == 0 {
		d = DefaultRefillAfter
	}
	if d < 0 {
		p.fillLocked()
		return
	}
	time.AfterFunc(d, func() {
		p.mu.Lock()
		p.fillLocked()
		p.mu.Unlock()
	})
}

// launchMember launches one member and suspends it into the pool; a
// member that cannot be made ready is torn down and reported.
func (p *Pool) launchMember() {
	defer p.wg.Done()
	var sb *Sandbox
	var err error
	select {
	case p.slots <- struct{}{}:
		sb, _, err = launchBackingOff(p.ctx, p.o.Launch, p.o.Options, p.backoff)
		if err == nil {
			err = sb.Suspend(p.ctx)
		}
		<-p.slots
	case <-p.ctx.Done():
		err = client.Errorf(taxonomy.KindInterrupted, "", "the pool was closed before this member launched")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.broadcastLocked()
	p.inflight--
	if sb != nil {
		p.all = append(p.all, sb)
	}
	if err == nil && !p.closed {
		p.ready = append(p.ready, sb)
		return
	}
	if err != nil && !p.closed {
		p.failures++
		p.lastErr = err
	}
	if sb != nil {
		p.mu.Unlock()
		rep := sb.Terminate(context.WithoutCancel(p.ctx), TeardownOptions{})
		p.mu.Lock()
		p.reports = append(p.reports, rep)
	}
}

// Ready is how many members are suspended and waiting.
func (p *Pool) Ready() int { p.mu.Lock(); defer p.mu.Unlock(); return len(p.ready) }

// WaitReady waits until Size members are suspended and waiting, or a
// refill launch fails (its error), or ctx ends.
func (p *Pool) WaitReady(ctx context.Context) error {
	p.mu.Lock()
	failures := p.failures
	p.fillLocked() // after failures, nothing refills until someone asks
	for {
		switch {
		case p.closed:
			p.mu.Unlock()
			return p.closedError()
		case len(p.ready) >= p.o.Size:
			p.mu.Unlock()
			return nil
		case p.failures > failures:
			err := p.lastErr
			p.mu.Unlock()
			return err
		}
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return client.Errorf(taxonomy.KindInterrupted, "", "waiting for the pool to fill: %v", ctx.Err())
		}
		p.mu.Lock()
	}
}

func (p *Pool) closedError() error {
	return client.Errorf(taxonomy.KindInvalidArg, "", "the pool is closed")
}

// Acquire hands out a sandbox RUNNING and ready to exec: the oldest
// suspended member, resumed, and a launch started to replace it. With none
// waiting it waits for the refill; if a refill launch fails meanwhile, that
// failure is the error. A member that cannot be resumed (its suspended
// window passed, say) is torn down and the next one taken. The caller owns
// the sandbox until Release.
func (p *Pool) Acquire(ctx context.Context) (*Sandbox, error) {
	p.mu.Lock()
	failures := p.failures
	for {
		if p.closed {
			p.mu.Unlock()
			return nil, p.closedError()
		}
		if len(p.ready) > 0 {
			sb := p.ready[0]
			p.ready = p.ready[1:]
			// Leased from here on, so a Close while it resumes tears it down.
			p.leased[sb] = true
			p.mu.Unlock()
			if err := sb.Resume(ctx); err != nil {
				p.mu.Lock()
				mine := p.leased[sb]
				delete(p.leased, sb)
				p.mu.Unlock()
				if mine {
					p.discard(sb)
				}
				p.mu.Lock()
				p.fillLocked()
				p.mu.Unlock()
				if ctx.Err() != nil {
					return nil, err
				}
				p.mu.Lock()
				continue
			}
			p.mu.Lock()
			if p.closed {
				// Close ran while this one resumed, and tears it down.
				p.mu.Unlock()
				return nil, p.closedError()
			}
			// The replacement starts once this one is RUNNING and its tenant
			// has had RefillAfter to begin: on the local emulator a launch is
			// a guest starting on this machine, and neither the resume nor the
			// first command should wait behind it.
			p.refillLater()
			p.served++
			p.mu.Unlock()
			return sb, nil
		}
		if p.failures > failures {
			err := p.lastErr
			p.mu.Unlock()
			return nil, client.Errorf(client.KindOf(err), "", "no pool member ready, and launching one failed: %v", err).WithCause(err)
		}
		p.fillLocked()
		ch := p.changed
		p.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, client.Errorf(taxonomy.KindInterrupted, "", "waiting for a pool member: %v", ctx.Err())
		}
		p.mu.Lock()
	}
}

// discard tears down a member that will not be handed out.
func (p *Pool) discard(sb *Sandbox) {
	rep := sb.Terminate(context.WithoutCancel(p.ctx), TeardownOptions{})
	p.mu.Lock()
	p.reports = append(p.reports, rep)
	p.broadcastLocked()
	p.mu.Unlock()
}

// Release terminates a sandbox Acquire handed out; it is never put back
// (the next tenant gets a fresh one). The report is also part of Close's.
// A sandbox this pool did not hand out is terminated all the same.
func (p *Pool) Release(ctx context.Context, sb *Sandbox) TeardownReport {
	rep := sb.Terminate(context.WithoutCancel(ctx), TeardownOptions{})
	p.mu.Lock()
	delete(p.leased, sb)
	p.reports = append(p.reports, rep)
	p.mu.Unlock()
	return rep
}

// PoolReport is everything a pool tore down over its life, released,
// discarded and closed alike: one teardown report per member.
type PoolReport struct {
	Members []TeardownReport
	// Served is how many sandboxes Acquire handed out.
	Served int
}

// Leaked is every resource a member's teardown could not delete.
func (r PoolReport) Leaked() []Leak {
	var out []Leak
	for _, m := range r.Members {
		out = append(out, m.Leaked...)
	}
	return out
}

// Clean reports whether nothing leaked.
func (r PoolReport) Clean() bool { return len(r.Leaked()) == 0 }

// Close stops the refill and tears down every member: waiting, still
// launching, and handed out but not released (the caller's sandbox ends
// too: the pool launched it). It returns one report for the pool's whole
// life. A second Close returns the same report.
func (p *Pool) Close(ctx context.Context) PoolReport {
	p.mu.Lock()
	first := !p.closed
	p.closed = true
	p.broadcastLocked()
	p.mu.Unlock()
	if first {
		p.stop()
		p.wg.Wait() // in-flight launches tear down their own members
		p.mu.Lock()
		var left []*Sandbox
		left = append(left, p.ready...)
		for sb := range p.leased {
			left = append(left, sb)
		}
		p.ready, p.leased = nil, map[*Sandbox]bool{}
		p.mu.Unlock()
		reports := make([]TeardownReport, len(left))
		var wg sync.WaitGroup
		slots := make(chan struct{}, p.refill)
		for i, sb := range left {
			wg.Add(1)
			slots <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-slots }()
				reports[i] = sb.Terminate(context.WithoutCancel(ctx), TeardownOptions{})
			}()
		}
		wg.Wait()
		p.mu.Lock()
		p.reports = append(p.reports, reports...)
		p.mu.Unlock()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolReport{Members: append([]TeardownReport(nil), p.reports...), Served: p.served}
}

// Cost is the pool's one cost report: every member it ever launched, priced
// from the platform's record of it (Sandbox.Cost) and summed (cost.Sum).
// Idle time is the suspended line: snapshot storage, each member's billed at
// least the one-week retention floor, as the platform bills it; the
// running seconds before each suspend and the snapshot write and read of
// each member served are there too. Call it after Close for the whole bill.
func (p *Pool) Cost(ctx context.Context, rates cost.RateTable) (cost.Report, error) {
	p.mu.Lock()
	sbs := append([]*Sandbox(nil), p.all...)
	p.mu.Unlock()
	reports, err := costsOf(ctx, sbs, rates)
	if err != nil {
		return cost.Report{}, err
	}
	return cost.Sum("pool", reports...)
}
