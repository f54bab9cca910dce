package schema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// The botocore service model of Lambda MicroVMs: service-2.json,
// paginators-1.json and endpoint-rule-set-1.json under
// clients/botocore/lambda-microvms/<apiVersion>/, translated from the
// Smithy model api/lambda-microvms.json the way AWS's own botocore models
// are built from Smithy (shapes by local name, Smithy 2 enums as strings
// with an enum list, unions as structures marked union, http bindings as
// locations, errors as exception structures). Put the directory on
// AWS_DATA_PATH and boto3.client("lambda-microvms") drives the service,
// or the emulator.

// botocoreDir is where the model is written, relative to the repository.
const botocoreDir = "clients/botocore/lambda-microvms"

type smithyRef struct {
	Target string `json:"target"`
}

type smithyShape struct {
	Type       string                     `json:"type"`
	Version    string                     `json:"version"`
	Input      *smithyRef                 `json:"input"`
	Output     *smithyRef                 `json:"output"`
	Errors     []smithyRef                `json:"errors"`
	Operations []smithyRef                `json:"operations"`
	Resources  []smithyRef                `json:"resources"`
	Members    map[string]smithyMember    `json:"members"`
	Member     *smithyMember              `json:"member"`
	Key        *smithyMember              `json:"key"`
	Value      *smithyMember              `json:"value"`
	Traits     map[string]json.RawMessage `json:"traits"`
	// A resource's lifecycle operations.
	Create, Read, Update, Delete, List, Put *smithyRef
}

func (s smithyShape) lifecycle() []*smithyRef {
	return []*smithyRef{s.Create, s.Read, s.Update, s.Delete, s.List, s.Put}
}

type smithyMember struct {
	Target string                     `json:"target"`
	Traits map[string]json.RawMessage `json:"traits"`
}

func localName(id string) string {
	if i := strings.LastIndex(id, "#"); i >= 0 {
		return id[i+1:]
	}
	return id
}

// preludeTypes are the Smithy prelude shapes the model targets, by the
// botocore type each becomes.
var preludeTypes = map[string]string{
	"smithy.api#String": "string", "smithy.api#Integer": "integer", "smithy.api#Long": "long",
	"smithy.api#Boolean": "boolean", "smithy.api#Timestamp": "timestamp", "smithy.api#Double": "double",
	"smithy.api#Float": "float", "smithy.api#Blob": "blob", "smithy.api#Document": "document",
	"smithy.api#PrimitiveInteger": "integer", "smithy.api#PrimitiveLong": "long", "smithy.api#PrimitiveBoolean": "boolean",
}

func trait[T any](traits map[string]json.RawMessage, name string) (T, bool) {
	var v T
	raw, ok := traits[name]
	if !ok {
		return v, false
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return v, false
	}
	return v, true
}

// botocoreConstraints copies length, range and pattern traits as botocore spells them.
func botocoreConstraints(traits map[string]json.RawMessage, into map[string]any) {
	if l, ok := trait[map[string]float64](traits, "smithy.api#length"); ok {
		if v, ok := l["min"]; ok {
			into["min"] = v
		}
		if v, ok := l["max"]; ok {
			into["max"] = v
		}
	}
	if r, ok := trait[map[string]float64](traits, "smithy.api#range"); ok {
		if v, ok := r["min"]; ok {
			into["min"] = v
		}
		if v, ok := r["max"]; ok {
			into["max"] = v
		}
	}
	if p, ok := trait[string](traits, "smithy.api#pattern"); ok {
		into["pattern"] = p
	}
	if d, ok := trait[string](traits, "smithy.api#documentation"); ok {
		into["documentation"] = d
	}
	if _, ok := traits["smithy.api#sensitive"]; ok {
		into["sensitive"] = true
	}
}

