//go:build linux

package imagebuild

import (
	"testing"

	"github.com/microvms/microvms/internal/testvm"
	"github.com/microvms/microvms/localvm"
)

// agentdBin is the real daemon every guest of these tests runs.
var agentdBin string

func TestMain(m *testing.M) {
	localvm.Init() // this test binary is also every build step's init
	testvm.Main(m, &agentdBin)
}
