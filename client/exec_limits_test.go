package client_test

import (
	"errors"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestNewExecLimits: all zero is no limit (nil, not an empty limits
// object, which a guest without cgroups would refuse); a negative count is
// InvalidArg; counts past the wire's 32 bits are clamped. Catches: an empty
// ExecLimits for zeros, a negative wrapped into a huge unsigned limit, and
// a CPU count truncated modulo 2^32 into a tiny one.
func TestNewExecLimits(t *testing.T) {
	if l, err := client.NewExecLimits(0, 0, 0); l != nil || err != nil {
		t.Fatalf("zeros: %+v %v", l, err)
	}
	for _, c := range [][3]int64{{-1, 0, 0}, {0, -1, 0}, {0, 0, -1}} {
		var ce *client.Error
		if _, err := client.NewExecLimits(c[0], c[1], c[2]); !errors.As(err, &ce) || ce.Kind() != taxonomy.KindInvalidArg {
			t.Errorf("%v: want InvalidArg, got %v", c, err)
		}
	}
	l, err := client.NewExecLimits(64<<20, 1<<33, 1<<33)
	if err != nil || l.MemoryBytes == nil || *l.MemoryBytes != 64<<20 || *l.CPUMillicores != 1<<20 || *l.Pids != 1<<22 {
		t.Fatalf("%+v %v", l, err)
	}
	if l, _ := client.NewExecLimits(0, 500, 0); l.MemoryBytes != nil || l.Pids != nil || *l.CPUMillicores != 500 {
		t.Fatalf("only the cpu limit set: %+v", l)
	}
}