func generateBotocore(root string) ([]Output, error) {
	raw, err := os.ReadFile(filepath.Join(root, "api", "lambda-microvms.json"))
	if err != nil {
		return nil, err
	}
	var model struct {
		Shapes map[string]smithyShape `json:"shapes"`
	}
	if err := json.Unmarshal(raw, &model); err != nil {
		return nil, fmt.Errorf("botocore: %w", err)
	}
	var svcID string
	for id, s := range model.Shapes {
		if s.Type == "service" {
			svcID = id
		}
	}
	if svcID == "" {
		return nil, fmt.Errorf("botocore: the model has no service")
	}
	svc := model.Shapes[svcID]
	info, _ := trait[map[string]string](svc.Traits, "aws.api#service")
	sigv4, _ := trait[map[string]string](svc.Traits, "aws.auth#sigv4")
	title, _ := trait[string](svc.Traits, "smithy.api#title")
	if _, ok := svc.Traits["aws.protocols#restJson1"]; !ok {
		return nil, fmt.Errorf("botocore: only restJson1 is translated")
	}

	// Every operation bound to the service, directly or through a resource.
	opIDs := map[string]bool{}
	var walk func(refs []smithyRef, resources []smithyRef)
	walk = func(refs []smithyRef, resources []smithyRef) {
		for _, r := range refs {
			opIDs[r.Target] = true
		}
		for _, r := range resources {
			res := model.Shapes[r.Target]
			for _, lc := range res.lifecycle() {
				if lc != nil {
					opIDs[lc.Target] = true
				}
			}
			walk(res.Operations, res.Resources)
		}
	}
	walk(svc.Operations, svc.Resources)

	shapes := map[string]any{}
	var addShape func(id string) string
	addShape = func(id string) string {
		name := localName(id)
		if _, done := shapes[name]; done {
			return name
		}
		if id == "smithy.api#Unit" {
			// A union member that carries nothing, as botocore's models
			// spell it: an empty structure.
			shapes[name] = map[string]any{"type": "structure", "members": map[string]any{}}
			return name
		}
		if t, ok := preludeTypes[id]; ok {
			shapes[name] = map[string]any{"type": t}
			return name
		}
		s, ok := model.Shapes[id]
		if !ok {
			panic("botocore: unknown shape " + id)
		}
		out := map[string]any{}
		shapes[name] = out // placed first: recursive shapes terminate
		botocoreConstraints(s.Traits, out)
		member := func(m smithyMember, memberName string) map[string]any {
			mm := map[string]any{"shape": addShape(m.Target)}
			if d, ok := trait[string](m.Traits, "smithy.api#documentation"); ok {
				mm["documentation"] = d
			}
			if _, ok := m.Traits["smithy.api#httpLabel"]; ok {
				mm["location"], mm["locationName"] = "uri", memberName
			}
			if q, ok := trait[string](m.Traits, "smithy.api#httpQuery"); ok {
				mm["location"], mm["locationName"] = "querystring", q
			}
			if h, ok := trait[string](m.Traits, "smithy.api#httpHeader"); ok {
				mm["location"], mm["locationName"] = "header", h
			}
			if j, ok := trait[string](m.Traits, "smithy.api#jsonName"); ok {
				mm["locationName"] = j
			}
			if _, ok := m.Traits["smithy.api#idempotencyToken"]; ok {
				mm["idempotencyToken"] = true
			}
			if _, ok := m.Traits["smithy.api#httpPayload"]; ok {
				out["payload"] = memberName
			}
			return mm
		}
		switch s.Type {
		case "structure", "union":
			out["type"] = "structure"
			if s.Type == "union" {
				out["union"] = true
			}
			members := map[string]any{}
			var required []string
			for mn, m := range s.Members {
				members[mn] = member(m, mn)
				if _, ok := m.Traits["smithy.api#required"]; ok {
					required = append(required, mn)
				}
			}
			out["members"] = members
			if len(required) > 0 {
				sort.Strings(required)
				out["required"] = required
			}
			if fault, ok := trait[string](s.Traits, "smithy.api#error"); ok {
				status, _ := trait[int](s.Traits, "smithy.api#httpError")
				if status == 0 {
					status = map[string]int{"client": 400, "server": 500}[fault]
				}
				out["error"] = map[string]any{"httpStatusCode": status, "senderFault": fault == "client"}
				out["exception"] = true
				if _, ok := s.Traits["smithy.api#retryable"]; ok {
					out["retryable"] = map[string]any{"throttling": false}
				}
			}
		case "enum":
			out["type"] = "string"
			var values []string
			for mn, m := range s.Members {
				v, ok := trait[string](m.Traits, "smithy.api#enumValue")
				if !ok {
					v = mn
				}
				values = append(values, v)
			}
			sort.Strings(values)
			out["enum"] = values
		case "list", "set":
			out["type"] = "list"
			out["member"] = member(*s.Member, "member")
		case "map":
			out["type"] = "map"
			out["key"] = member(*s.Key, "key")
			out["value"] = member(*s.Value, "value")
		case "string", "integer", "long", "boolean", "timestamp", "blob", "double", "float", "document":
			out["type"] = s.Type
		default:
			panic("botocore: shape type " + s.Type + " of " + id)
		}
		if tf, ok := trait[string](s.Traits, "smithy.api#timestampFormat"); ok {
			out["timestampFormat"] = map[string]string{"epoch-seconds": "unixTimestamp", "date-time": "iso8601", "http-date": "rfc822"}[tf]
		}
		return name
	}

	ops := map[string]any{}
	paginators := map[string]any{}
	var opNames []string
	for id := range opIDs {
		opNames = append(opNames, id)
	}
	sort.Strings(opNames)
	for _, id := range opNames {
		s := model.Shapes[id]
		name := localName(id)
		http, ok := trait[map[string]any](s.Traits, "smithy.api#http")
		if !ok {
			return nil, fmt.Errorf("botocore: %s has no http trait", name)
		}
		h := map[string]any{"method": http["method"], "requestUri": http["uri"]}
		if code, ok := http["code"]; ok {
			h["responseCode"] = code
		} else {
			h["responseCode"] = 200
		}
		op := map[string]any{"name": name, "http": h}
		if d, ok := trait[string](s.Traits, "smithy.api#documentation"); ok {
			op["documentation"] = d
		}
		if s.Input != nil && s.Input.Target != "smithy.api#Unit" {
			op["input"] = map[string]any{"shape": addShape(s.Input.Target)}
		}
		if s.Output != nil && s.Output.Target != "smithy.api#Unit" {
			op["output"] = map[string]any{"shape": addShape(s.Output.Target)}
		}
		var errs []any
		for _, e := range append(append([]smithyRef{}, s.Errors...), svc.Errors...) {
			errs = append(errs, map[string]any{"shape": addShape(e.Target)})
		}
		if len(errs) > 0 {
			op["errors"] = errs
		}
		if _, ok := s.Traits["smithy.api#idempotent"]; ok {
			op["idempotent"] = true
		}
		ops[name] = op
		if p, ok := trait[map[string]string](s.Traits, "smithy.api#paginated"); ok {
			paginators[name] = map[string]any{"input_token": p["inputToken"], "output_token": p["outputToken"], "limit_key": p["pageSize"], "result_key": p["items"]}
		}
	}

	meta := map[string]any{
		"apiVersion":       svc.Version,
		"endpointPrefix":   "lambda",
		"protocol":         "rest-json",
		"protocols":        []string{"rest-json"},
		"serviceFullName":  title,
		"serviceId":        info["sdkId"],
		"signatureVersion": "v4",
		"signingName":      sigv4["name"],
		"uid":              "lambda-microvms-" + svc.Version,
		"auth":             []string{"aws.auth#sigv4"},
	}
	service := map[string]any{"version": "2.0", "metadata": meta, "operations": ops, "shapes": shapes}
	if d, ok := trait[string](svc.Traits, "smithy.api#documentation"); ok {
		service["documentation"] = d
	}
	rules, ok := svc.Traits["smithy.rules#endpointRuleSet"]
	if !ok {
		return nil, fmt.Errorf("botocore: the service has no endpointRuleSet")
	}
	dir := botocoreDir + "/" + svc.Version + "/"
	var outs []Output
	for _, f := range []struct {
		name string
		v    any
	}{
		{"service-2.json", service},
		{"paginators-1.json", map[string]any{"pagination": paginators}},
		{"endpoint-rule-set-1.json", rules},
	} {
		b, err := json.MarshalIndent(f.v, "", "  ")
		if err != nil {
			return nil, err
		}
		if raw, ok := f.v.(json.RawMessage); ok {
			var buf bytes.Buffer
			if err := json.Indent(&buf, raw, "", "  "); err != nil {
				return nil, err
			}
			b = buf.Bytes()
		}
		outs = append(outs, Output{Path: dir + f.name, Data: append(b, '\n')})
	}
	return outs, nil
}

func init() { register(generateBotocore) }
