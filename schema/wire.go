package schema

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

type limitRow struct {
	Ident, Name, Env, Description, Value string
	IsFloat                              bool
	Field, GoType                        string // its LimitSet field
}

// limitField names a limit's LimitSet field and type from its wire name:
// *_secs is a time.Duration without the unit in its name, the port an int,
// every other limit (bytes, counts) an int64.
func limitField(name string) (field, goType string) {
	switch {
	case strings.HasSuffix(name, "_secs"):
		return goIdent(strings.TrimSuffix(name, "_secs")), "time.Duration"
	case name == "port":
		return "Port", "int"
	default:
		return goIdent(name), "int64"
	}
}

type eventRow struct{ Ident, Name, Schema string }

// frameRow is one binary frame type of x-frames.
type frameRow struct {
	Ident, Name, Payload string
	Code                 int
}

type settingRow struct {
	Name, Env, Default, Description string
	Aliases                         []string
}

type opRow struct {
	Ident, ID, Method, Pattern string
	Bearer, Idempotent         bool
	Errors                     []errorMediaRow
}

type errorMediaRow struct {
	Status int
	Media  string
}

func wireGo(node *yaml.Node, doc map[string]any) ([]byte, error) {
	data := struct {
		ProtocolVersion, DaemonVersion, VersionHeader, HookPrefix, Terminal string
		Events                                                              []eventRow
		FrameMedia, FrameLayout                                             string
		FrameHeader, FrameMaxPayload                                        int
		Frames                                                              []frameRow
		Limits                                                              []limitRow
		Settings                                                            []settingRow
		ReferenceEnv                                                        []string
		True, False                                                         []string
		Ops                                                                 []opRow
	}{
		ProtocolVersion: fmt.Sprint(doc["x-protocol-version"]),
		DaemonVersion:   asString(doc["x-daemon-version"]),
		VersionHeader:   asString(doc["x-version-header"]),
		HookPrefix:      asString(doc["x-hook-prefix"]),
	}
	// Sorted, so the generated event list does not follow map order.
	ssePaths := slices.Sorted(maps.Keys(asMap(doc["paths"])))
	for _, p := range ssePaths {
		item := asMap(doc["paths"])[p]
		for _, op := range asMap(item) {
			sse := asMap(asMap(op)["x-sse"])
			if sse == nil {
				continue
			}
			// The exec stream has a terminal event; the watch stream (issue
			// 21) has none and shares the gap event's name and shape.
			if t := asString(sse["terminal"]); t != "" {
				data.Terminal = t
			}
			for _, e := range sse["events"].([]any) {
				em := asMap(e)
				name := asString(em["event"])
				ref := asString(asMap(em["schema"])["$ref"])
				if i := slices.IndexFunc(data.Events, func(r eventRow) bool { return r.Name == name }); i >= 0 {
					if data.Events[i].Schema != ref {
						return nil, fmt.Errorf("SSE event %q has two payloads, %s and %s", name, data.Events[i].Schema, ref)
					}
					continue
				}
				data.Events = append(data.Events, eventRow{Ident: goIdent(name), Name: name, Schema: ref})
			}
		}
	}
	frames := asMap(doc["x-frames"])
	data.FrameMedia, data.FrameLayout = asString(frames["media_type"]), asString(frames["layout"])
	data.FrameHeader, _ = frames["header_bytes"].(int)
	data.FrameMaxPayload, _ = frames["max_payload_bytes"].(int)
	if data.FrameMedia == "" || data.FrameHeader != 13 || data.FrameMaxPayload <= 0 {
		return nil, fmt.Errorf("x-frames needs media_type, header_bytes 13 (type u8, offset u64, length u32) and max_payload_bytes")
	}
	for _, f := range asSlice(frames["types"]) {
		fm := asMap(f)
		code, ok := fm["code"].(int)
		if !ok || code < 0 || code > 255 {
			return nil, fmt.Errorf("x-frames: type %v has no uint8 code", fm["name"])
		}
		data.Frames = append(data.Frames, frameRow{Ident: goIdent(asString(fm["name"])), Name: asString(fm["name"]), Payload: asString(fm["payload"]), Code: code})
	}
	for name, l := range asMap(doc["x-limits"]) {
		lm := asMap(l)
		row := limitRow{Ident: goIdent(name), Name: name, Env: asString(lm["env"]), Description: asString(lm["description"])}
		row.Field, row.GoType = limitField(name)
		switch v := lm["value"].(type) {
		case int:
			row.Value = strconv.Itoa(v)
		case float64:
			row.Value = strconv.FormatFloat(v, 'f', -1, 64)
			row.IsFloat = true
		default:
			return nil, fmt.Errorf("x-limits.%s: value %v is not a number", name, v)
		}
		data.Limits = append(data.Limits, row)
	}
	sort.Slice(data.Limits, func(i, j int) bool { return data.Limits[i].Name < data.Limits[j].Name })
	if data.DaemonVersion == "" {
		return nil, fmt.Errorf("x-daemon-version is missing")
	}
	settings, err := settingRows(doc)
	if err != nil {
		return nil, err
	}
	data.Settings = settings
	if data.ReferenceEnv, err = referenceEnv(doc, data.Limits, settings); err != nil {
		return nil, err
	}
	booleans := asMap(doc["x-setting-booleans"])
	for _, v := range asSlice(booleans["true"]) {
		data.True = append(data.True, asString(v))
	}
	for _, v := range asSlice(booleans["false"]) {
		data.False = append(data.False, asString(v))
	}
	if len(data.True) == 0 || len(data.False) == 0 {
		return nil, fmt.Errorf("x-setting-booleans needs both a true and a false list")
	}
	ops, err := operations(node, doc)
	if err != nil {
		return nil, err
	}
	data.Ops = ops
	return renderGo("protocol", "wire.go.tmpl", data)
}

