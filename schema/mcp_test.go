package schema

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Wrong edits caught, each planted into a copy of api/mcp.yaml: a ref to a
// shape neither file declares, a doc naming a limit that does not exist (an
// agent would read a literal "{max_outptu_bytes}"), an optional result key
// (a client would have to guard for it), a nullable argument, an unknown
// key type (a schema that accepts anything), a shape shadowing
// api/cli.yaml's.
func TestMCPContractRefusals(t *testing.T) {
	for _, c := range []struct{ old, new, want string }{
		{"ref: fileEntry", "ref: fileEntri", `ref "fileEntri" names no shape`},
		{"at most {max_output_bytes} bytes\"", "at most {max_outptu_bytes} bytes\"", "{max_outptu_bytes} names no limit"},
		{"{name: exec_id, type: string}", "{name: exec_id, type: string, optional: true}", "a result key is always present"},
		{"{name: cwd, type: string, optional: true,", "{name: cwd, type: string, nullable: true,", "never nullable"},
		{"{name: egress, type: boolean,", "{name: egress, type: bool,", `unknown type "bool"`},
		{"  sandbox:\n", "  fileEntry:\n", "already api/cli.yaml's"},
	} {
		root := plantedRoot(t, "mcp.yaml", c.old, c.new)
		_, err := loadMCPModel(root)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("planted %q: %v, want a refusal saying %q", c.new, err, c.want)
		}
	}
}

// Every generated input and output schema compiles under a strict JSON
// Schema 2020-12 reader, is a closed object, and says what the YAML says:
// the size classes of api/errors.yaml, limits substituted into the text an
// agent reads, api/cli.yaml's fileEntry inlined. Wrong edits caught: a
// schema left open (additionalProperties), an optional argument marked
// required, a {limit} left unsubstituted, size_mib with no closed domain.
func TestMCPSchemas(t *testing.T) {
	outs, err := generateMCP("..")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Tools []struct {
			Name         string         `json:"name"`
			Description  string         `json:"description"`
			InputSchema  map[string]any `json:"inputSchema"`
			OutputSchema map[string]any `json:"outputSchema"`
		} `json:"tools"`
	}
	for _, o := range outs {
		if o.Path == "docs/mcp-tools.json" {
			if err := json.Unmarshal(o.Data, &doc); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Issue 30's nine, issue 47's sandbox_checkpoint, sandbox_fork and
	// sandbox_volume_sync, issue 48's sandbox_network_show and _set, and
	// issue 45's background commands (sandbox_exec_start, _output, _kill).
	if len(doc.Tools) != 18 {
		t.Fatalf("%d tools, want 18 (issue 30's 9, issue 47's 4, issue 48's 2, issue 45's 3)", len(doc.Tools))
	}
	byName := map[string]int{}
	for i, tool := range doc.Tools {
		byName[tool.Name] = i
		if strings.Contains(tool.Description, "{") {
			t.Errorf("%s: unsubstituted placeholder in %q", tool.Name, tool.Description)
		}
		for which, s := range map[string]map[string]any{"input": tool.InputSchema, "output": tool.OutputSchema} {
			if s["type"] != "object" || s["additionalProperties"] != false {
				t.Errorf("%s %s schema is not a closed object: %v", tool.Name, which, s)
			}
			raw, _ := json.Marshal(s)
			parsed, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
			if err != nil {
				t.Fatal(err)
			}
			c := jsonschema.NewCompiler()
			c.DefaultDraft(jsonschema.Draft2020)
			if err := c.AddResource("mem://"+tool.Name+"/"+which, parsed); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Compile("mem://" + tool.Name + "/" + which); err != nil {
				t.Errorf("%s %s schema does not compile: %v", tool.Name, which, err)
			}
		}
	}
	exec := doc.Tools[byName["sandbox_exec"]]
	if req := exec.InputSchema["required"].([]any); len(req) != 2 || req[0] != "sandbox_id" || req[1] != "command" {
		t.Errorf("sandbox_exec requires %v, want sandbox_id and command only", req)
	}
	if !strings.Contains(exec.Description, "65536") {
		t.Errorf("sandbox_exec's description does not name the output cap: %q", exec.Description)
	}
	size := doc.Tools[byName["sandbox_create"]].InputSchema["properties"].(map[string]any)["size_mib"].(map[string]any)
	if enum, _ := size["enum"].([]any); len(enum) != 5 || enum[0] != float64(512) {
		t.Errorf("size_mib's domain is %v, want api/errors.yaml's five baselines", size["enum"])
	}
	// A cli.yaml shape that nests others (networkState) is inlined whole:
	// a tool's schema has no $defs, so a $ref left in it dangles.
	for _, tool := range doc.Tools {
		if raw, _ := json.Marshal(tool); bytes.Contains(raw, []byte(`"$ref"`)) {
			t.Errorf("%s: a $ref is left in its schema", tool.Name)
		}
	}
	denied := doc.Tools[byName["sandbox_network_show"]].OutputSchema["properties"].(map[string]any)["network"].(map[string]any)["properties"].(map[string]any)["denied"].(map[string]any)["items"].(map[string]any)
	if props, _ := denied["properties"].(map[string]any); props["why"] == nil || denied["additionalProperties"] != false {
		t.Errorf("a denied connection is not api/cli.yaml's closed deniedConnection: %v", denied)
	}
	entry := doc.Tools[byName["sandbox_list_files"]].OutputSchema["properties"].(map[string]any)["entries"].(map[string]any)["items"].(map[string]any)
	if props, _ := entry["properties"].(map[string]any); props["symlinkTarget"] == nil || entry["additionalProperties"] != false {
		t.Errorf("a list entry is not api/cli.yaml's closed fileEntry: %v", entry)
	}
}
