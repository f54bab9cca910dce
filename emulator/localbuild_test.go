package emulator

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: the local-build route answering "image" for a version whose
// guests run on the host's directories (a bake would then pass with no
// files), answering for a version that does not exist, or taking writes.
func TestLocalBuildRouteSaysWhereGuestsRun(t *testing.T) {
	s := New(Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	s.AddImage("plain")
	path := func(name, version string) string {
		return strings.NewReplacer("{imageName}", name, "{imageVersion}", version).Replace(taxonomy.EmulatorImageBuildPath)
	}
	status, _, body := do(t, base, "GET", path("plain", "1.0"), "", "")
	var lb cliapi.LocalBuild
	if status != 200 || json.Unmarshal([]byte(body), &lb) != nil || lb.Root != "host" || lb.Building || lb.NotPerformed == nil {
		t.Fatalf("GET = %d %s; want 200, root host, notPerformed []", status, body)
	}
	if status, _, _ := do(t, base, "GET", path("plain", "9.0"), "", ""); status != 404 {
		t.Fatalf("an unknown version answered %d", status)
	}
	if status, _, _ := do(t, base, "GET", path("nosuch", "1.0"), "", ""); status != 404 {
		t.Fatalf("an unknown image answered %d", status)
	}
	if status, _, _ := do(t, base, "POST", path("plain", "1.0"), "{}", ""); status != 405 {
		t.Fatalf("POST answered %d", status)
	}
}