func settingRows(doc map[string]any) ([]settingRow, error) {
	var rows []settingRow
	for name, v := range asMap(doc["x-settings"]) {
		m := asMap(v)
		row := settingRow{Name: name, Env: asString(m["env"]), Default: fmt.Sprint(m["default"]), Description: asString(m["description"])}
		if row.Env == "" || row.Description == "" {
			return nil, fmt.Errorf("x-settings.%s: env and description are required", name)
		}
		for _, a := range asSlice(m["aliases"]) {
			row.Aliases = append(row.Aliases, asString(a))
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Name < rows[j].Name })
	return rows, nil
}

// referenceEnv checks that every name in x-reference-env has one home: the env
// of exactly one limit or setting. A name with none would be a reference
// setting silently ignored, the defect the list exists to prevent.
func referenceEnv(doc map[string]any, limits []limitRow, settings []settingRow) ([]string, error) {
	homes := map[string]int{}
	for _, l := range limits {
		if l.Env != "" {
			homes[l.Env]++
		}
	}
	for _, s := range settings {
		homes[s.Env]++
		for _, a := range s.Aliases {
			homes[a]++
		}
	}
	for env, n := range homes {
		if n > 1 {
			return nil, fmt.Errorf("environment variable %s is declared %d times across x-limits and x-settings", env, n)
		}
	}
	var out []string
	seen := map[string]bool{}
	for _, v := range asSlice(doc["x-reference-env"]) {
		env := asString(v)
		if homes[env] == 0 {
			return nil, fmt.Errorf("x-reference-env: %s is neither an x-limits env nor an x-settings env", env)
		}
		if seen[env] {
			return nil, fmt.Errorf("x-reference-env: %s is listed twice", env)
		}
		seen[env] = true
		out = append(out, env)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("x-reference-env is missing")
	}
	return out, nil
}

// operations reads each route's shared facts. Every operation must say
// whether it is idempotent (x-idempotent): a missing answer would default a
// client's retry decision silently.
func operations(node *yaml.Node, doc map[string]any) ([]opRow, error) {
	rs, err := routes(node, doc)
	if err != nil {
		return nil, err
	}
	paths := asMap(doc["paths"])
	var out []opRow
	for _, r := range rs {
		op := asMap(asMap(paths[r.Path])[strings.ToLower(r.Method)])
		idem, ok := op["x-idempotent"].(bool)
		if !ok {
			return nil, fmt.Errorf("%s %s (%s): x-idempotent must be true or false", r.Method, r.Path, r.OperationID)
		}
		row := opRow{Ident: goIdent(r.OperationID), ID: r.OperationID, Method: r.Method, Pattern: r.Path, Bearer: r.Auth == "bearer", Idempotent: idem}
		responses := asMap(op["responses"])
		for _, code := range mappingKeys(node, "paths", r.Path, strings.ToLower(r.Method), "responses") {
			status, err := strconv.Atoi(code)
			if err != nil || status < 400 {
				continue
			}
			var media []string
			for mt := range asMap(resolveRef(doc, responses[code])["content"]) {
				media = append(media, mt)
			}
			sort.Strings(media)
			row.Errors = append(row.Errors, errorMediaRow{Status: status, Media: strings.Join(media, ",")})
		}
		out = append(out, row)
	}
	return out, nil
}
