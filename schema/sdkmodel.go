package schema

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// This file reads api/lambda-microvms.yaml (and the documentation strings of
// the Smithy model beside it, api/lambda-microvms.json) into the shape model
// the SDK generator in sdk.go walks: operations with synthesized Input and
// Output structures, named types, enums, unions and exceptions, each member
// with its HTTP binding and its constraints, all in document order.

// onode is a YAML node with mapping keys kept in document order.
type onode struct {
	keys []string
	m    map[string]*onode
	list []*onode
	s    string
	kind yaml.Kind
}

func toONode(n *yaml.Node) *onode {
	if n.Kind == yaml.DocumentNode {
		return toONode(n.Content[0])
	}
	o := &onode{kind: n.Kind}
	switch n.Kind {
	case yaml.MappingNode:
		o.m = map[string]*onode{}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i].Value
			o.keys = append(o.keys, k)
			o.m[k] = toONode(n.Content[i+1])
		}
	case yaml.SequenceNode:
		for _, c := range n.Content {
			o.list = append(o.list, toONode(c))
		}
	case yaml.AliasNode:
		return toONode(n.Alias)
	default:
		o.s = n.Value
	}
	return o
}

// Keys are a mapping's keys in document order; none for a missing node.
func (o *onode) Keys() []string {
	if o == nil {
		return nil
	}
	return o.keys
}

// List is a sequence's items; none for a missing node.
func (o *onode) List() []*onode {
	if o == nil {
		return nil
	}
	return o.list
}

func (o *onode) get(path ...string) *onode {
	for _, p := range path {
		if o == nil || o.m == nil {
			return nil
		}
		o = o.m[p]
	}
	return o
}

func (o *onode) str(path ...string) string {
	if n := o.get(path...); n != nil {
		return n.s
	}
	return ""
}

func (o *onode) intp(path ...string) *int64 {
	n := o.get(path...)
	if n == nil || n.s == "" {
		return nil
	}
	v, err := strconv.ParseInt(n.s, 10, 64)
	if err != nil {
		return nil
	}
	return &v
}

func (o *onode) boolv(path ...string) bool { return o.str(path...) == "true" }

// sdkType is a member's type.
type sdkType struct {
	Kind string // string int32 int64 bool double timestamp enum struct union list map unit
	Name string // named shape for enum, struct, union
	Elem *sdkType
	// Constraints on this value (for list and map: on the collection).
	C constraints
	// Key constraints for a map.
	KeyC constraints
}

type constraints struct {
	MinLen, MaxLen     *int64
	Pattern            string
	Min, Max           *int64
	MinItems, MaxItems *int64
}

func (c constraints) any() bool {
	return c.MinLen != nil || c.MaxLen != nil || c.Pattern != "" || c.Min != nil || c.Max != nil || c.MinItems != nil || c.MaxItems != nil
}

type sdkMember struct {
	Wire      string // JSON key, path label, query key or header name
	GoName    string
	Loc       string // body uri query header
	Required  bool
	Sensitive bool
	T         *sdkType
	Doc       string
	Token     bool // an idempotency token
}

type sdkStruct struct {
	Name    string
	Members []*sdkMember
	Doc     string
	Union   bool
	Enum    []string
	Error   *sdkError
}

type sdkError struct {
	Fault  string
	Status int
}

type sdkPaginator struct{ InputToken, OutputToken, PageSize, Items string }

type sdkAcceptor struct {
	State    string // success failure retry
	Expected string // a value of the output's Path member
	Error    string // or an exception name
}

type sdkWaiter struct {
	Name               string
	Doc                string
	Path, ReasonPath   string
	MinDelay, MaxDelay int64
	Acceptors          []sdkAcceptor
}

type sdkOp struct {
	Name, Method, Path string
	Status             int
	Doc                string
	Input, Output      *sdkStruct
	HasBody            bool
	Errors             []string
	Paginator          *sdkPaginator
	Waiters            []sdkWaiter
	Token              *sdkMember
	Finding, Note      []string
}

type sdkModel struct {
	Service, SDKID, Version, SigningName, EndpointPrefix, Title, Doc string
	// EndpointEnv is the service-specific endpoint variable aws-sdk-go-v2
	// derives from the sdkId.
	EndpointEnv string
	Ops         []*sdkOp
	Types       []*sdkStruct // structures and unions of types/
	Enums       []*sdkStruct
	Errors      []*sdkStruct
	byName      map[string]*sdkStruct
}

// smithyDocs reads documentation strings from api/lambda-microvms.json.
type smithyDocs struct {
	ns     string
	shapes map[string]struct {
		Type    string                   `json:"type"`
		Input   *struct{ Target string } `json:"input"`
		Output  *struct{ Target string } `json:"output"`
		Members map[string]struct {
			Target string         `json:"target"`
			Traits map[string]any `json:"traits"`
		} `json:"members"`
		Traits map[string]any `json:"traits"`
	}
}

