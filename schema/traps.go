package schema

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"

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

// trapsView wires api/traps.yaml onto the model's operations, for
// sdktmpl/traps.go.tmpl. It fails
// when a name matches no operation input member: a renamed member must not
// turn a trap off.
func trapsView(root string, m *sdkModel) ([]trapOp, error) {
	raw, err := os.ReadFile(filepath.Join(root, "api", "traps.yaml"))
	if err != nil {
		return nil, err
	}
	var tf trapsFile
	if err := yaml.Unmarshal(raw, &tf); err != nil {
		return nil, fmt.Errorf("api/traps.yaml: %w", err)
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
			return nil, fmt.Errorf("api/traps.yaml: every trap needs a check, a finding and members_named")
		}
		for _, name := range trap.MembersNamed {
			if !matched[trap.Check+" "+name] {
				return nil, fmt.Errorf("api/traps.yaml: %s's member %q matches no operation input member (renamed in the model?); the trap would be off", trap.Check, name)
			}
		}
	}
	return ops, nil
}

// trapsSource is traps.go's body: trapsView laid out by its template.
func trapsSource(root string, m *sdkModel) (string, error) {
	ops, err := trapsView(root, m)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	if err := sdkTemplates.ExecuteTemplate(&b, "traps.go.tmpl", ops); err != nil {
		return "", err
	}
	return b.String(), nil
}
