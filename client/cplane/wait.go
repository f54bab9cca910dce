package cplane

import "time"

// Progress is one observation a waiter reports.
type Progress struct {
	Poll    int
	State   string
	Elapsed time.Duration
}

// WaitOptions bound and observe a wait. Every wait ends: at the context's
// deadline, or at Timeout when the context has none. Polls start at once and
// back off from Interval.
type WaitOptions struct {
	// Interval is the shortest delay between polls (the waiter's default
	// when unset).
	Interval time.Duration
	// Timeout applies when ctx has no deadline (default 30 minutes for an
	// image, 10 minutes for a MicroVM).
	Timeout time.Duration
	// Grace is how long an image may sit in CREATING with every build
	// PENDING before it is called wedged (default 10 minutes).
	Grace time.Duration
	// Progress, if set, is called after every poll.
	Progress func(Progress)
}
