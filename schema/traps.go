package schema

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"text/template"

	"gopkg.in/yaml.v3"
)

// trapsFile is api/traps.yaml: which hand-written check inspects which
// operation input members.
type trapsFile struct {
	Traps []struct {
		Check        string   `yaml:"check"`
		Finding      string   `yaml:"finding"`
		MembersNamed []string `yaml:"members_named"`
	} `yaml:"traps"`
}

// trapCall is one generated call: check(op, field, in.Field).
type trapCall struct {
	Check, Op, Field string
}

// trapOp is one operation's calls, in api/traps.yaml's order.
type trapOp struct {
	Name  string
	Calls []trapCall
}

var trapsTemplate = template.Must(template.New("traps").Parse(`
// checkTraps runs the measured-trap checks api/traps.yaml wires to params'
// operation, each on its typed input member; the first refusal is returned.
func checkTraps(params any) error {
	switch in := params.(type) {
{{- range .}}
	case *{{.Name}}Input:
{{- range .Calls}}
		if err := {{.Check}}({{printf "%q" .Op}}, {{printf "%q" .Field}}, in.{{.Field}}); err != nil {
			return err
		}
{{- end}}
{{- end}}
	}
	return nil
}
`))

// trapsSource wires api/traps.yaml onto the model's operations. It fails
// when a name matches no operation input member: a renamed member must not
// turn a trap off.
func trapsSource(root string, m *sdkModel) (string, error) {
	raw, err := os.ReadFile(filepath.Join(root, "api", "traps.yaml"))
	if err != nil {
		return "", err
	}
	var tf trapsFile
	if err := yaml.Unmarshal(raw, &tf); err != nil {
		return "", fmt.Errorf("api/traps.yaml: %w", err)
	}
	var ops []trapOp
	matched := map[string]bool{}
	for _, op := range m.Ops {
		t := trapOp{Name: op.Name}
		for _, trap := range tf.Traps {
			for _, mem := range op.Input.Members {
				if slices.Contains(trap.MembersNamed, mem.Wire) {
					t.Calls = append(t.Calls, trapCall{Check: trap.Check, Op: op.Name, Field: mem.GoName})
					matched[trap.Check+" "+mem.Wire] = true
				}
			}
		}
		if len(t.Calls) > 0 {
			ops = append(ops, t)
		}
	}
	for _, trap := range tf.Traps {
		if trap.Check == "" || trap.Finding == "" || len(trap.MembersNamed) == 0 {
			return "", fmt.Errorf("api/traps.yaml: every trap needs a check, a finding and members_named")
		}
		for _, name := range trap.MembersNamed {
			if !matched[trap.Check+" "+name] {
				return "", fmt.Errorf("api/traps.yaml: %s's member %q matches no operation input member (renamed in the model?); the trap would be off", trap.Check, name)
			}
		}
	}
	var b bytes.Buffer
	if err := trapsTemplate.Execute(&b, ops); err != nil {
		return "", err
	}
	return b.String(), nil
}
