package embedded

import (
	"os"
	"testing"

	"github.com/microvms/microvms/localvm"
)

// TestMain makes this test binary every local guest's init as well, as a
// binary embedding the emulator does in its main.
func TestMain(m *testing.M) {
	localvm.Init()
	os.Exit(m.Run())
}
