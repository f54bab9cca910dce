package schema

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"gopkg.in/yaml.v3"
)

// One fact, one file. api/openapi.yaml owns every fact of the agentd wire
// (its top-level x-* scalars and its x-limits); api/lambda-microvms.yaml owns
// the control plane's enums. api/errors.yaml may publish such a fact as a
// client-side constant or state set only by referring to it (`from:`,
// `enum_from:`); a second literal declaration is refused here, at `make gen`,
// because two declarations can drift apart while every generated package
// still compiles.

// resolve fills the facts errors.yaml refers to from the documents that own
// them, then refuses any fact errors.yaml declares again by value.
func (t *Taxonomy) resolve(openapi map[string]any, controlPlane map[string][]string) error {
	if err := t.resolveSlugStatuses(openapi); err != nil {
		return err
	}
	owned := ownedWireFacts(openapi)
	for i := range t.Constants {
		c := &t.Constants[i]
		literal := c.Value.Kind != 0
		switch {
		case c.From != "" && literal:
			return fmt.Errorf("constant %s has both value and from; the fact lives in %s", c.Name, c.From)
		case c.From != "":
			v, err := lookupFact(openapi, c.From)
			if err != nil {
				return fmt.Errorf("constant %s: %w", c.Name, err)
			}
			tag := "!!str"
			if c.Type == "int" {
				tag = "!!int"
			}
			c.Value = yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v}
		case !literal:
			return fmt.Errorf("constant %s has neither value nor from", c.Name)
		default:
			if f, dup := owned.duplicate(c.Name, c.Type, c.Value.Value); dup {
				return fmt.Errorf("constant %s repeats %s of api/openapi.yaml; write `from: openapi.yaml#%s` instead of a value", c.Name, f, f)
			}
		}
	}
	sets := []struct {
		name     string
		enumFrom string
		values   *[]string
		subsets  [][]string
	}{
		{"microvm_states", t.MicrovmStates.EnumFrom, &t.MicrovmStates.Values, [][]string{t.MicrovmStates.Terminal, t.MicrovmStates.Dead}},
		{"image_states", t.ImageStates.EnumFrom, &t.ImageStates.Values, [][]string{t.ImageStates.Ready, t.ImageStates.Failed}},
		{"build_states", t.BuildStates.EnumFrom, &t.BuildStates.Values, nil},
	}
	for _, s := range sets {
		values, ok := controlPlane[s.enumFrom]
		if !ok {
			return fmt.Errorf("%s: enum_from names %q, which api/lambda-microvms.yaml does not declare as an enum", s.name, s.enumFrom)
		}
		*s.values = values
		for _, sub := range s.subsets {
			for _, v := range sub {
				if !slices.Contains(values, v) {
					return fmt.Errorf("%s: %q is not a value of the control plane's %s", s.name, v, s.enumFrom)
				}
			}
		}
	}
	return nil
}

// wireFact is one fact api/openapi.yaml owns.
type wireFact struct {
	pointer string // e.g. /x-version-header, /x-limits/port/value
	typ     string // "string" for the x-* scalars, "int" for x-limits
	value   string
	tokens  []string // name words, for matching a constant's name to a fact
}

type wireFacts []wireFact

func ownedWireFacts(openapi map[string]any) wireFacts {
	var out wireFacts
	for k, v := range openapi {
		if !strings.HasPrefix(k, "x-") {
			continue
		}
		if s, ok := v.(string); ok {
			out = append(out, wireFact{pointer: "/" + k, typ: "string", value: s, tokens: nameTokens(strings.TrimPrefix(k, "x-"))})
		}
	}
	for k, v := range asMap(openapi["x-limits"]) {
		val, ok := asMap(v)["value"]
		if !ok {
			continue
		}
		out = append(out, wireFact{pointer: "/x-limits/" + k + "/value", typ: "int", value: fmt.Sprint(val), tokens: nameTokens(k)})
	}
	slices.SortFunc(out, func(a, b wireFact) int { return strings.Compare(a.pointer, b.pointer) })
	return out
}

// duplicate reports the wire fact of the same type a literal constant
// repeats: one whose name
// holds every word of the fact's name (VersionHeader ⊇ version header,
// DefaultAgentPort ⊇ port, SSEIdleTimeoutSec ⊇ sse idle timeout sec), whatever
// its value, since a changed copy is the worst kind; or, for a string, one
// whose value is an owned string (a header or path prefix is never equal by
// chance, where numbers are: 60 is both a hook ceiling and the SSE timeout).
func (fs wireFacts) duplicate(name, typ, value string) (string, bool) {
	constTokens := nameTokens(name)
	for _, f := range fs {
		if f.typ != typ {
			continue
		}
		// A Min/Max constant bounds a fact rather than restating it: MaxPort
		// (65535, the model's) is not the daemon's port.
		if bounds(name) != bounds(strings.TrimPrefix(f.pointer, "/x-limits/")) {
			continue
		}
		if containsAll(constTokens, f.tokens) || (typ == "string" && f.value == value) {
			return f.pointer, true
		}
	}
	return "", false
}

// rawWords splits snake_case or CamelCase into lower-case words.
func rawWords(s string) []string {
	var words []string
	var cur []rune
	flush := func() {
		if len(cur) > 0 {
			words = append(words, strings.ToLower(string(cur)))
			cur = cur[:0]
		}
	}
	rs := []rune(s)
	for i, r := range rs {
		switch {
		case r == '_' || r == '-':
			flush()
			continue
		case unicode.IsUpper(r) && i > 0 && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]) && unicode.IsUpper(rs[i-1]))):
			flush()
		}
		cur = append(cur, r)
	}
	flush()
	return words
}

