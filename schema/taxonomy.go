package schema

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"
)

// Taxonomy is api/errors.yaml, decoded.
type Taxonomy struct {
	Findings []struct {
		ID    string `yaml:"id" json:"id"`
		Title string `yaml:"title" json:"title"`
	} `yaml:"findings" json:"findings"`
	ErrorKinds []struct {
		Name    string `yaml:"name" json:"name"`
		Code    string `yaml:"code" json:"code"`
		Exit    int    `yaml:"exit" json:"exit"`
		Meaning string `yaml:"meaning" json:"meaning"`
		Finding string `yaml:"finding" json:"finding"`
	} `yaml:"error_kinds" json:"error_kinds"`
	Fallback5xx string `yaml:"fallback_5xx" json:"fallback_5xx"`
	WireKinds   []struct {
		Name      string `yaml:"name" json:"name"`
		Status    int    `yaml:"status" json:"status,omitempty"`
		ErrorKind string `yaml:"error_kind" json:"error_kind"`
		Meaning   string `yaml:"meaning" json:"meaning"`
	} `yaml:"wire_kinds" json:"wire_kinds"`
	ExitCodes []struct {
		Value   int    `yaml:"value" json:"value"`
		Code    string `yaml:"code" json:"code"`
		Meaning string `yaml:"meaning" json:"meaning"`
		// Reference is how this row compares with the reference CLI's row of
		// the same integer: "agrees", or the difference and its reason.
		Reference string `yaml:"reference" json:"reference"`
	} `yaml:"exit_codes" json:"exit_codes"`
	DaemonErrors []struct {
		Slug     string `yaml:"slug" json:"slug"`
		Status   int    `yaml:"-" json:"status"` // from api/openapi.yaml's x-errors
		WireKind string `yaml:"wire_kind" json:"wire_kind"`
		Meaning  string `yaml:"meaning" json:"meaning"`
		Why      string `yaml:"why" json:"why,omitempty"`
	} `yaml:"daemon_errors" json:"daemon_errors"`
	Constants []struct {
		Name string `yaml:"name" json:"name"`
		// Key is the constant's key in `microvm constants`, spelled as the
		// reference CLI spells it so a drift checker written for either reads both.
		Key     string    `yaml:"key" json:"key"`
		Type    string    `yaml:"type" json:"type"`
		Value   yaml.Node `yaml:"value" json:"-"`
		From    string    `yaml:"from" json:"-"`
		Doc     string    `yaml:"doc" json:"doc"`
		Finding string    `yaml:"finding" json:"finding,omitempty"`
	} `yaml:"constants" json:"-"`
	Regions struct {
		Finding string   `yaml:"finding" json:"finding"`
		Values  []string `yaml:"values" json:"values"`
	} `yaml:"regions" json:"regions"`
	SizeClasses struct {
		Finding            string `yaml:"finding" json:"finding"`
		DefaultBaselineMiB int    `yaml:"default_baseline_mib" json:"default_baseline_mib"`
		Rows               []struct {
			BaselineMiB  int     `yaml:"baseline_mib" json:"baseline_mib"`
			BaselineVCPU float64 `yaml:"baseline_vcpu" json:"baseline_vcpu"`
			PeakMiB      int     `yaml:"peak_mib" json:"peak_mib"`
			PeakVCPU     float64 `yaml:"peak_vcpu" json:"peak_vcpu"`
		} `yaml:"rows" json:"rows"`
	} `yaml:"size_classes" json:"size_classes"`
	MicrovmStates struct {
		Finding  string   `yaml:"finding" json:"finding"`
		EnumFrom string   `yaml:"enum_from" json:"-"`
		Values   []string `yaml:"-" json:"values"`
		Terminal []string `yaml:"terminal" json:"terminal"`
		Dead     []string `yaml:"dead" json:"dead"`
	} `yaml:"microvm_states" json:"microvm_states"`
	ImageStates struct {
		EnumFrom string   `yaml:"enum_from" json:"-"`
		Values   []string `yaml:"-" json:"values"`
		Ready    []string `yaml:"ready" json:"ready"`
		Failed   []string `yaml:"failed" json:"failed"`
	} `yaml:"image_states" json:"image_states"`
	BuildStates struct {
		Finding  string   `yaml:"finding" json:"finding"`
		EnumFrom string   `yaml:"enum_from" json:"-"`
		Values   []string `yaml:"-" json:"values"`
	} `yaml:"build_states" json:"build_states"`
}