func (d *smithyDocs) shapeDoc(name string) string {
	s, ok := d.shapes[d.ns+name]
	if !ok {
		return ""
	}
	return htmlText(asString(s.Traits["smithy.api#documentation"]))
}

func (d *smithyDocs) memberDoc(shape, member string) string {
	s, ok := d.shapes[d.ns+shape]
	if !ok {
		return ""
	}
	m, ok := s.Members[member]
	if !ok {
		return ""
	}
	if doc := asString(m.Traits["smithy.api#documentation"]); doc != "" {
		return htmlText(doc)
	}
	return d.shapeDoc(strings.TrimPrefix(m.Target, d.ns))
}

// opIO names an operation's Smithy input and output shapes.
func (d *smithyDocs) opIO(op string) (string, string) {
	s, ok := d.shapes[d.ns+op]
	if !ok {
		return "", ""
	}
	var in, out string
	if s.Input != nil {
		in = strings.TrimPrefix(s.Input.Target, d.ns)
	}
	if s.Output != nil {
		out = strings.TrimPrefix(s.Output.Target, d.ns)
	}
	return in, out
}

var (
	htmlTag   = regexp.MustCompile(`<[^>]+>`)
	htmlSpace = regexp.MustCompile(`[ \t\r\n]+`)
	htmlPara  = regexp.MustCompile(`(?i)</p>\s*<p>|</li>\s*<li>|<li>`)
)

// htmlText turns a Smithy documentation string (HTML) into plain prose.
func htmlText(s string) string {
	s = htmlPara.ReplaceAllString(s, "\n\n")
	s = htmlTag.ReplaceAllString(s, "")
	r := strings.NewReplacer("&lt;", "<", "&gt;", ">", "&quot;", `"`, "&#39;", "'", "&amp;", "&")
	s = r.Replace(s)
	var paras []string
	for _, p := range strings.Split(s, "\n\n") {
		p = strings.TrimSpace(htmlSpace.ReplaceAllString(p, " "))
		if p != "" {
			paras = append(paras, p)
		}
	}
	return strings.Join(paras, "\n\n")
}

