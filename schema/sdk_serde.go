package schema

// The SDK generator's REST-JSON serializers and deserializers: every
// input member bound to its path label, query key, header or body key, and
// every output and error shape decoded.

import (
	"fmt"
	"strings"
)

func (g *sdkGen) serializers() string {
	g.p("import (")
	for _, imp := range []string{"bytes", "context", "fmt", "sort"} {
		g.p("\t%q", imp)
	}
	g.p("\tsmithy %q", "github.com/aws/smithy-go")
	g.p("\tsmithyjson %q", "github.com/aws/smithy-go/encoding/json")
	g.p("\t%q", "github.com/aws/smithy-go/encoding/httpbinding")
	g.p("\t%q", "github.com/aws/smithy-go/middleware")
	g.p("\tsmithytime %q", "github.com/aws/smithy-go/time")
	g.p("\tsmithyhttp %q", "github.com/aws/smithy-go/transport/http")
	g.p("\t%q", "github.com/microvms/microvms/client/lambdamicrovms/types")
	g.p(")")
	g.p("")
	for _, op := range g.m.Ops {
		n := op.Name
		g.p("type awsRestjson1_serializeOp%s struct{}", n)
		g.p("")
		g.p("func (*awsRestjson1_serializeOp%s) ID() string { return \"OperationSerializer\" }", n)
		g.p("")
		g.p("func (m *awsRestjson1_serializeOp%s) HandleSerialize(ctx context.Context, in middleware.SerializeInput, next middleware.SerializeHandler) (out middleware.SerializeOutput, metadata middleware.Metadata, err error) {", n)
		g.p("\trequest, ok := in.Request.(*smithyhttp.Request)")
		g.p("\tif !ok {")
		g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: fmt.Errorf(\"unknown transport type %%T\", in.Request)}")
		g.p("\t}")
		g.p("\tinput, ok := in.Parameters.(*%sInput)", n)
		g.p("\tif !ok {")
		g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: fmt.Errorf(\"unknown input parameters type %%T\", in.Parameters)}")
		g.p("\t}")
		g.p("\t_ = input")
		g.p("\topPath, opQuery := httpbinding.SplitURI(%q)", op.Path)
		g.p("\trequest.URL.Path = smithyhttp.JoinPath(request.URL.Path, opPath)")
		g.p("\trequest.URL.RawQuery = smithyhttp.JoinRawQuery(request.URL.RawQuery, opQuery)")
		g.p("\trequest.Method = %q", op.Method)
		g.p("\tvar restEncoder *httpbinding.Encoder")
		g.p("\tif request.URL.RawPath == \"\" {")
		g.p("\t\trestEncoder, err = httpbinding.NewEncoder(request.URL.Path, request.URL.RawQuery, request.Header)")
		g.p("\t} else {")
		g.p("\t\trequest.URL.RawPath = smithyhttp.JoinPath(request.URL.RawPath, opPath)")
		g.p("\t\trestEncoder, err = httpbinding.NewEncoderWithRawPath(request.URL.Path, request.URL.RawPath, request.URL.RawQuery, request.Header)")
		g.p("\t}")
		g.p("\tif err != nil {")
		g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: err}")
		g.p("\t}")
		for _, mem := range op.Input.Members {
			g.bindMember(mem)
		}
		if op.HasBody {
			g.p("\trestEncoder.SetHeader(\"Content-Type\").String(\"application/json\")")
			g.p("\tjsonEncoder := smithyjson.NewEncoder()")
			g.p("\tif err := awsRestjson1_serializeOpDocument%sInput(ctx, input, jsonEncoder.Value); err != nil {", n)
			g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: err}")
			g.p("\t}")
			g.p("\tif request, err = request.SetStream(bytes.NewReader(jsonEncoder.Bytes())); err != nil {")
			g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: err}")
			g.p("\t}")
		}
		g.p("\tif request.Request, err = restEncoder.Encode(request.Request); err != nil {")
		g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: err}")
		g.p("\t}")
		g.p("\tin.Request = request")
		g.p("\treturn next.HandleSerialize(ctx, in)")
		g.p("}")
		g.p("")
		if op.HasBody {
			g.p("func awsRestjson1_serializeOpDocument%sInput(ctx context.Context, v *%sInput, value smithyjson.Value) error {", n, n)
			g.p("\tobject := value.Object()")
			g.p("\tdefer object.Close()")
			g.p("\t_ = ctx")
			members := op.Input.Members
			if op.Token != nil {
				members = append(append([]*sdkMember{}, members...), op.Token)
			}
			for _, mem := range members {
				if mem.Loc != "body" {
					continue
				}
				if mem.Token {
					g.p("\tif token := clientTokenFrom(ctx); token != \"\" {")
					g.p("\t\tobject.Key(%q).String(token)", mem.Wire)
					g.p("\t}")
					continue
				}
				g.serializeMember("v", mem, "types.")
			}
			g.p("\treturn nil")
			g.p("}")
			g.p("")
		}
	}
	for _, st := range g.m.Types {
		if st.Union {
			g.p("func awsRestjson1_serializeDocument%s(v types.%s, value smithyjson.Value) error {", st.Name, st.Name)
			g.p("\tobject := value.Object()")
			g.p("\tdefer object.Close()")
			g.p("\tswitch uv := v.(type) {")
			for _, mem := range st.Members {
				g.p("\tcase *types.%sMember%s:", st.Name, mem.GoName)
				g.p("\t\tav := object.Key(%q)", mem.Wire)
				g.serializeValue("uv.Value", mem.T, "av", 2, "types.", false)
			}
			g.p("\tdefault:")
			g.p("\t\treturn fmt.Errorf(\"attempted to serialize unknown member type %%T for union %%T\", uv, v)")
			g.p("\t}")
			g.p("\treturn nil")
			g.p("}")
			g.p("")
			continue
		}
		g.p("func awsRestjson1_serializeDocument%s(v *types.%s, value smithyjson.Value) error {", st.Name, st.Name)
		g.p("\tobject := value.Object()")
		g.p("\tdefer object.Close()")
		for _, mem := range st.Members {
			g.serializeMember("v", mem, "types.")
		}
		g.p("\treturn nil")
		g.p("}")
		g.p("")
	}
	return g.take()
}