// LoadTaxonomy reads and checks api/errors.yaml under root.
func LoadTaxonomy(root string) (*Taxonomy, error) {
	var t Taxonomy
	if err := decodeStrict(root, "errors.yaml", &t); err != nil {
		return nil, err
	}
	_, openapi, err := loadOpenAPI(root)
	if err != nil {
		return nil, err
	}
	controlPlane, err := loadControlPlaneEnums(root)
	if err != nil {
		return nil, err
	}
	if err := t.resolve(openapi, controlPlane); err != nil {
		return nil, fmt.Errorf("api/errors.yaml: %w", err)
	}
	if err := t.check(); err != nil {
		return nil, fmt.Errorf("api/errors.yaml: %w", err)
	}
	return &t, nil
}

// check refuses references that point nowhere; the invariants a reviewer
// cares about (counts, injectivity) are asserted by tests over generated code.
func (t *Taxonomy) check() error {
	findings := map[string]bool{"": true}
	for _, f := range t.Findings {
		if findings[f.ID] {
			return fmt.Errorf("finding %q declared twice", f.ID)
		}
		findings[f.ID] = true
	}
	need := func(where, id string) error {
		if !findings[id] {
			return fmt.Errorf("%s names unknown finding %q", where, id)
		}
		return nil
	}
	kinds := map[string]bool{}
	for _, k := range t.ErrorKinds {
		kinds[k.Name] = true
		if err := need("error kind "+k.Name, k.Finding); err != nil {
			return err
		}
	}
	wires := map[string]int{}
	for _, w := range t.WireKinds {
		if !kinds[w.ErrorKind] {
			return fmt.Errorf("wire kind %s maps to unknown error kind %q", w.Name, w.ErrorKind)
		}
		wires[w.Name] = w.Status
	}
	for _, d := range t.DaemonErrors {
		status, ok := wires[d.WireKind]
		if !ok {
			return fmt.Errorf("daemon error %s names unknown wire kind %q", d.Slug, d.WireKind)
		}
		// A slug classified away from its status is a deliberate exception and
		// must say why; otherwise the two would silently disagree.
		if status != d.Status && d.Why == "" {
			return fmt.Errorf("daemon error %s is sent with %d but classified as %s (%d) without a why", d.Slug, d.Status, d.WireKind, status)
		}
	}
	for _, r := range t.ExitCodes {
		if strings.TrimSpace(r.Reference) == "" {
			return fmt.Errorf("exit row %d: say how it compares with the reference CLI's row (reference: agrees, or the difference and why)", r.Value)
		}
	}
	keys := map[string]bool{}
	for _, c := range t.Constants {
		if err := need("constant "+c.Name, c.Finding); err != nil {
			return err
		}
		if c.Key == "" || strings.Trim(c.Key, "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != "" || keys[c.Key] {
			return fmt.Errorf("constant %s: key %q is missing, not SCREAMING_SNAKE, or taken", c.Name, c.Key)
		}
		keys[c.Key] = true
		switch c.Type {
		case "string", "int":
		default:
			return fmt.Errorf("constant %s: unknown type %q", c.Name, c.Type)
		}
	}
	if err := t.checkExitTable(); err != nil {
		return err
	}
	for _, f := range []string{t.Regions.Finding, t.SizeClasses.Finding, t.MicrovmStates.Finding, t.BuildStates.Finding} {
		if err := need("a table", f); err != nil {
			return err
		}
	}
	return nil
}

func generateTaxonomy(root string) ([]Output, error) {
	t, err := LoadTaxonomy(root)
	if err != nil {
		return nil, err
	}
	formatted, err := renderGo("taxonomy", "taxonomy.go.tmpl", t)
	if err != nil {
		return nil, err
	}
	return []Output{{Path: "gen/taxonomy/taxonomy.gen.go", Data: formatted}}, nil
}

func init() { register(generateTaxonomy) }