func loadSDKModel(root string) (*sdkModel, error) {
	raw, err := os.ReadFile(filepath.Join(root, "api", "lambda-microvms.yaml"))
	if err != nil {
		return nil, err
	}
	var node yaml.Node
	if err := yaml.Unmarshal(raw, &node); err != nil {
		return nil, fmt.Errorf("api/lambda-microvms.yaml: %w", err)
	}
	doc := toONode(&node)
	var docs smithyDocs
	sraw, err := os.ReadFile(filepath.Join(root, "api", "lambda-microvms.json"))
	if err != nil {
		return nil, err
	}
	var smithy struct {
		Shapes json.RawMessage `json:"shapes"`
	}
	if err := json.Unmarshal(sraw, &smithy); err != nil {
		return nil, fmt.Errorf("api/lambda-microvms.json: %w", err)
	}
	if err := json.Unmarshal(smithy.Shapes, &docs.shapes); err != nil {
		return nil, fmt.Errorf("api/lambda-microvms.json: %w", err)
	}
	xs := doc.get("x-smithy")
	svc := xs.str("service")
	docs.ns = svc[:strings.IndexByte(svc, '#')+1]
	m := &sdkModel{
		Service:        svc,
		SDKID:          xs.str("sdkId"),
		Version:        doc.str("info", "version"),
		SigningName:    xs.str("signingName"),
		EndpointPrefix: xs.str("endpointPrefix"),
		Title:          asString(docs.shapes[svc].Traits["smithy.api#title"]),
		Doc:            docs.shapeDoc(strings.TrimPrefix(svc, docs.ns)),
		byName:         map[string]*sdkStruct{},
	}
	m.EndpointEnv = "AWS_ENDPOINT_URL_" + strings.ReplaceAll(strings.ToUpper(m.SDKID), " ", "_")
	if m.SDKID == "" {
		return nil, fmt.Errorf("api/lambda-microvms.yaml: x-smithy.sdkId is required")
	}
	schemas := doc.get("components", "schemas")
	ioShapes := map[string]bool{}
	for _, path := range doc.get("paths").Keys() {
		item := doc.get("paths", path)
		for _, method := range item.Keys() {
			op := item.m[method]
			if ref := op.str("requestBody", "content", "application/json", "schema", "$ref"); ref != "" {
				ioShapes[refName(ref)] = true
			}
			for _, code := range op.get("responses").Keys() {
				if ref := op.str("responses", code, "content", "application/json", "schema", "$ref"); ref != "" && strings.HasPrefix(code, "2") {
					ioShapes[refName(ref)] = true
				}
			}
		}
	}
	// Named shapes first, so operations can refer to them.
	for _, name := range schemas.Keys() {
		s := schemas.m[name]
		st := &sdkStruct{Name: name, Doc: docs.shapeDoc(name)}
		switch {
		case s.get("enum") != nil:
			for _, v := range s.get("enum").List() {
				st.Enum = append(st.Enum, v.s)
			}
			m.Enums = append(m.Enums, st)
		case s.get("x-error") != nil:
			st.Error = &sdkError{Fault: s.str("x-error", "fault"), Status: int(*s.intp("x-error", "httpStatus"))}
			st.Members, err = members(s, name, &docs, "body")
			if err != nil {
				return nil, err
			}
			m.Errors = append(m.Errors, st)
		case ioShapes[name]:
			continue
		default:
			st.Union = s.boolv("x-smithy-union")
			st.Members, err = members(s, name, &docs, "body")
			if err != nil {
				return nil, err
			}
			m.Types = append(m.Types, st)
		}
		m.byName[name] = st
	}
	// Exceptions bound to headers (Retry-After) get those members too.
	responses := doc.get("components", "responses")
	for _, e := range m.Errors {
		r := responses.get(e.Name)
		if r == nil {
			continue
		}
		for _, h := range r.get("headers").Keys() {
			hn := r.get("headers", h)
			mem := hn.str("x-member")
			if mem == "" {
				continue
			}
			t, err := typeOf(hn.get("schema"))
			if err != nil {
				return nil, err
			}
			e.Members = append(e.Members, &sdkMember{Wire: h, GoName: goExported(mem), Loc: "header", T: t, Doc: docs.memberDoc(e.Name, mem)})
		}
	}
	for _, path := range doc.get("paths").Keys() {
		item := doc.get("paths", path)
		for _, method := range item.Keys() {
			o := item.m[method]
			name := o.str("operationId")
			inShape, outShape := docs.opIO(name)
			op := &sdkOp{Name: name, Method: strings.ToUpper(method), Path: path, Doc: docs.shapeDoc(name)}
			op.Input = &sdkStruct{Name: name + "Input"}
			op.Output = &sdkStruct{Name: name + "Output"}
			for _, p := range o.get("parameters").List() {
				t, err := typeOf(p.get("schema"))
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				wire := p.str("name")
				gname := goExported(wire)
				if xm := p.str("x-member"); xm != "" {
					gname = goExported(xm)
				}
				loc := p.str("in")
				if loc == "path" {
					loc = "uri"
				}
				smithyMember := wire
				if xm := p.str("x-member"); xm != "" {
					smithyMember = xm
				}
				op.Input.Members = append(op.Input.Members, &sdkMember{Wire: wire, GoName: gname, Loc: loc, Required: p.boolv("required"), T: t, Doc: docs.memberDoc(inShape, smithyMember)})
			}
			if ref := o.str("requestBody", "content", "application/json", "schema", "$ref"); ref != "" {
				op.HasBody = true
				body, err := members(schemas.get(refName(ref)), inShape, &docs, "body")
				if err != nil {
					return nil, fmt.Errorf("%s: %w", name, err)
				}
				for _, mem := range body {
					if mem.Token {
						op.Token = mem
						continue
					}
					op.Input.Members = append(op.Input.Members, mem)
				}
			}
			for _, code := range o.get("responses").Keys() {
				r := o.get("responses", code)
				if strings.HasPrefix(code, "2") {
					op.Status, _ = strconv.Atoi(code)
					if ref := r.str("content", "application/json", "schema", "$ref"); ref != "" {
						op.Output.Members, err = members(schemas.get(refName(ref)), outShape, &docs, "body")
						if err != nil {
							return nil, fmt.Errorf("%s: %w", name, err)
						}
					}
					continue
				}
				if ref := r.str("$ref"); ref != "" {
					op.Errors = append(op.Errors, refName(ref))
				}
			}
			if pg := o.get("x-paginated"); pg != nil {
				op.Paginator = &sdkPaginator{InputToken: pg.str("inputToken"), OutputToken: pg.str("outputToken"), PageSize: pg.str("pageSize"), Items: pg.str("items")}
			}
			for _, wn := range o.get("x-waiters").Keys() {
				w := o.get("x-waiters", wn)
				sw := sdkWaiter{Name: wn, Doc: w.str("documentation"), Path: w.str("path"), ReasonPath: w.str("reasonPath")}
				if v := w.intp("minDelay"); v != nil {
					sw.MinDelay = *v
				}
				if v := w.intp("maxDelay"); v != nil {
					sw.MaxDelay = *v
				}
				for _, a := range w.get("acceptors").List() {
					sw.Acceptors = append(sw.Acceptors, sdkAcceptor{State: a.str("state"), Expected: a.str("expected"), Error: a.str("errorType")})
				}
				op.Waiters = append(op.Waiters, sw)
			}
			collectMeasured(o, op)
			m.Ops = append(m.Ops, op)
		}
	}
	sort.Slice(m.Ops, func(i, j int) bool { return m.Ops[i].Name < m.Ops[j].Name })
	return m, nil
}