// bindMember writes an HTTP-bound (path or query) input member.
func (g *sdkGen) bindMember(mem *sdkMember) {
	t := g.resolve(mem.T)
	f := "input." + mem.GoName
	switch mem.Loc {
	case "uri":
		if t.Kind != "string" {
			panic("non-string label " + mem.Wire)
		}
		g.p("\tif %s == nil || len(*%s) == 0 {", f, f)
		g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: smithy.NewErrParamRequired(%q)}", mem.GoName)
		g.p("\t}")
		g.p("\tif err := restEncoder.SetURI(%q).String(*%s); err != nil {", mem.Wire, f)
		g.p("\t\treturn out, metadata, &smithy.SerializationError{Err: err}")
		g.p("\t}")
	case "query":
		switch t.Kind {
		case "string":
			g.p("\tif %s != nil {", f)
			g.p("\t\trestEncoder.SetQuery(%q).String(*%s)", mem.Wire, f)
			g.p("\t}")
		case "int32":
			g.p("\tif %s != nil {", f)
			g.p("\t\trestEncoder.SetQuery(%q).Integer(*%s)", mem.Wire, f)
			g.p("\t}")
		case "enum":
			g.p("\tif len(%s) > 0 {", f)
			g.p("\t\trestEncoder.SetQuery(%q).String(string(%s))", mem.Wire, f)
			g.p("\t}")
		case "list":
			g.p("\tfor i := range %s {", f)
			g.p("\t\trestEncoder.AddQuery(%q).String(%s[i])", mem.Wire, f)
			g.p("\t}")
		default:
			panic("query kind " + t.Kind)
		}
	}
}

