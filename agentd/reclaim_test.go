package agentd

import (
	"runtime"
	"testing"
	"time"
)

func forcedGCs() uint32 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.NumForcedGC
}

// An ack of a capped head must start a collection, and small acks must add
// up to one rather than each forcing their own. Catches: the released call
// dropped from ExecAck's path or its threshold inverted (no forced collection
// after a large release), and a reclaimer that collects on every small ack
// (pending not accumulating).
func TestReclaimAfterLargeRelease(t *testing.T) {
	var c reclaimer
	c.released(reclaimAfterBytes / 4)
	if got := c.pending.Load(); got != reclaimAfterBytes/4 {
		t.Fatalf("pending after a small release = %d, want %d", got, reclaimAfterBytes/4)
	}
	if c.running.Load() {
		t.Fatal("a release under the threshold started a collection")
	}
	before := forcedGCs()
	c.released(reclaimAfterBytes)
	deadline := time.Now().Add(10 * time.Second)
	for forcedGCs() == before || c.running.Load() {
		if time.Now().After(deadline) {
			t.Fatal("no forced collection after releasing more than reclaimAfterBytes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := c.pending.Load(); got != 0 {
		t.Fatalf("pending after the collection = %d, want 0", got)
	}
}
