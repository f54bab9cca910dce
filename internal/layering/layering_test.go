package layering

import (
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

// moduleGraph reads the real import graph (non-test imports) from go list.
func moduleGraph(t *testing.T) Graph {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", Module+"/...")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	g := Graph{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, Module), "/")
		if rel == "" {
			continue
		}
		g[rel] = nil
		for _, imp := range p.Imports {
			if r, ok := strings.CutPrefix(imp, Module+"/"); ok {
				g[rel] = append(g[rel], r)
			}
		}
	}
	if len(g) < 10 {
		t.Fatalf("go list found %d packages; the graph is not the module's", len(g))
	}
	return g
}

func TestModuleFollowsTheLayering(t *testing.T) {
	if bad := Check(moduleGraph(t)); len(bad) > 0 {
		t.Fatalf("imports that point the wrong way:\n  %s", strings.Join(bad, "\n  "))
	}
}

// Each planted import is one a person could plausibly add; the check must
// refuse every one of them, or the rule guarding it has gone.
func TestPlantedWrongImportsAreRefused(t *testing.T) {
	planted := []struct{ from, to, want string }{
		{"agentd", "client", "agentd layer"},                                   // the daemon reaching for the library
		{"client", "agentd", "client layer"},                                   // the library reaching into the daemon
		{"client/sandbox", "emulator", "client layer"},                         // the library depending on the dev stand-in
		{"gen/protocol", "client", "gen/ layer"},                               // generated code importing hand-written code
		{"emulator", "agentd", "emulator layer"},                               // the emulator linking the daemon instead of running it
		{"localvm", "emulator", "localvm layer"},                               // the guest runtime reaching up into the control-plane fake
		{"localvm", "imagebuild", "localvm layer"},                             // the runtime depending on the builder over it
		{"localvm", "client", "localvm layer"},                                 // the runtime reaching for the library
		{"imagebuild", "emulator", "imagebuild layer"},                         // the builder reaching into the control plane
		{"emulator/iam", "emulator", "emulator/iam layer"},                     // the IAM slice reaching into the rest of the emulator
		{"client/sandbox", "localvm", "client layer"},                          // the library depending on the local runtime
		{"client", "cmd/microvm", "nothing imports cmd/"},                      // anything importing a command
		{"cmd/microvm", "cmd/agentd", "nothing imports cmd/"},                  // one command importing another
		{"cmd/agentd", "cmd/microvm/internal/render", "nothing imports cmd/"},  // or another command's parts
		{"client", "cmd/microvm/internal/render", "nothing imports cmd/"},      // the library reaching into a command's parts
		{"cmd/microvm/internal/render", "cmd/microvm", "nothing imports cmd/"}, // a command's part importing the command
		{"cmd/microvm", "client/lambdamicrovms", "may not import"},             // a command calling the control plane itself
		{"cmd/microvm", "client/lambdamicrovms/types", "may not import"},       // or naming its types
		{"internal/frames", "client", "internal/ layer"},
		{"cmd/agentd", "localvm/guestinit", "cmd/agentd layer"},               // the init linked back into every image's daemon
		{"cmd/microvm-guest-init", "localvm", "cmd/microvm-guest-init layer"}, // the init growing the launcher's host side                       // a shipped internal package reaching for the library (only the test tool testvm may)
	}
	for _, p := range planted {
		g := moduleGraph(t)
		if _, ok := g[p.from]; !ok {
			t.Fatalf("no package %s to plant in", p.from)
		}
		g[p.from] = append(g[p.from], p.to)
		bad := Check(g)
		found := false
		for _, b := range bad {
			if strings.HasPrefix(b, p.from+" imports "+p.to) && strings.Contains(b, p.want) {
				found = true
			}
		}
		if !found {
			t.Errorf("planted %s → %s was not refused (got %v)", p.from, p.to, bad)
		}
	}
	if bad := Check(Graph{"newdir/x": nil}); len(bad) != 1 || !strings.Contains(bad[0], "no layer") {
		t.Errorf("a package in no layer was accepted: %v", bad)
	}
}