// serializeMember writes one member of a structure under its JSON key.
func (g *sdkGen) serializeMember(recv string, mem *sdkMember, pkg string) {
	t := g.resolve(mem.T)
	f := recv + "." + mem.GoName
	switch t.Kind {
	case "enum":
		g.p("\tif len(%s) > 0 {", f)
	default:
		g.p("\tif %s != nil {", f)
	}
	g.p("\t\tok := object.Key(%q)", mem.Wire)
	switch t.Kind {
	case "string", "int32", "int64", "bool", "double", "timestamp":
		g.serializeValue("*"+f, t, "ok", 2, pkg, false)
	case "struct":
		g.serializeValue(f, t, "ok", 2, pkg, true)
	default:
		g.serializeValue(f, t, "ok", 2, pkg, false)
	}
	g.p("\t}")
}

// serializeValue writes expr (of type t) into the smithyjson.Value named val.
// isPtr says a structure expr is already a pointer.
func (g *sdkGen) serializeValue(expr string, t *sdkType, val string, depth int, pkg string, isPtr bool) {
	t = g.resolve(t)
	ind := strings.Repeat("\t", depth)
	switch t.Kind {
	case "string":
		g.p("%s%s.String(%s)", ind, val, expr)
	case "int32":
		g.p("%s%s.Integer(%s)", ind, val, expr)
	case "int64":
		g.p("%s%s.Long(%s)", ind, val, expr)
	case "bool":
		g.p("%s%s.Boolean(%s)", ind, val, expr)
	case "double":
		g.p("%s%s.Double(%s)", ind, val, expr)
	case "timestamp":
		g.p("%s%s.Double(smithytime.FormatEpochSeconds(%s))", ind, val, expr)
	case "enum":
		g.p("%s%s.String(string(%s))", ind, val, expr)
	case "struct":
		if !isPtr {
			expr = "&" + expr
		}
		g.p("%sif err := awsRestjson1_serializeDocument%s(%s, %s); err != nil {", ind, t.Name, expr, val)
		g.p("%s\treturn err", ind)
		g.p("%s}", ind)
	case "union":
		g.p("%sif err := awsRestjson1_serializeDocument%s(%s, %s); err != nil {", ind, t.Name, expr, val)
		g.p("%s\treturn err", ind)
		g.p("%s}", ind)
	case "list":
		arr := fmt.Sprintf("a%d", depth)
		idx := fmt.Sprintf("i%d", depth)
		g.p("%s%s := %s.Array()", ind, arr, val)
		g.p("%sfor %s := range %s {", ind, idx, expr)
		item := fmt.Sprintf("e%d", depth)
		g.p("%s\t%s := %s.Value()", ind, item, arr)
		g.serializeValue(expr+"["+idx+"]", t.Elem, item, depth+1, pkg, false)
		g.p("%s}", ind)
		g.p("%s%s.Close()", ind, arr)
	case "map":
		obj := fmt.Sprintf("o%d", depth)
		keys := fmt.Sprintf("k%d", depth)
		g.p("%s%s := %s.Object()", ind, obj, val)
		g.p("%s%s := make([]string, 0, len(%s))", ind, keys, expr)
		g.p("%sfor k := range %s {", ind, expr)
		g.p("%s\t%s = append(%s, k)", ind, keys, keys)
		g.p("%s}", ind)
		g.p("%ssort.Strings(%s)", ind, keys)
		g.p("%sfor _, k := range %s {", ind, keys)
		item := fmt.Sprintf("e%d", depth)
		g.p("%s\t%s := %s.Key(k)", ind, item, obj)
		g.serializeValue(expr+"[k]", t.Elem, item, depth+1, pkg, false)
		g.p("%s}", ind)
		g.p("%s%s.Close()", ind, obj)
	default:
		panic("serialize kind " + t.Kind)
	}
}

// ---- deserializers.go ----------------------------------------------------------

