package agentd

import (
	"testing"
	"time"
)

// With max_output_bytes at 0 no byte fits the head, so any output at all is
// cut and reported truncated; and a head filled exactly by one read is
// truncated by the next one. Catches, in publish: the full head's
// `l.headCap >= 0` made `> 0` or negated (`< 0`): a cap of 0 then keeps
// nothing and says nothing was cut.
func TestAnyOutputPastAZeroCapIsTruncated(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.MaxOutputBytes = 0 })
	d.mustStart(shell("zero", "printf x"))
	o := d.waitExited("zero")
	if o.Stdout == nil || *o.Stdout != "" || o.Truncated == nil || !*o.Truncated {
		t.Fatalf("one byte under max_output_bytes=0: %s, want empty stdout, truncated", o.raw)
	}
	d.mustStart(shell("none", "true"))
	if o := d.waitExited("none"); o.Truncated == nil || *o.Truncated {
		t.Fatalf("no output under max_output_bytes=0: %s, want truncated false", o.raw)
	}
}

// The attach grace only holds output that would push unread bytes out of
// the replay window: a command whose output fits the window finishes at
// once, though nobody has attached and the grace is an hour. Catches, in
// makeRoom: the grace's `newStart > l.start` made `>=` (every write waits
// for an attach or the grace's end, whether or not the window moves).
func TestOutputThatFitsTheWindowIsNotHeldForAnAttach(t *testing.T) {
	d := bootedDaemon(t, func(c *Config) { c.StreamAttachGrace = time.Hour })
	d.mustStart(shell("small", "printf hello; printf world >&2"))
	o := d.waitExited("small")
	if o.ExitCode == nil || *o.ExitCode != 0 || o.Stdout == nil || *o.Stdout != "hello" || o.Stderr == nil || *o.Stderr != "world" {
		t.Fatalf("a small unattached command under an hour's grace: %s", o.raw)
	}
}
