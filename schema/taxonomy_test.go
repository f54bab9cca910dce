package schema_test

import (
	"fmt"
	"testing"

	"github.com/microvms/microvms/gen/taxonomy"
)

// taxModel is the taxonomy reduced to what its invariants talk about, so each
// invariant can be run over the generated code and over a copy with one
// planted defect (proving the invariant can fail).
type taxModel struct {
	kinds      []kindRow
	wires      []wireRow
	exitValues []int
	fromStatus func(int) (string, bool)
}

type kindRow struct {
	name, code string
	exit       int
}

type wireRow struct {
	name, kind string
	status     int
	hasStatus  bool
}

func generatedModel() taxModel {
	var m taxModel
	for _, k := range taxonomy.ErrorKinds {
		m.kinds = append(m.kinds, kindRow{k.String(), k.Code(), int(k.Exit())})
	}
	for _, w := range taxonomy.WireKinds {
		s, ok := w.Status()
		m.wires = append(m.wires, wireRow{w.String(), w.ErrorKind().String(), s, ok})
	}
	for _, r := range taxonomy.ExitTable {
		m.exitValues = append(m.exitValues, int(r.Value))
	}
	m.fromStatus = func(s int) (string, bool) {
		w, ok := taxonomy.WireKindFromStatus(s)
		return w.String(), ok
	}
	return m
}

// The invariants. Each returns nil when it holds.
var invariants = map[string]func(taxModel) error{
	// Wrong edit caught: adding a 14th kind, or two kinds sharing an ERR_ code.
	"fourteen kinds with distinct codes": func(m taxModel) error {
		if len(m.kinds) != 14 {
			return fmt.Errorf("%d error kinds, want 14", len(m.kinds))
		}
		seen := map[string]string{}
		for _, k := range m.kinds {
			if other, dup := seen[k.code]; dup {
				return fmt.Errorf("%s and %s share code %s", other, k.name, k.code)
			}
			seen[k.code] = k.name
		}
		return nil
	},
	// Wrong edit caught: pointing two kinds at one exit row, or leaving a row unused.
	"kind to exit is injective and covers 1..14": func(m taxModel) error {
		used := map[int]string{}
		for _, k := range m.kinds {
			if other, dup := used[k.exit]; dup {
				return fmt.Errorf("%s and %s both exit %d", other, k.name, k.exit)
			}
			used[k.exit] = k.name
		}
		for v := 1; v <= 14; v++ {
			if _, ok := used[v]; !ok {
				return fmt.Errorf("exit row %d has no kind", v)
			}
		}
		return nil
	},
	// Wrong edit caught: renumbering or dropping an exit row (the table is append-only).
	"exit table is 0..14 in order": func(m taxModel) error {
		if len(m.exitValues) != 15 {
			return fmt.Errorf("%d exit rows, want 15", len(m.exitValues))
		}
		for i, v := range m.exitValues {
			if v != i {
				return fmt.Errorf("row %d has value %d", i, v)
			}
		}
		return nil
	},
	// Wrong edit caught: declaring a status on a wire kind that the lookup does not return for it.
	"status and wire kind are inverse": func(m taxModel) error {
		for _, w := range m.wires {
			if !w.hasStatus {
				continue
			}
			got, ok := m.fromStatus(w.status)
			if !ok || got != w.name {
				return fmt.Errorf("status %d resolves to %q, want %s", w.status, got, w.name)
			}
		}
		return nil
	},
	// Wrong edit caught: a generic "any 4xx is ProtocolError" fallback.
	"unmapped 4xx have no wire kind": func(m taxModel) error {
		for _, s := range []int{402, 405, 418, 429} {
			if got, ok := m.fromStatus(s); ok {
				return fmt.Errorf("status %d resolved to %s; an unlisted 4xx must not", s, got)
			}
		}
		return nil
	},
	// Wrong edit caught: dropping the 5xx fallback, or letting it swallow 503.
	"5xx falls back to ServerError except 503": func(m taxModel) error {
		for s, want := range map[int]string{500: "ServerError", 502: "ServerError", 599: "ServerError", 503: "NotBootstrapped"} {
			if got, _ := m.fromStatus(s); got != want {
				return fmt.Errorf("status %d resolved to %q, want %s", s, got, want)
			}
		}
		return nil
	},
	// Wrong edit caught: making Conflict (or any sixth kind) retryable, which
	// would retry a request the daemon refused on its merits.
	"exactly five retryable wire kinds": func(m taxModel) error {
		n := 0
		for _, w := range m.wires {
			if w.kind == "Retryable" {
				n++
			}
		}
		if len(m.wires) != 13 || n != 5 {
			return fmt.Errorf("%d wire kinds with %d retryable, want 13 with 5", len(m.wires), n)
		}
		return nil
	},
}