func (g *sdkGen) deserializers() string {
	g.p("import (")
	for _, imp := range []string{"context", "fmt", "strings"} {
		g.p("\t%q", imp)
	}
	g.p("\tsmithy %q", "github.com/aws/smithy-go")
	g.p("\t%q", "github.com/aws/smithy-go/middleware")
	g.p("\tsmithyhttp %q", "github.com/aws/smithy-go/transport/http")
	g.p("\t%q", "github.com/microvms/microvms/client/lambdamicrovms/types")
	g.p(")")
	g.p("")
	for _, op := range g.m.Ops {
		n := op.Name
		g.p("type awsRestjson1_deserializeOp%s struct{}", n)
		g.p("")
		g.p("func (*awsRestjson1_deserializeOp%s) ID() string { return \"OperationDeserializer\" }", n)
		g.p("")
		g.p("func (m *awsRestjson1_deserializeOp%s) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (out middleware.DeserializeOutput, metadata middleware.Metadata, err error) {", n)
		g.p("\tout, metadata, err = next.HandleDeserialize(ctx, in)")
		g.p("\tif err != nil {")
		g.p("\t\treturn out, metadata, err")
		g.p("\t}")
		g.p("\tresponse, ok := out.RawResponse.(*smithyhttp.Response)")
		g.p("\tif !ok {")
		g.p("\t\treturn out, metadata, &smithy.DeserializationError{Err: fmt.Errorf(\"unknown transport type %%T\", out.RawResponse)}")
		g.p("\t}")
		g.p("\tdefer func() {")
		g.p("\t\tsmithyhttp.CloseResponseBody(ctx, response, false, err)")
		g.p("\t}()")
		g.p("\tif response.StatusCode < 200 || response.StatusCode >= 300 {")
		g.p("\t\treturn out, metadata, awsRestjson1_deserializeOpError%s(response)", n)
		g.p("\t}")
		g.p("\toutput := &%sOutput{}", n)
		g.p("\tout.Result = output")
		g.p("\tbody, err := readJSONObject(response)")
		g.p("\tif err != nil {")
		g.p("\t\treturn out, metadata, err")
		g.p("\t}")
		g.p("\t_ = body")
		for _, mem := range op.Output.Members {
			g.decodeMember("output", mem, "body", "types.", "return out, metadata, &smithy.DeserializationError{Err: err}")
		}
		g.p("\treturn out, metadata, nil")
		g.p("}")
		g.p("")
		g.p("func awsRestjson1_deserializeOpError%s(response *smithyhttp.Response) error {", n)
		g.p("\tenv := readErrorEnvelope(response)")
		g.p("\tswitch {")
		for _, e := range op.Errors {
			g.p("\tcase strings.EqualFold(%q, env.code):", e)
			g.p("\t\treturn awsRestjson1_deserializeError%s(response, env)", e)
		}
		g.p("\tdefault:")
		g.p("\t\treturn genericAPIError(response, env)")
		g.p("\t}")
		g.p("}")
		g.p("")
	}
	for _, e := range g.m.Errors {
		g.p("func awsRestjson1_deserializeError%s(response *smithyhttp.Response, env errorEnvelope) error {", e.Name)
		g.p("\toutput := &types.%s{}", e.Name)
		g.p("\tbody := env.body")
		g.p("\t_ = body")
		for _, mem := range e.Members {
			if mem.Loc == "header" {
				g.p("\tif v, err := headerInt32(response, %q); err != nil {", mem.Wire)
				g.p("\t\treturn err")
				g.p("\t} else {")
				g.p("\t\toutput.%s = v", mem.GoName)
				g.p("\t}")
				continue
			}
			if mem.Wire == "message" {
				g.p("\toutput.Message = env.message")
				continue
			}
			g.decodeMember("output", mem, "body", "types.", "return &smithy.DeserializationError{Err: err}")
		}
		g.p("\treturn output")
		g.p("}")
		g.p("")
	}
	for _, st := range g.m.Types {
		if st.Union {
			g.p("func awsRestjson1_deserializeDocument%s(value any) (types.%s, error) {", st.Name, st.Name)
			g.p("\tbody, err := asObject(value)")
			g.p("\tif err != nil || body == nil {")
			g.p("\t\treturn nil, err")
			g.p("\t}")
			g.p("\tfor key, val := range body {")
			g.p("\t\tif val == nil {")
			g.p("\t\t\tcontinue")
			g.p("\t\t}")
			g.p("\t\tswitch key {")
			for _, mem := range st.Members {
				g.p("\t\tcase %q:", mem.Wire)
				g.p("\t\t\tv, err := %s", g.decodeElem(mem.T, "val", "types."))
				g.p("\t\t\tif err != nil {")
				g.p("\t\t\t\treturn nil, err")
				g.p("\t\t\t}")
				g.p("\t\t\treturn &types.%sMember%s{Value: v}, nil", st.Name, mem.GoName)
			}
			g.p("\t\tdefault:")
			g.p("\t\t\treturn &types.UnknownUnionMember{Tag: key, Value: rawJSON(val)}, nil")
			g.p("\t\t}")
			g.p("\t}")
			g.p("\treturn nil, nil")
			g.p("}")
			g.p("")
			continue
		}
		g.p("func awsRestjson1_deserializeDocument%s(value any) (*types.%s, error) {", st.Name, st.Name)
		g.p("\tbody, err := asObject(value)")
		g.p("\tif err != nil || body == nil {")
		g.p("\t\treturn nil, err")
		g.p("\t}")
		g.p("\toutput := &types.%s{}", st.Name)
		for _, mem := range st.Members {
			g.decodeMember("output", mem, "body", "types.", "return nil, err")
		}
		g.p("\treturn output, nil")
		g.p("}")
		g.p("")
	}
	return g.take()
}

