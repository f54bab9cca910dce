package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"

	"github.com/alecthomas/kong"

	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// ManifestCmd publishes the surface. It always answers in JSON under --json
// and as two tables for a human; either way it is read from the parser at
// run time, so it cannot describe a flag the binary does not accept.
type ManifestCmd struct{}

// paramType names a parameter's type for an agent: four words, because a
// caller needs to tell a switch, a closed set, a path and a number from text.
func paramType(v *kong.Value) string {
	switch {
	case v.IsBool():
		return "boolean"
	case v.Enum != "":
		return "enum"
	case v.Tag != nil && v.Tag.Type == "path":
		return "path"
	}
	t := v.Target.Type()
	if t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32:
		return "integer"
	case reflect.Float64, reflect.Float32:
		return "number"
	}
	return "string"
}

func param(v *kong.Value, f *kong.Flag) cliapi.ManifestParam {
	p := cliapi.ManifestParam{
		Name:       v.Name,
		Type:       paramType(v),
		Required:   v.Required,
		Positional: f == nil,
		Repeatable: v.IsSlice(),
		Env:        []string{},
		Conflicts:  []string{},
		Help:       v.Help,
	}
	// A boolean is not a two-valued domain: publishing ["true","false"] on
	// every switch would bury the few closed sets the field exists to show.
	if v.Enum != "" && !v.IsBool() {
		p.Choices = v.EnumSlice()
	}
	if v.HasDefault && !v.IsBool() {
		d := v.Default
		p.Default = &d
	}
	if f != nil {
		p.Name = "--" + f.Name
		if f.Envs != nil {
			p.Env = f.Envs
		}
	}
	return p
}

// buildManifest walks the kong model. Every command and flag comes from the
// parser; response types come from api/cli.yaml; exit rows from the table.
func buildManifest(k *kong.Kong) cliapi.ManifestData {
	cmds := []cliapi.ManifestCommand{}
	for _, node := range k.Model.Children {
		if node.Type != kong.CommandNode || node.Hidden || node.Tag.Get("manifest") == "-" {
			continue
		}
		mc := cliapi.ManifestCommand{Name: node.Name, Summary: node.Help, SupportsJSON: true, Parameters: []cliapi.ManifestParam{}, ResponseKeys: []string{}}
		if resp, ok := cliapi.ResponseFor(node.Name); ok {
			mc.ResponseType, mc.ResponseKeys = resp.Type, resp.Keys
		}
		byXor := map[string][]string{}
		var flags []*kong.Flag
		for _, group := range node.AllFlags(true) {
			for _, f := range group {
				if f.Name == "help" {
					continue
				}
				flags = append(flags, f)
				for _, x := range f.Xor {
					byXor[x] = append(byXor[x], "--"+f.Name)
				}
			}
		}
		for _, f := range flags {
			p := param(f.Value, f)
			for _, x := range f.Xor {
				for _, other := range byXor[x] {
					if other != p.Name {
						p.Conflicts = append(p.Conflicts, other)
					}
				}
			}
			mc.Parameters = append(mc.Parameters, p)
		}
		for _, pos := range node.Positional {
			mc.Parameters = append(mc.Parameters, param(pos, nil))
		}
		// The alternate shape is published only while the flag that selects
		// it exists in the parser, so removing --stream removes the entry.
		for _, alt := range cliapi.Alternates {
			if alt.Command != node.Name {
				continue
			}
			for _, f := range flags {
				if "--"+f.Name == alt.When {
					keys := []string{}
					for _, r := range cliapi.Responses {
						if r.Type == alt.Type {
							keys = r.Keys
						}
					}
					mc.AlternateResponse = &cliapi.ManifestAlternate{When: alt.When, ResponseType: alt.Type, ResponseKeys: keys, Stdout: alt.Stdout}
				}
			}
		}
		cmds = append(cmds, mc)
	}
	exits := []cliapi.ExitRow{}
	for _, row := range taxonomy.ExitTable {
		var finding taxonomy.FindingID
		if k, ok := taxonomy.ErrorKindFromCode(row.Code); ok {
			finding = k.Finding()
		}
		// The finding's heading, as the reference publishes it, and its
		// stable slug beside it.
		exits = append(exits, cliapi.ExitRow{Exit: int64(row.Value), Code: row.Code, Meaning: row.Meaning, Finding: finding.Title(), FindingSlug: string(finding)})
	}
	var schema any
	if err := json.Unmarshal(cliapi.EnvelopeSchema, &schema); err != nil {
		schema = map[string]any{}
	}
	return cliapi.ManifestData{
		APIVersion:  cliapi.APIVersion,
		CLI:         "microvm",
		Version:     version,
		Commands:    cmds,
		ExitCodes:   exits,
		Envelope:    schema,
		Conventions: cliapi.Conventions,
	}
}

func (c *ManifestCmd) run(_ context.Context, a *app) (*render.Result, error) {
	data := buildManifest(a.parser)
	return &render.Result{
		Type:       cliapi.TypeManifest,
		Data:       data,
		AlwaysJSON: true,
		Human: func(w io.Writer) error {
			// Reached on a terminal only: a pipe gets the envelope.
			cmds := render.Grid{Headers: []string{"command", "type", "summary"}}
			for _, c := range data.Commands {
				cmds.Add(false, c.Name, c.ResponseType, c.Summary)
			}
			cmds.Footer = fmt.Sprintf("microvm %s: %d commands; `microvm manifest | jq` for every flag and domain", version, len(cmds.Rows))
			if err := a.WriteGrid(w, cmds); err != nil {
				return err
			}
			exits := render.Grid{Headers: []string{"exit", "code", "meaning", "finding"}}
			for _, e := range data.ExitCodes {
				exits.Add(false, strconv.FormatInt(e.Exit, 10), e.Code, e.Meaning, e.FindingSlug)
			}
			return a.WriteGrid(w, exits)
		},
		Dense: func(w io.Writer) error {
			for _, c := range data.Commands {
				fmt.Fprintf(w, "%s\t%s\t%d params\n", c.Name, c.ResponseType, len(c.Parameters))
			}
			return nil
		},
	}, nil
}
