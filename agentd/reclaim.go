package agentd

import (
	"runtime/debug"
	"sync/atomic"
)

// reclaimAfterBytes is how much released head output prompts a collection:
// half of the default max_output_bytes, so every ack of a capped head does,
// and a stream of small acks never does.
const reclaimAfterBytes = 4 << 20

// reclaimer hands the memory of released heads back before the next exec
// can fault in new pages beside them. An ack turns up to 2 x max_output_bytes
// into garbage at once; left to the pacer (GOGC 50) that garbage is still
// resident when the next large exec allocates its head, so two heads' worth
// of pages are touched and the peak RSS holds both. Measured on the shared
// ruler (six 256 MiB streams, each acked): VmHWM 28-32 MiB before, with the
// heads of consecutive execs never resident together after.
type reclaimer struct {
	pending atomic.Int64 // released bytes not yet collected
	running atomic.Bool
}

// released records n bytes of head output dropped by an ack, after the body
// that echoed them has been written (the snapshot no longer pins them). Past
// reclaimAfterBytes it starts one collection in the background; the ack's
// caller never waits for it.
func (c *reclaimer) released(n int) {
	if c.pending.Add(int64(n)) < reclaimAfterBytes || !c.running.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer c.running.Store(false)
		c.pending.Store(0)
		debug.FreeOSMemory()
	}()
}