// decodeMember assigns recv.GoName from the JSON object body.
func (g *sdkGen) decodeMember(recv string, mem *sdkMember, body, pkg, ret string) {
	t := g.resolve(mem.T)
	g.p("\tif val, ok := %s[%q]; ok && val != nil {", body, mem.Wire)
	switch t.Kind {
	case "string", "int32", "int64", "bool", "double", "timestamp":
		g.p("\t\tv, err := %s", g.decodeElem(t, "val", pkg))
		g.p("\t\tif err != nil {")
		g.p("\t\t\t%s", ret)
		g.p("\t\t}")
		g.p("\t\t%s.%s = &v", recv, mem.GoName)
	case "struct":
		g.p("\t\tv, err := awsRestjson1_deserializeDocument%s(val)", t.Name)
		g.p("\t\tif err != nil {")
		g.p("\t\t\t%s", ret)
		g.p("\t\t}")
		g.p("\t\t%s.%s = v", recv, mem.GoName)
	default:
		g.p("\t\tv, err := %s", g.decodeElem(t, "val", pkg))
		g.p("\t\tif err != nil {")
		g.p("\t\t\t%s", ret)
		g.p("\t\t}")
		g.p("\t\t%s.%s = v", recv, mem.GoName)
	}
	g.p("\t}")
}

// decodeElem is an expression of type (elemType(t), error) decoding expr.
func (g *sdkGen) decodeElem(t *sdkType, expr, pkg string) string {
	t = g.resolve(t)
	switch t.Kind {
	case "string":
		return "decString(" + expr + ")"
	case "int32":
		return "decInt32(" + expr + ")"
	case "int64":
		return "decInt64(" + expr + ")"
	case "bool":
		return "decBool(" + expr + ")"
	case "double":
		return "decDouble(" + expr + ")"
	case "timestamp":
		return "decTime(" + expr + ")"
	case "enum":
		return fmt.Sprintf("decEnum[%s%s](%s)", pkg, t.Name, expr)
	case "union":
		return fmt.Sprintf("awsRestjson1_deserializeDocument%s(%s)", t.Name, expr)
	case "struct":
		return fmt.Sprintf("decValue(awsRestjson1_deserializeDocument%s(%s))", t.Name, expr)
	case "list":
		return fmt.Sprintf("decList(%s, func(v any) (%s, error) { return %s })", expr, g.elemType(t.Elem, pkg), g.decodeElem(t.Elem, "v", pkg))
	case "map":
		return fmt.Sprintf("decMap(%s, func(v any) (%s, error) { return %s })", expr, g.elemType(t.Elem, pkg), g.decodeElem(t.Elem, "v", pkg))
	}
	panic("decode kind " + t.Kind)
}

// ---- validators.go -------------------------------------------------------------
