package sandbox

import (
	"context"
	"testing"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Carried over from client/control's edge tests. Catches the duration and
// idle-policy bounds one off at either end (`sec <= Min`, `sec >= Max`,
// `MaxIdle <= 60s`, `SuspendedFor <= 0`): 1 s and 8 h, a 60 s idle and a
// zero suspended window are allowed, one second past any of them is not.
func TestRunInputBoundsAreInclusive(t *testing.T) {
	payload, err := cplane.NewRunHookPayload("tok", nil)
	if err != nil {
		t.Fatal(err)
	}
	const img = "arn:aws:lambda:us-east-1:123456789012:microvm-image:x"
	minIdle := taxonomy.MinIdleDurationSec * time.Second
	for _, o := range []Options{
		{MaxDuration: taxonomy.MinDurationSec * time.Second},
		{MaxDuration: taxonomy.MaxDurationSec * time.Second},
		{Idle: &cplane.IdlePolicy{MaxIdle: minIdle, SuspendedFor: 0}},
	} {
		if _, err := runInput("us-east-1", img, o, payload); err != nil {
			t.Errorf("%+v must be allowed: %v", o, err)
		}
	}
	for _, o := range []Options{
		{MaxDuration: taxonomy.MaxDurationSec*time.Second + time.Second},
		{MaxDuration: -time.Second},
		{Idle: &cplane.IdlePolicy{MaxIdle: minIdle - time.Second}},
		{Idle: &cplane.IdlePolicy{MaxIdle: minIdle, SuspendedFor: -time.Second}},
	} {
		if _, err := runInput("us-east-1", img, o, payload); client.KindOf(err) != taxonomy.KindInvalidArg {
			t.Errorf("%+v must be refused locally, got %v", o, err)
		}
	}
}

// Carried over from client/control. Catches Progress numbering its polls
// from 0, counting a poll twice, or reporting a state other than the one
// read.
func TestWaitProgressNumbersThePolls(t *testing.T) {
	var polls []int
	var states []string
	o := fast
	o.Progress = func(p cplane.Progress) { polls, states = append(polls, p.Poll), append(states, p.State) }
	c := scripted(t, types.MicrovmStatePending, types.MicrovmStatePending, types.MicrovmStateRunning)
	if _, err := WaitMicrovm(context.Background(), c, "mvm-1", types.MicrovmStateRunning, o); err != nil {
		t.Fatal(err)
	}
	if len(polls) != 3 || polls[0] != 1 || polls[2] != 3 || states[0] != "PENDING" || states[2] != "RUNNING" {
		t.Fatalf("progress %v %v, want polls 1..3 ending RUNNING", polls, states)
	}
}