// nameTokens splits snake_case or CamelCase into lower-case words, dropping
// the qualifiers that do not change what a number is (max, min, default) and
// folding plurals of units.
func nameTokens(s string) []string {
	words := rawWords(s)
	var out []string
	for _, w := range words {
		switch w {
		case "max", "min", "default":
			continue
		case "secs":
			w = "sec"
		case "bytes":
			w = "byte"
		}
		out = append(out, w)
	}
	return out
}

func containsAll(have, want []string) bool {
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return len(want) > 0
}

// lookupFact resolves "openapi.yaml#/json/pointer" to a scalar.
func lookupFact(openapi map[string]any, ref string) (string, error) {
	doc, pointer, ok := strings.Cut(ref, "#")
	if !ok || doc != "openapi.yaml" || !strings.HasPrefix(pointer, "/") {
		return "", fmt.Errorf("from %q: want openapi.yaml#/pointer", ref)
	}
	var cur any = openapi
	for _, part := range strings.Split(pointer[1:], "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return "", fmt.Errorf("from %q: %q is not inside a mapping", ref, part)
		}
		if cur, ok = m[part]; !ok {
			return "", fmt.Errorf("from %q: api/openapi.yaml has no %q", ref, part)
		}
	}
	switch v := cur.(type) {
	case string:
		return v, nil
	case int:
		return strconv.Itoa(v), nil
	default:
		return "", fmt.Errorf("from %q: not a string or integer", ref)
	}
}

// loadControlPlaneEnums reads every string enum of api/lambda-microvms.yaml.
func loadControlPlaneEnums(root string) (map[string][]string, error) {
	raw, err := os.ReadFile(filepath.Join(root, "api", "lambda-microvms.yaml"))
	if err != nil {
		return nil, err
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Enum []string `yaml:"enum"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("api/lambda-microvms.yaml: %w", err)
	}
	out := map[string][]string{}
	for name, s := range doc.Components.Schemas {
		if len(s.Enum) > 0 {
			out[name] = s.Enum
		}
	}
	return out, nil
}

// checkExitTable refuses an exit table that could send two failures to one
// row: a value or a code twice, a row whose code is not the kind that exits
// with it, or a kind without its row.
func (t *Taxonomy) checkExitTable() error {
	values := map[int]bool{}
	codes := map[string]int{}
	for _, r := range t.ExitCodes {
		if values[r.Value] {
			return fmt.Errorf("exit table: value %d declared twice", r.Value)
		}
		values[r.Value] = true
		if prev, dup := codes[r.Code]; dup {
			return fmt.Errorf("exit table: code %q on rows %d and %d", r.Code, prev, r.Value)
		}
		codes[r.Code] = r.Value
	}
	if v, ok := codes[""]; !ok || v != 0 {
		return fmt.Errorf("exit table: row 0 must be the success row with no code")
	}
	for _, k := range t.ErrorKinds {
		v, ok := codes[k.Code]
		if !ok {
			return fmt.Errorf("exit table: error kind %s (%s) has no row", k.Name, k.Code)
		}
		if v != k.Exit {
			return fmt.Errorf("exit table: row %d says %s, but error kind %s exits %d", v, k.Code, k.Name, k.Exit)
		}
	}
	if len(codes) != len(t.ErrorKinds)+1 {
		return fmt.Errorf("exit table: %d rows for %d error kinds; every row but 0 belongs to exactly one kind", len(codes), len(t.ErrorKinds))
	}
	return nil
}

// resolveSlugStatuses takes each daemon slug's status from the responses of
// api/openapi.yaml that list it under x-errors. A slug sent with two
// statuses, a slug the daemon never sends, and a sent slug the taxonomy does
// not classify are all refused.
func (t *Taxonomy) resolveSlugStatuses(openapi map[string]any) error {
	sent := map[string]int{}
	components := asMap(asMap(openapi["components"])["responses"])
	paths := asMap(openapi["paths"])
	pathNames := make([]string, 0, len(paths))
	for p := range paths {
		pathNames = append(pathNames, p)
	}
	slices.Sort(pathNames)
	for _, p := range pathNames {
		for method, op := range asMap(paths[p]) {
			for code, resp := range asMap(asMap(op)["responses"]) {
				r := asMap(resp)
				if ref := asString(r["$ref"]); ref != "" {
					r = asMap(components[ref[strings.LastIndex(ref, "/")+1:]])
				}
				errs, _ := r["x-errors"].([]any)
				for _, e := range errs {
					slug := asString(asMap(e)["slug"])
					status, err := strconv.Atoi(code)
					if err != nil {
						return fmt.Errorf("%s %s: x-errors under a response %q that is not a status", method, p, code)
					}
					if prev, ok := sent[slug]; ok && prev != status {
						return fmt.Errorf("slug %s is sent with %d and with %d (%s %s); a slug has exactly one status", slug, prev, status, method, p)
					}
					sent[slug] = status
				}
			}
		}
	}
	classified := map[string]bool{}
	for i := range t.DaemonErrors {
		d := &t.DaemonErrors[i]
		status, ok := sent[d.Slug]
		if !ok {
			return fmt.Errorf("daemon error %s is listed under no response's x-errors in api/openapi.yaml", d.Slug)
		}
		d.Status = status
		classified[d.Slug] = true
	}
	for slug := range sent {
		if !classified[slug] {
			return fmt.Errorf("api/openapi.yaml sends slug %s, which daemon_errors does not classify", slug)
		}
	}
	return nil
}

// bounds is which of min and max a name says it is, as words.
func bounds(name string) string {
	var b []string
	for _, w := range rawWords(name) {
		if w == "min" || w == "max" {
			b = append(b, w)
		}
	}
	return strings.Join(b, ",")
}
