package sandbox

import (
	"math/rand"
	"testing"
)

// op is one thing that can happen to a sandbox: a call it makes (which the
// model may refuse) or a report from the platform (which the model applies
// only where the platform could send it).
type op struct {
	name string
	do   func(*model) error
}

var ops = []op{
	{"launchAccepted", func(m *model) error {
		m.launchAccepted()
		return nil
	}},
	{"bootstrapped", (*model).bootstrapped},
	{"diedBeforeRunning", func(m *model) error {
		if m.lifecycle == Pending && m.imageExists {
			m.diedBeforeRunning()
		}
		return nil
	}},
	{"suspend", (*model).suspend},
	{"suspended", func(m *model) error { m.suspended(); return nil }},
	{"resume", (*model).resume},
	{"resumed", func(m *model) error { m.resumed(); return nil }},
	{"terminate", func(m *model) error { _, err := m.terminate(); return err }},
	{"terminated", func(m *model) error {
		if m.lifecycle == Terminating || m.lifecycle == Suspended {
			m.terminated() // SUSPENDED → TERMINATED is the idle policy's window closing
		}
		return nil
	}},
}

// TestModelRandomWalks drives 2000 seeded random sequences of 40 operations
// and checks every invariant after every step. Wrong edits it catches: letting
// bootstrapped run twice (bootstrap_count 2), letting resumed revive a
// terminated VM, accepting suspend outside RUNNING, or terminate forgetting to
// set was_terminated.
func TestModelRandomWalks(t *testing.T) {
	r := rand.New(rand.NewSource(8))
	for walk := 0; walk < 2000; walk++ {
		m := newModel()
		var trace []string
		for step := 0; step < 40; step++ {
			o := ops[r.Intn(len(ops))]
			before := m
			err := o.do(&m)
			trace = append(trace, o.name)
			if err != nil && m != before {
				t.Fatalf("walk %d: refused %s changed the state %+v -> %+v; trace %v", walk, o.name, before, m, trace)
			}
			if bad := m.invariant(); bad != "" {
				t.Fatalf("walk %d: %s broken after %v: %+v", walk, bad, trace, m)
			}
			if before.wasTerminated && !m.wasTerminated {
				t.Fatalf("walk %d: was_terminated cleared by %s", walk, o.name)
			}
			if before.lifecycle == Terminated && m.lifecycle != Terminated {
				t.Fatalf("walk %d: left TERMINATED by %s", walk, o.name)
			}
		}
	}
}

// TestModelRefusals pins each refusal of the specification to a state, so a
// wrong edit that widens a guard (suspend from SUSPENDED, resume from RUNNING,
// a second install) turns this red.
func TestModelRefusals(t *testing.T) {
	at := func(l Lifecycle) model {
		m := newModel()
		m.launchAccepted()
		if l == Pending {
			return m
		}
		if err := m.bootstrapped(); err != nil {
			t.Fatal(err)
		}
		m.lifecycle = l
		if l == Terminating || l == Terminated {
			m.wasTerminated = true
		}
		return m
	}
	for _, l := range []Lifecycle{Pending, Running, Suspending, Suspended, Terminating, Terminated} {
		m := at(l)
		if err := m.suspend(); (err == nil) != (l == Running) {
			t.Errorf("suspend from %s: err=%v", l, err)
		}
		m = at(l)
		if err := m.resume(); (err == nil) != (l == Suspended) {
			t.Errorf("resume from %s: err=%v", l, err)
		}
		m = at(l)
		send, err := m.terminate()
		wantSend := l == Pending || l == Running || l == Suspended
		if send != wantSend || (err != nil) != (l == Suspending) {
			t.Errorf("terminate from %s: send=%v err=%v", l, send, err)
		}
		m = at(l)
		if err := m.bootstrapped(); (err == nil) != (l == Pending) {
			t.Errorf("bootstrap from %s: err=%v", l, err)
		}
	}
	m := at(Terminated)
	m.resumed()
	if m.lifecycle != Terminated {
		t.Fatal("resumed revived a TERMINATED VM")
	}
}
