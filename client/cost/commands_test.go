package cost

import (
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/shopspring/decimal"

	"github.com/microvms/microvms/client"
)

// TestThreeOverlappingCommandsAndIdleAddUpExactly: a sandbox RUNNING 0-100 s
// and 200-260 s (suspended between) ran A (5-40 s), B (20-60 s) and C
// (30-210 s, across the suspension). Overlaps split 1/k, C's suspended
// 100 s count for nothing, idle is 5 s + 50 s, and the shares plus the idle
// remainder equal the running total to the last decimal place. The wrong
// edits it catches: counting suspended time (C gets 100 s more), giving
// overlapped time to each command whole (shares exceed the total), rounding
// shares to nearest (Check can fail), and a float anywhere (inexact sum).
func TestThreeOverlappingCommandsAndIdleAddUpExactly(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	running := []Interval{{at(0), at(100)}, {at(200), at(260)}}
	cmds := []CommandSpan{{"A", Interval{at(5), at(40)}}, {"B", Interval{at(20), at(60)}}, {"C", Interval{at(30), at(210)}}}
	rep, err := RunReport("run", class(t, 2048), Usage{Running: measured(t, 160*time.Second), Suspended: measured(t, 100*time.Second)}, Pinned(client.USEast1), t0)
	if err != nil {
		t.Fatal(err)
	}
	got, err := AttributeCommands(rep, running, cmds)
	if err != nil {
		t.Fatal(err)
	}
	// The running total is the two running lines, nothing else (the
	// suspended storage line is not attributed).
	var want decimal.Decimal
	for _, l := range rep.Lines {
		if l.Phase == PhaseRunning {
			usd, _ := l.Amount.Estimate()
			want = want.Add(usd)
		}
	}
	if !got.Total.Equal(want) || !got.Total.IsPositive() {
		t.Fatalf("total %s, want the running lines' %s", got.Total, want)
	}
	sum := got.Idle
	for _, s := range got.Shares {
		sum = sum.Add(s.USD)
	}
	if !sum.Equal(got.Total) || sum.String() != got.Total.String() {
		t.Fatalf("shares + idle = %s, total %s", sum, got.Total)
	}
	// Seconds: A 15 + 5 + 10/3, B 5 + 10/3 + 10, C 10/3 + 10 + 40 + 10.
	wantSecs := map[string]*big.Rat{"A": big.NewRat(70, 3), "B": big.NewRat(55, 3), "C": big.NewRat(190, 3)}
	for _, s := range got.Shares {
		w := wantSecs[s.ID]
		if s.Seconds.String() != w.FloatString(9) {
			t.Errorf("%s: %s s, want %s", s.ID, s.Seconds, w.FloatString(9))
		}
		// floor(total * w / 160 s) at 9 places, computed independently.
		q := new(big.Rat).Mul(got.Total.Rat(), w)
		q.Quo(q, big.NewRat(160, 1))
		exact := decimal.RequireFromString(q.FloatString(20))
		if s.USD.GreaterThan(exact) || exact.Sub(s.USD).GreaterThanOrEqual(decimal.New(1, -SharePlaces)) {
			t.Errorf("%s: share %s, exact %s: not the floor at %d places", s.ID, s.USD, exact, SharePlaces)
		}
	}
	if got.IdleSeconds.String() != "55" {
		t.Errorf("idle %s s, want 55", got.IdleSeconds)
	}
	if !got.Idle.GreaterThanOrEqual(got.Total.Mul(decimal.NewFromInt(55)).Div(decimal.NewFromInt(160)).Truncate(SharePlaces)) {
		t.Errorf("idle remainder %s is below idle time's share", got.Idle)
	}
	t.Logf("total %s = A %s + B %s + C %s + idle %s", got.Total, got.Shares[0].USD, got.Shares[1].USD, got.Shares[2].USD, got.Idle)
}

// TestAttributionRefusesIntervalsThatAreNotTheBill: running intervals that
// do not add up to the report's running time would split a different cost
// from the one billed.
func TestAttributionRefusesIntervalsThatAreNotTheBill(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)
	rep, err := RunReport("run", class(t, 2048), Usage{Running: measured(t, 60*time.Second)}, Pinned(client.USEast1), t0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = AttributeCommands(rep, []Interval{{t0, t0.Add(30 * time.Second)}}, nil)
	if err == nil || !strings.Contains(err.Error(), "billed") {
		t.Fatalf("err %v, want a refusal naming the billed running time", err)
	}
	// No command at all: everything is idle, exactly.
	b, err := AttributeCommands(rep, []Interval{{t0, t0.Add(60 * time.Second)}}, nil)
	if err != nil || !b.Idle.Equal(b.Total) {
		t.Fatalf("%+v %v", b, err)
	}
}
