package emulator

import (
	"regexp"
	"testing"
)

// Catches: ids from a counter alone, which repeat from one fresh emulator
// to the next (a restarted `microvm emulator` handed out the ids a ledger
// or kept record of the last one still named), and an id that no longer
// has the service's UUID shape or sort order.
func TestIDsAreUniqueAcrossServers(t *testing.T) {
	shape := regexp.MustCompile(`^microvm-[0-9a-f]{8}-0000-4000-8000-[0-9a-f]{12}$`)
	seen := map[string]bool{}
	for range 50 {
		s := New(Options{})
		first, second := s.nextID("microvm-"), s.nextID("microvm-")
		if seen[first] || !shape.MatchString(first) || first >= second {
			t.Fatalf("ids %q %q (seen before: %v)", first, second, seen[first])
		}
		seen[first] = true
	}
}
