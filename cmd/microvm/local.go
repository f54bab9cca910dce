package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// ConstantsCmd publishes what this client believes about the service.
type ConstantsCmd struct {
	EmitJSON bool `name:"emit-json" help:"Write the bare constants object instead of an envelope (the one non-envelope stdout write)."`
}

// constantsObject is every service constant under the key the reference
// CLI publishes it as (MODEL_API_VERSION, MICROVM_REGIONS, ...), so a drift
// checker written against either CLI reads this one; the keys this client
// adds are spelled the same way. docs/envelope.schema.json types each key.
func constantsObject() map[string]any {
	m := map[string]any{}
	for _, c := range cliapi.ServiceConstants {
		m[c.Key] = c.Value
	}
	var sizes []map[string]any
	for _, r := range taxonomy.SizeClasses {
		sizes = append(sizes, map[string]any{"baseline_mib": r.BaselineMiB, "baseline_vcpu": r.BaselineVCPU, "peak_mib": r.PeakMiB, "peak_vcpu": r.PeakVCPU})
	}
	m["SIZE_CLASSES"] = sizes
	m["DEFAULT_BASELINE_MIB"] = taxonomy.DefaultBaselineMiB
	m["MICROVM_REGIONS"] = taxonomy.Regions
	m["MICROVM_STATES"] = taxonomy.MicrovmStates
	m["TERMINAL_STATES"] = taxonomy.MicrovmTerminalStates
	m["DEAD_STATES"] = taxonomy.MicrovmDeadStates
	m["IMAGE_STATES"] = taxonomy.ImageStates
	m["MODEL_IMAGE_READY_STATES"] = taxonomy.ImageReadyStates
	m["BUILD_STATES"] = taxonomy.BuildStates
	m["ARCHITECTURES"] = []string{taxonomy.Architecture}
	return m
}

func (c *ConstantsCmd) run(_ context.Context, a *app) (*render.Result, error) {
	obj := constantsObject()
	if c.EmitJSON {
		// Declared in api/cli.yaml's conventions: a drift checker wants the
		// object itself, with nothing to unwrap.
		b, err := json.MarshalIndent(obj, "", "  ")
		if err != nil {
			return nil, err
		}
		a.Stdout.Write(append(b, '\n'))
		return &render.Result{Written: true}, nil
	}
	return &render.Result{
		Type: cliapi.TypeConstants,
		Data: cliapi.ConstantsData{Constants: obj},
		Human: func(w io.Writer) error {
			tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
			fmt.Fprintln(tw, "CONSTANT\tVALUE\tFINDING")
			for _, c := range cliapi.ServiceConstants {
				fmt.Fprintf(tw, "%s\t%v\t%s\n", c.Key, c.Value, c.Finding)
			}
			fmt.Fprintf(tw, "MICROVM_REGIONS\t%s\t%s\n", strings.Join(taxonomy.Regions, ","), taxonomy.RegionFinding)
			var mem []string
			for _, r := range taxonomy.SizeClasses {
				mem = append(mem, strconv.Itoa(r.BaselineMiB))
			}
			fmt.Fprintf(tw, "SIZE_CLASSES (baseline MiB)\t%s\t%s\n", strings.Join(mem, ","), taxonomy.SizeClassFinding)
			return tw.Flush()
		},
	}, nil
}

// DockerfileCmd prints the stanza that makes agentd the image's CMD.
type DockerfileCmd struct {
	From    string `help:"Image ref for the FROM line; it must match the base image the build names." default:"${default_from}" placeholder:"IMAGE_REF"`
	Port    int    `help:"Port agentd listens on inside the guest; reaches ENV AGENTD_PORT and EXPOSE." default:"${default_port}"`
	Workdir string `help:"Working directory to create and set; the managed base declares none." placeholder:"DIR"`
}

func (c *DockerfileCmd) run(_ context.Context, a *app) (*render.Result, error) {
	if c.Port < 1 || c.Port > 65535 {
		return nil, render.InvalidArg(taxonomy.FindingAgentPortAgreement, "--port %d is not a TCP port", c.Port)
	}
	if strings.ContainsAny(c.From, " \t\n") || c.From == "" {
		return nil, render.InvalidArg(taxonomy.FindingBaseImagesLackWorkdir, "--from %q is not an image reference", c.From)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# FROM must match the base image the build names (baseImageArn).\n")
	fmt.Fprintf(&b, "FROM %s\n", c.From)
	b.WriteString("COPY agentd /agentd\nRUN chmod 0755 /agentd\n")
	var workdir *string
	if c.Workdir != "" {
		fmt.Fprintf(&b, "RUN mkdir -p %s\nWORKDIR %s\n", c.Workdir, c.Workdir)
		workdir = &c.Workdir
	} else {
		b.WriteString("# No WORKDIR: the managed base sets none, so relative paths resolve against /.\n")
	}
	fmt.Fprintf(&b, "# AGENTD_PORT and the client's --port must agree.\nENV AGENTD_PORT=%d\nEXPOSE %d\n", c.Port, c.Port)
	fmt.Fprintf(&b, "# Marks the image as a MicroVM guest, so agentd repairs its machine identity.\nENV %s=1\n", protocol.EnvRepairIdentity)
	b.WriteString("# agentd is PID 1's command so nothing runs before the run hook delivers the token.\nENTRYPOINT []\nCMD [\"/agentd\"]\n")
	stanza := b.String()
	return &render.Result{
		Type: cliapi.TypeDockerfile,
		Data: cliapi.DockerfileData{
			Stanza: stanza, BaseImageName: taxonomy.ManagedBaseImage, BaseImageDockerRef: c.From,
			Port: int64(c.Port), Workdir: workdir,
		},
		Human: func(w io.Writer) error { _, err := io.WriteString(w, stanza); return err },
	}, nil
}

// runJSON is a ledger record as api/cli.yaml's run shape, each key present
// exactly where client/ledger writes it: created_at, updated_at, steps and
// closed always, the rest only when set.
func runJSON(r ledger.Run) cliapi.Run {
	stamp := func(t time.Time) *string { s := t.Format(time.RFC3339Nano); return &s }
	var steps []cliapi.RunStep // a record's "steps": null stays null
	if r.Steps != nil {
		steps = make([]cliapi.RunStep, 0, len(r.Steps))
	}
	for _, s := range r.Steps {
		steps = append(steps, cliapi.RunStep{Op: s.Op, Target: render.Present(s.Target), State: string(s.State), Error: render.Present(s.Error), At: *stamp(s.At)})
	}
	out := cliapi.Run{
		ID: r.ID, CreatedAt: stamp(r.CreatedAt), UpdatedAt: stamp(r.UpdatedAt),
		Region: render.Present(r.Region), Image: render.Present(r.Image), ImageARN: render.Present(r.ImageARN),
		ArtifactURI: render.Present(r.ArtifactURI), LogGroup: render.Present(r.LogGroup), MicrovmID: render.Present(r.MicrovmID),
		Steps: &steps, Closed: &r.Closed,
	}
	if r.ImageOwned {
		out.ImageOwned = &r.ImageOwned
	}
	if len(r.Leaked) > 0 {
		out.Leaked = &r.Leaked
	}
	if r.PID != 0 {
		pid := int64(r.PID)
		out.PID = &pid
	}
	return out
}
