package schema

// The Python generator's client.py: one method per operation of
// api/openapi.yaml, after the fixed runtime (pyruntime/client_runtime.py).

import (
	_ "embed"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

func (g *pyGen) decodeWith(p *openapi3.SchemaRef, get string) string {
	expr := g.decode(p, "v")
	if expr == "v" {
		return get
	}
	return "(lambda v: " + expr + ")(" + get + ")"
}

// ---- client ----

type pyParam struct {
	Wire, Name, Type string
	Required         bool
	In               string
}

type pyResp struct {
	Status int
	Kind   string // json, text, binary, sse, none
	Decode string // for json: expression of v
}

func (g *pyGen) client(order []string, ops map[string]*openapi3.Operation, meta map[string][2]string) string {
	var b strings.Builder
	b.WriteString(pyHeader)
	b.WriteString(pyClientRuntime)
	for _, id := range order {
		op := ops[id]
		method, path := meta[id][0], meta[id][1]
		var pathParams, query []pyParam
		for _, pr := range op.Parameters {
			p := pr.Value
			pp := pyParam{Wire: p.Name, Name: pyParamName(p.Name), Type: g.typ(p.Schema), Required: p.Required, In: p.In}
			if p.In == "path" {
				pathParams = append(pathParams, pp)
			} else if p.In == "query" {
				query = append(query, pp)
			}
		}
		sig := []string{"self"}
		for _, p := range pathParams {
			sig = append(sig, p.Name+": str")
		}
		var bodyKind, bodyType, bodyCT string
		if op.RequestBody != nil {
			for _, ct := range sortedKeys(op.RequestBody.Value.Content) {
				mt := op.RequestBody.Value.Content[ct]
				bodyCT = ct
				if ct == "application/json" {
					bodyKind, bodyType = "json", g.typ(mt.Schema)
				} else {
					bodyKind, bodyType = "binary", "Union[bytes, BinaryIO]"
				}
			}
			sig = append(sig, "body: "+bodyType)
		}
		var resps []pyResp
		var success []pyResp
		codes := make([]string, 0)
		for code := range op.Responses.Map() {
			codes = append(codes, code)
		}
		sort.Strings(codes)
		for _, code := range codes {
			st, _ := strconv.Atoi(code)
			r := op.Responses.Map()[code].Value
			pr := pyResp{Status: st, Kind: "none"}
			for _, ct := range sortedKeys(r.Content) {
				mt := r.Content[ct]
				switch {
				case ct == "application/json":
					pr.Kind, pr.Decode = "json", g.decode(mt.Schema, "v")
				case ct == "text/event-stream":
					pr.Kind, pr.Decode = "sse", g.decode(mt.Schema, "v")
				case ct == "text/plain":
					pr.Kind = "text"
				default:
					pr.Kind = "binary"
				}
			}
			resps = append(resps, pr)
			if st >= 200 && st < 300 {
				success = append(success, pr)
			}
		}
		ret := "None"
		streamable := false
		for _, s := range success {
			switch s.Kind {
			case "json":
				ret = g.typ(op.Responses.Map()[strconv.Itoa(s.Status)].Value.Content["application/json"].Schema)
			case "sse":
				ret = "EventStream"
			case "binary":
				ret = "bytes"
				streamable = true
			case "text":
				ret = "str"
			}
		}
		if len(query) > 0 || streamable {
			sig = append(sig, "*")
		}
		for _, q := range query {
			if q.Required {
				sig = append(sig, q.Name+": "+q.Type)
			}
		}
		for _, q := range query {
			if !q.Required {
				t := q.Type
				if !strings.HasPrefix(t, "Optional[") {
					t = "Optional[" + t + "]"
				}
				sig = append(sig, q.Name+": "+t+" = None")
			}
		}
		if streamable {
			sig = append(sig, "stream: bool = False")
			ret = "Any"
		}
		// An operation whose event stream may also come as binary frames
		// (x-frames) gets a second method, NAME_frames, that asks for them.
		framesAlso := false
		for _, s := range success {
			if s.Kind == "sse" {
				if _, ok := op.Responses.Map()[strconv.Itoa(s.Status)].Value.Content[g.frames.MediaType]; ok {
					framesAlso = true
				}
			}
		}
		for _, frames := range []bool{false, true} {
			if frames && !framesAlso {
				continue
			}
			name, ret := pySnake(id), ret
			if frames {
				name, ret = name+"_frames", "Union[FrameStream, EventStream]"
			}
			fmt.Fprintf(&b, "\n    def %s(%s) -> %s:\n", name, strings.Join(sig, ", "), ret)
			if frames {
				fmt.Fprintf(&b, "        \"\"\"As %s, asking for binary frames (Accept %s, Server-Sent Events still acceptable): a FrameStream when the daemon answered frames, else the EventStream %s returns.\"\"\"\n", pySnake(id), g.frames.MediaType, pySnake(id))
			}
			doc := op.Summary
			if op.Description != "" {
				doc += ": " + op.Description
			}
			if !frames {
				fmt.Fprintf(&b, "        \"\"\"%s %s. %s", method, path, pyDoc(doc))
				if streamable {
					b.WriteString(" With stream=True the open response is returned to read from (close it); otherwise its bytes.")
				}
				b.WriteString("\"\"\"\n")
			}
			// path
			pyPath := path
			for _, p := range pathParams {
				pyPath = strings.ReplaceAll(pyPath, "{"+p.Wire+"}", "{_quote("+p.Name+")}")
			}
			if len(pathParams) > 0 {
				fmt.Fprintf(&b, "        _path = f%s\n", pyStr(pyPath))
			} else {
				fmt.Fprintf(&b, "        _path = %s\n", pyStr(pyPath))
			}
			fmt.Fprintf(&b, "        _query: List[Tuple[str, str]] = []\n")
			for _, q := range query {
				fmt.Fprintf(&b, "        if %s is not None:\n            _query.append((%s, _query_value(%s)))\n", q.Name, pyStr(q.Wire), q.Name)
			}
			bearer := op.Security != nil && len(*op.Security) > 0 && len((*op.Security)[0]) > 0
			switch bodyKind {
			case "json":
				fmt.Fprintf(&b, "        _data: Any = json.dumps(%s).encode()\n", g.encode(op.RequestBody.Value.Content["application/json"].Schema, "body"))
			case "binary":
				b.WriteString("        _data = body\n")
			default:
				b.WriteString("        _data = None\n")
			}
			stream := "False"
			for _, s := range success {
				if s.Kind == "sse" {
					stream = "True"
				}
			}
			if streamable {
				stream = "stream"
			}
			accept := ""
			if frames {
				accept = ", accept=FRAMES_MEDIA_TYPE + \", text/event-stream;q=0.5\""
			}
			fmt.Fprintf(&b, "        _resp = self._send(%s, _path, _query, _data, %s, bearer=%s, stream=%s, operation=%s%s)\n",
				pyStr(method), pyStr(bodyCT), map[bool]string{true: "True", false: "False"}[bearer], stream, pyStr(id), accept)
			// errors
			b.WriteString("        _status = _resp.status\n")
			b.WriteString("        if _status < 200 or _status >= 300:\n")
			var jsonErrs []string
			for _, r := range resps {
				if r.Status >= 300 && r.Kind == "json" {
					jsonErrs = append(jsonErrs, strconv.Itoa(r.Status))
				}
			}
			if len(jsonErrs) > 0 {
				fmt.Fprintf(&b, "            raise _api_error(%s, _resp, json_statuses=(%s))\n", pyStr(id), strings.Join(jsonErrs, ", ")+map[bool]string{true: ",", false: ""}[len(jsonErrs) == 1])
			} else {
				fmt.Fprintf(&b, "            raise _api_error(%s, _resp, json_statuses=())\n", pyStr(id))
			}
			for _, s := range success {
				switch s.Kind {
				case "json":
					fmt.Fprintf(&b, "        if _status == %d:\n            v = json.loads(_read_all(_resp))\n            return %s\n", s.Status, s.Decode)
				case "sse":
					fmt.Fprintf(&b, "        if _status == %d:\n", s.Status)
					if frames {
						b.WriteString("            if _is_frames(_resp):\n                return FrameStream(_resp)\n")
					}
					fmt.Fprintf(&b, "            return EventStream(_resp, lambda v: %s)\n", s.Decode)
				case "binary":
					fmt.Fprintf(&b, "        if _status == %d:\n            return _resp if stream else _read_all(_resp)\n", s.Status)
				case "text":
					fmt.Fprintf(&b, "        if _status == %d:\n            return _read_all(_resp).decode(\"utf-8\", \"replace\")\n", s.Status)
				case "none":
					fmt.Fprintf(&b, "        if _status == %d:\n            _read_all(_resp)\n            return None\n", s.Status)
				}
			}
			fmt.Fprintf(&b, "        raise _api_error(%s, _resp, json_statuses=())\n", pyStr(id))
		}
	}
	return b.String()
}
