//go:build linux

package localvm

// Local mode as an ordinary user, and the refusals of a host that forbids
// unprivileged user namespaces.

import (
	"fmt"
	"strings"
	"testing"
)

// Catches: a refusal that does not name the host setting that blocks
// unprivileged user namespaces, or names the wrong one.
func TestUserNamespaceRefusalNamesTheSetting(t *testing.T) {
	for _, tc := range []struct {
		files map[string]string
		want  string
	}{
		{map[string]string{"/proc/sys/user/max_user_namespaces": "0"}, "user.max_user_namespaces"},
		{map[string]string{"/proc/sys/user/max_user_namespaces": "100", "/proc/sys/kernel/unprivileged_userns_clone": "0"}, "kernel.unprivileged_userns_clone"},
		{map[string]string{"/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1"}, "apparmor_restrict_unprivileged_userns"},
		{map[string]string{"/proc/sys/user/max_user_namespaces": "100", "/proc/sys/kernel/apparmor_restrict_unprivileged_userns": "0"}, ""},
	} {
		got := userNamespacesRefusalFrom(func(p string) string { return tc.files[p] })
		if tc.want == "" && got != "" || !strings.Contains(got, tc.want) {
			t.Errorf("%v: %q, want it to name %q", tc.files, got, tc.want)
		}
	}
}

// Catches: a binary that launches guests without calling Init at the top of
// its main (the re-exec was a package init() until issue 46): its sealed
// copy would run the program's own main as the guest's init. The runtime
// refuses before re-executing anything.
func TestLaunchWithoutInitIsRefused(t *testing.T) {
	initCalled.Store(false)
	defer initCalled.Store(true)
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "Init was not called") {
			t.Fatalf("CheckIsolation without Init: recovered %v, want the refusal naming Init", r)
		}
	}()
	_ = CheckIsolation()
}
