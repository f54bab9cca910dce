package schema

import (
	"bytes"
	"fmt"
	"go/format"
	"strconv"
	"strings"
	"text/template"

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

// initialisms are the words Go writes in one case (as golint and
// oapi-codegen do, plus CLI, OK and USD), when a slug or a JSON key names
// them as a whole word.
var initialisms = map[string]bool{
	"API": true, "ARN": true, "CLI": true, "CPU": true, "EOF": true, "HTTP": true, "ID": true, "IP": true,
	"JSON": true, "OK": true, "PID": true, "PTY": true, "SSE": true, "TLS": true, "TTL": true,
	"UID": true, "GID": true, "URI": true, "URL": true, "USD": true, "UTF8": true, "VM": true,
}

var taxonomyTemplate = template.Must(template.New("taxonomy").Funcs(template.FuncMap{
	"ident": goIdent,
	"quote": strconv.Quote,
	"float": func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) },
	"constval": func(typ string, n yaml.Node) string {
		v, err := constValue(typ, n)
		if err != nil {
			panic(err)
		}
		return v
	},
}).Parse(`// Package taxonomy is api/errors.yaml as Go: the error and wire kinds, the
// CLI exit table, the daemon's error slugs, the platform findings refusals
// name, and the service constants. Generated; edit api/errors.yaml instead.
//
// It must never hold logic beyond table lookups: behaviour lives in client/,
// agentd/ and cmd/microvm, which branch on these values.

// FindingID names a heading of docs/PLATFORM.md.
type FindingID string

// The findings of docs/PLATFORM.md.
const (
{{- range .Findings}}
	Finding{{ident .ID}} FindingID = {{quote .ID}}
{{- end}}
)

// Finding is one measured platform behaviour.
type Finding struct {
	ID    FindingID
	Title string // the docs/PLATFORM.md heading
}

// Findings lists every finding in declaration order.
var Findings = []Finding{
{{- range .Findings}}
	{ID: Finding{{ident .ID}}, Title: {{quote .Title}}},
{{- end}}
}

// Title is the docs/PLATFORM.md heading of f, or "" for an unknown id.
func (f FindingID) Title() string {
	for _, x := range Findings {
		if x.ID == f {
			return x.Title
		}
	}
	return ""
}

// ErrorKind is the class of a failure; it alone decides the CLI exit code.
type ErrorKind int

// The error kinds.
const (
{{- range $i, $k := .ErrorKinds}}
	Kind{{$k.Name}}{{if eq $i 0}} ErrorKind = iota + 1{{end}}
{{- end}}
)

// ErrorKinds lists every error kind in declaration order.
var ErrorKinds = []ErrorKind{ {{- range .ErrorKinds}}Kind{{.Name}}, {{end -}} }

type errorKindRow struct {
	name, code, meaning string
	exit                ExitCode
	finding             FindingID
}

var errorKindRows = map[ErrorKind]errorKindRow{
{{- range .ErrorKinds}}
	Kind{{.Name}}: {name: {{quote .Name}}, code: {{quote .Code}}, exit: {{.Exit}}, meaning: {{quote .Meaning}}, finding: {{quote .Finding}}},
{{- end}}
}

// String is the kind's name, e.g. "InvalidArg".
func (k ErrorKind) String() string { return errorKindRows[k].name }

// Code is the kind's stable ERR_* string.
func (k ErrorKind) Code() string { return errorKindRows[k].code }

// Exit is the CLI exit code for the kind.
func (k ErrorKind) Exit() ExitCode { return errorKindRows[k].exit }

// Meaning is a one-line description of the kind.
func (k ErrorKind) Meaning() string { return errorKindRows[k].meaning }

// Finding is the platform finding the kind names, or "".
func (k ErrorKind) Finding() FindingID { return errorKindRows[k].finding }

// Retryable reports whether the identical call may succeed later.
func (k ErrorKind) Retryable() bool { return k == KindRetryable }

// ErrorKindFromCode resolves an ERR_* string.
func ErrorKindFromCode(code string) (ErrorKind, bool) {
	for k, row := range errorKindRows {
		if row.code == code {
			return k, true
		}
	}
	return 0, false
}

// WireKind classifies a session-plane failure; its error kind is derived,
// never chosen beside it.
type WireKind int

// The wire kinds.
const (
{{- range $i, $w := .WireKinds}}
	Wire{{$w.Name}}{{if eq $i 0}} WireKind = iota + 1{{end}}
{{- end}}
)

// WireKinds lists every wire kind in declaration order.
var WireKinds = []WireKind{ {{- range .WireKinds}}Wire{{.Name}}, {{end -}} }

type wireKindRow struct {
	name, meaning string
	status        int
	kind          ErrorKind
}

var wireKindRows = map[WireKind]wireKindRow{
{{- range .WireKinds}}
	Wire{{.Name}}: {name: {{quote .Name}}, status: {{.Status}}, kind: Kind{{.ErrorKind}}, meaning: {{quote .Meaning}}},
{{- end}}
}

// String is the wire kind's name, e.g. "Conflict".
func (w WireKind) String() string { return wireKindRows[w].name }

// Meaning is a one-line description of the wire kind.
func (w WireKind) Meaning() string { return wireKindRows[w].meaning }

// ErrorKind is the error kind w maps to.
func (w WireKind) ErrorKind() ErrorKind { return wireKindRows[w].kind }

// Status is the HTTP status w is read from, if it has one.
func (w WireKind) Status() (int, bool) {
	s := wireKindRows[w].status
	return s, s != 0
}

// WireKindFromStatus classifies an HTTP status. Unlisted 4xx statuses have no
// wire kind (there is deliberately no generic 4xx); unlisted 5xx fall back to
// Wire{{.Fallback5xx}}.
func WireKindFromStatus(status int) (WireKind, bool) {
	switch status {
{{- range .WireKinds}}{{if .Status}}
	case {{.Status}}:
		return Wire{{.Name}}, true
{{- end}}{{end}}
	}
	if status >= 500 && status <= 599 {
		return Wire{{.Fallback5xx}}, true
	}
	return 0, false
}

// WireKindFromName resolves a wire kind's name.
func WireKindFromName(name string) (WireKind, bool) {
	for w, row := range wireKindRows {
		if row.name == name {
			return w, true
		}
	}
	return 0, false
}

// ExitCode is a process exit status of the microvm CLI.
type ExitCode int

// ExitRow is one row of the append-only exit table.
type ExitRow struct {
	Value   ExitCode
	Code    string // ERR_* or "" for success
	Meaning string
}

// ExitSuccess is the exit code of a successful invocation.
const ExitSuccess ExitCode = 0

// ExitTable is the CLI's exit table, in value order.
var ExitTable = []ExitRow{
{{- range .ExitCodes}}
	{Value: {{.Value}}, Code: {{quote .Code}}, Meaning: {{quote .Meaning}}},
{{- end}}
}

// DaemonError is one of agentd's machine-readable error slugs.
type DaemonError struct {
	Slug     string
	Status   int
	WireKind WireKind // how a client classifies an answer carrying this slug
	Meaning  string
}

// agentd's error slugs, the "error" key of its ErrorBody.
const (
{{- range .DaemonErrors}}
	Slug{{ident .Slug}} = {{quote .Slug}}
{{- end}}
)

// DaemonErrors lists every slug with the status it is sent with.
var DaemonErrors = []DaemonError{
{{- range .DaemonErrors}}
	{Slug: Slug{{ident .Slug}}, Status: {{.Status}}, WireKind: Wire{{.WireKind}}, Meaning: {{quote .Meaning}}},
{{- end}}
}

// SlugStatus is the HTTP status the daemon sends slug with (each slug has
// exactly one, declared in api/openapi.yaml), and false for an unknown slug.
func SlugStatus(slug string) (int, bool) {
	for _, d := range DaemonErrors {
		if d.Slug == slug {
			return d.Status, true
		}
	}
	return 0, false
}

// WireKindFromSlug classifies an answer by its error slug. A client consults
// it before the status, because a slug can carry a sharper meaning than its
// status (spawn_failed is a 500 that retrying cannot fix).
func WireKindFromSlug(slug string) (WireKind, bool) {
	for _, d := range DaemonErrors {
		if d.Slug == slug {
			return d.WireKind, true
		}
	}
	return 0, false
}

// Service constants.
const (
{{- range .Constants}}
	// {{.Name}}: {{.Doc}}.{{if .Finding}} Finding: {{.Finding}}.{{end}}
	{{.Name}} = {{constval .Type .Value}}
{{- end}}
)

// ConstantFindings maps each service constant to the finding that measured it.
var ConstantFindings = map[string]FindingID{
{{- range .Constants}}{{if .Finding}}
	{{quote .Name}}: Finding{{ident .Finding}},
{{- end}}{{end}}
}

// Regions are the regions where the service is known to answer, in table order.
var Regions = []string{ {{- range .Regions.Values}}{{quote .}}, {{end -}} }

// RegionFinding explains why any other region is refused locally.
const RegionFinding = Finding{{ident .Regions.Finding}}

// SizeRow is one documented size class. Every number is read from the table.
type SizeRow struct {
	BaselineMiB  int
	BaselineVCPU float64
	PeakMiB      int
	PeakVCPU     float64
}

// SizeClasses are the documented size classes, smallest first.
var SizeClasses = []SizeRow{
{{- range .SizeClasses.Rows}}
	{BaselineMiB: {{.BaselineMiB}}, BaselineVCPU: {{float .BaselineVCPU}}, PeakMiB: {{.PeakMiB}}, PeakVCPU: {{float .PeakVCPU}}},
{{- end}}
}

// DefaultBaselineMiB is the size class used when none is chosen.
const DefaultBaselineMiB = {{.SizeClasses.DefaultBaselineMiB}}

// SizeClassFinding explains why an off-table size is refused rather than snapped.
const SizeClassFinding = Finding{{ident .SizeClasses.Finding}}

// MicroVM states: every value, those a launch waiter treats as failure before
// RUNNING, and those with no way back.
var (
	MicrovmStates         = []string{ {{- range .MicrovmStates.Values}}{{quote .}}, {{end -}} }
	MicrovmTerminalStates = []string{ {{- range .MicrovmStates.Terminal}}{{quote .}}, {{end -}} }
	MicrovmDeadStates     = []string{ {{- range .MicrovmStates.Dead}}{{quote .}}, {{end -}} }
)

// MicrovmStateFinding is the finding behind the terminal-before-RUNNING rule.
const MicrovmStateFinding = Finding{{ident .MicrovmStates.Finding}}

// Image states: every value, those that mean built, and those that mean failed.
var (
	ImageStates       = []string{ {{- range .ImageStates.Values}}{{quote .}}, {{end -}} }
	ImageReadyStates  = []string{ {{- range .ImageStates.Ready}}{{quote .}}, {{end -}} }
	ImageFailedStates = []string{ {{- range .ImageStates.Failed}}{{quote .}}, {{end -}} }
)

// BuildStates are the states of one image build.
var BuildStates = []string{ {{- range .BuildStates.Values}}{{quote .}}, {{end -}} }

// BuildStateFinding is where a failed build's reason is found.
const BuildStateFinding = Finding{{ident .BuildStates.Finding}}
`))

func generateTaxonomy(root string) ([]Output, error) {
	t, err := LoadTaxonomy(root)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := taxonomyTemplate.Execute(&buf, t); err != nil {
		return nil, fmt.Errorf("taxonomy template: %w", err)
	}
	src := goFile("taxonomy", buf.String())
	formatted, err := format.Source(src)
	if err != nil {
		return nil, fmt.Errorf("taxonomy: gofmt: %w\n%s", err, src)
	}
	return []Output{{Path: "gen/taxonomy/taxonomy.gen.go", Data: formatted}}, nil
}

func init() { register(generateTaxonomy) }
