// Package layering states the module's dependency direction as data, so a
// test can hold the code to it:
//
//	api, schema → gen (and docs) → agentd | client → emulator → cmd
//
// gen/ is generated and imports nothing of ours but gen/; agentd (the daemon
// inside the VM) and client (the library) never import each other, the
// emulator or a command; the emulator is a development stand-in that may use
// the library and the generated contracts but not the daemon's code (it runs
// agentd as a process); and nothing imports cmd/. It must never hold
// behaviour beyond reading the graph `go list` reports.
package layering

import (
	"fmt"
	"sort"
	"strings"
)

// Module is this module's import path.
const Module = "github.com/microvms/microvms"

// Graph maps a package (path relative to Module) to the packages of this
// module it imports, also relative.
type Graph map[string][]string

// rule says which of this module's packages a layer may import, by prefix.
type rule struct {
	layer string   // prefix of the importing package
	may   []string // prefixes it may import
}

// rules, most specific layer first. A package matching no layer is refused,
// so a new top-level directory has to be placed here deliberately.
var rules = []rule{
	{"gen/", []string{"gen/"}},
	{"api", []string{}},
	{"docs", []string{}}, // the generated JSON documents, embedded
	{"schema", []string{"schema", "internal/"}},
	{"internal/", []string{"internal/", "gen/"}},
	{"agentd", []string{"agentd", "gen/", "internal/", "docs"}},
	{"client", []string{"client", "gen/", "internal/"}},
	{"emulator", []string{"emulator", "client", "gen/", "internal/"}},
	{"cmd/", []string{"agentd", "client", "emulator", "gen/", "internal/", "api", "schema", "docs"}},
}

// Check returns every import in g that points the wrong way, sorted.
func Check(g Graph) []string {
	var bad []string
	for pkg, imports := range g {
		r, ok := layerOf(pkg)
		if !ok {
			bad = append(bad, fmt.Sprintf("%s belongs to no layer; place it in internal/layering", pkg))
			continue
		}
		for _, imp := range imports {
			if strings.HasPrefix(imp, "cmd/") {
				bad = append(bad, fmt.Sprintf("%s imports %s: nothing imports cmd/", pkg, imp))
				continue
			}
			if !allowed(r, imp) {
				bad = append(bad, fmt.Sprintf("%s imports %s: the %s layer may import only %v", pkg, imp, r.layer, r.may))
			}
		}
	}
	sort.Strings(bad)
	return bad
}

func layerOf(pkg string) (rule, bool) {
	for _, r := range rules {
		if within(pkg, r.layer) {
			return r, true
		}
	}
	return rule{}, false
}

func allowed(r rule, imp string) bool {
	for _, p := range r.may {
		if within(imp, p) {
			return true
		}
	}
	return false
}

// within reports whether pkg is the package prefix names or below it.
func within(pkg, prefix string) bool {
	base := strings.TrimSuffix(prefix, "/")
	return pkg == base || strings.HasPrefix(pkg, base+"/")
}