// collectMeasured gathers the x-measured and x-client notes of an operation
// and of its parameters, for the operation's documentation.
func collectMeasured(o *onode, op *sdkOp) {
	add := func(n *onode, label string) {
		if n == nil {
			return
		}
		if f := n.str("finding"); f != "" {
			for i, have := range op.Finding {
				if have == f && op.Note[i] == label+"|"+n.str("note") {
					return
				}
			}
			op.Finding = append(op.Finding, f)
			op.Note = append(op.Note, label+"|"+n.str("note"))
		}
	}
	add(o.get("x-measured"), "Measured")
	add(o.get("x-client"), "Client policy")
	for _, p := range o.get("parameters").List() {
		add(p.get("x-measured"), "Measured")
	}
}

func members(s *onode, shape string, docs *smithyDocs, loc string) ([]*sdkMember, error) {
	req := map[string]bool{}
	for _, r := range s.get("required").List() {
		req[r.s] = true
	}
	var out []*sdkMember
	for _, k := range s.get("properties").Keys() {
		p := s.get("properties", k)
		t, err := typeOf(p)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", shape, k, err)
		}
		doc := docs.memberDoc(shape, k)
		if p.boolv("x-sensitive") || p.boolv("additionalProperties", "x-sensitive") || p.boolv("items", "x-sensitive") {
			doc += "\n\nThis member holds secrets: never log or persist it."
		}
		if f := p.str("x-measured", "finding"); f != "" {
			doc += fmt.Sprintf("\n\nMeasured (docs/PLATFORM.md, %s): %s", f, p.str("x-measured", "note"))
		}
		out = append(out, &sdkMember{Wire: k, GoName: goExported(k), Loc: loc, Required: req[k], T: t, Doc: strings.TrimSpace(doc), Token: p.boolv("x-idempotency-token")})
	}
	return out, nil
}

func constraintsOf(p *onode) constraints {
	return constraints{
		MinLen: p.intp("minLength"), MaxLen: p.intp("maxLength"), Pattern: p.str("pattern"),
		Min: p.intp("minimum"), Max: p.intp("maximum"),
		MinItems: p.intp("minItems"), MaxItems: p.intp("maxItems"),
	}
}

func typeOf(p *onode) (*sdkType, error) {
	if p == nil {
		return nil, fmt.Errorf("no schema")
	}
	if ref := p.str("$ref"); ref != "" {
		return &sdkType{Kind: "named", Name: refName(ref)}, nil
	}
	if all := p.get("allOf"); all != nil && len(all.list) == 1 {
		return typeOf(all.list[0])
	}
	c := constraintsOf(p)
	switch p.str("type") {
	case "string":
		return &sdkType{Kind: "string", C: c}, nil
	case "integer":
		if p.str("format") == "int64" {
			return &sdkType{Kind: "int64", C: c}, nil
		}
		return &sdkType{Kind: "int32", C: c}, nil
	case "boolean":
		return &sdkType{Kind: "bool"}, nil
	case "number":
		if p.str("x-timestamp-format") != "" {
			return &sdkType{Kind: "timestamp"}, nil
		}
		return &sdkType{Kind: "double", C: c}, nil
	case "array":
		e, err := typeOf(p.get("items"))
		if err != nil {
			return nil, err
		}
		return &sdkType{Kind: "list", Elem: e, C: c}, nil
	case "object":
		ap := p.get("additionalProperties")
		if ap == nil || ap.m == nil {
			return nil, fmt.Errorf("inline object without additionalProperties")
		}
		e, err := typeOf(ap)
		if err != nil {
			return nil, err
		}
		t := &sdkType{Kind: "map", Elem: e, C: constraints{MinItems: p.intp("minProperties"), MaxItems: p.intp("maxProperties")}}
		if k := p.get("x-key"); k != nil {
			t.KeyC = constraintsOf(k)
		}
		return t, nil
	}
	return nil, fmt.Errorf("unsupported schema type %q", p.str("type"))
}

// goExported turns a wire name into an exported Go identifier.
func goExported(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// enumConst names an enum value the way aws-sdk-go-v2 does: the type name
// followed by the value in camel case ("RUNNING" -> MicrovmStateRunning).
func enumConst(typ, v string) string {
	var b strings.Builder
	b.WriteString(typ)
	for _, part := range strings.FieldsFunc(v, func(r rune) bool { return r == '_' || r == '-' || r == '.' || r == ' ' }) {
		b.WriteString(strings.ToUpper(part[:1]) + strings.ToLower(part[1:]))
	}
	return b.String()
}