func TestTaxonomyInvariants(t *testing.T) {
	m := generatedModel()
	for name, inv := range invariants {
		if err := inv(m); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestTaxonomyInvariantsCanFail plants the wrong edit each invariant names and
// requires that invariant to notice. An invariant that passes here is a guard
// that cannot fail.
func TestTaxonomyInvariantsCanFail(t *testing.T) {
	mutants := map[string]func(*taxModel){
		"fourteen kinds with distinct codes": func(m *taxModel) { m.kinds[3].code = m.kinds[2].code },
		"kind to exit is injective and covers 1..14": func(m *taxModel) {
			m.kinds[12].exit = m.kinds[11].exit
		},
		"exit table is 0..14 in order": func(m *taxModel) { m.exitValues = m.exitValues[:14] },
		"status and wire kind are inverse": func(m *taxModel) {
			for i := range m.wires {
				if m.wires[i].name == "Conflict" {
					m.wires[i].status = 422
				}
			}
		},
		"unmapped 4xx have no wire kind": func(m *taxModel) {
			inner := m.fromStatus
			m.fromStatus = func(s int) (string, bool) {
				if s >= 400 && s < 500 {
					if w, ok := inner(s); ok {
						return w, ok
					}
					return "ProtocolError", true
				}
				return inner(s)
			}
		},
		"5xx falls back to ServerError except 503": func(m *taxModel) {
			inner := m.fromStatus
			m.fromStatus = func(s int) (string, bool) {
				if s >= 500 {
					return "ServerError", true
				}
				return inner(s)
			}
		},
		"exactly five retryable wire kinds": func(m *taxModel) {
			for i := range m.wires {
				if m.wires[i].name == "Conflict" {
					m.wires[i].kind = "Retryable"
				}
			}
		},
	}
	for name, inv := range invariants {
		mutate, ok := mutants[name]
		if !ok {
			t.Errorf("invariant %q has no mutant proving it can fail", name)
			continue
		}
		m := generatedModel()
		mutate(&m)
		if inv(m) == nil {
			t.Errorf("invariant %q passed against its planted defect", name)
		}
	}
}

func TestEveryKindNamesAKnownFinding(t *testing.T) {
	for _, k := range taxonomy.ErrorKinds {
		if f := k.Finding(); f != "" && f.Title() == "" {
			t.Errorf("%s names finding %q, which has no title", k, f)
		}
	}
	for name, f := range taxonomy.ConstantFindings {
		if f.Title() == "" {
			t.Errorf("constant %s names unknown finding %q", name, f)
		}
	}
}

func TestSizeClassTableIsWrittenOut(t *testing.T) {
	// A second copy of the documented table, on purpose: an edit to
	// api/errors.yaml that changes a number must be made here too.
	want := []taxonomy.SizeRow{
		{BaselineMiB: 512, BaselineVCPU: 0.25, PeakMiB: 2048, PeakVCPU: 1},
		{BaselineMiB: 1024, BaselineVCPU: 0.5, PeakMiB: 4096, PeakVCPU: 2},
		{BaselineMiB: 2048, BaselineVCPU: 1, PeakMiB: 8192, PeakVCPU: 4},
		{BaselineMiB: 4096, BaselineVCPU: 2, PeakMiB: 16384, PeakVCPU: 8},
		{BaselineMiB: 8192, BaselineVCPU: 4, PeakMiB: 32768, PeakVCPU: 16},
	}
	if fmt.Sprint(taxonomy.SizeClasses) != fmt.Sprint(want) {
		t.Fatalf("size classes = %v, want %v", taxonomy.SizeClasses, want)
	}
}
