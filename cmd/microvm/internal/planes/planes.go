// Package planes opens the control planes `microvm` and its engine drive,
// the same way for both: the region the environment names, the platform over
// an in-process emulator, the agentd an image is built from. It exists so
// the engine (cmd/microvm/internal/engine) calls what the commands call
// instead of reaching back into the command through hooks.
//
// It must never parse a flag, print, or hold a workflow: the workflows are
// client/workflow's, and the flags are the command's.
package planes

import (
	"context"
	"debug/elf"
	"os"
	"strings"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/platform"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/taxonomy"
)

// RegionEnv are the variables that name the control plane's region when no
// flag does, in the order the AWS SDKs read them.
var RegionEnv = []string{"AWS_REGION", "AWS_DEFAULT_REGION"}

// EnvRegion is the region when nothing names one: AWS_REGION or
// AWS_DEFAULT_REGION (held to the measured set, since a variable cannot say
// "unlisted"), else the default. Its refusal names the command's flags, the
// names the engine's arguments mirror.
func EnvRegion(getenv func(string) string) (client.Region, error) {
	for _, name := range RegionEnv {
		v := getenv(name)
		if v == "" {
			continue
		}
		r, err := client.ParseRegion(v)
		if err != nil {
			return client.Region{}, client.Errorf(taxonomy.KindInvalidArg, taxonomy.RegionFinding,
				"%s=%s is not a region that carries MicroVMs (%s); pass --region with one that does, or --unlisted-region %s to use it anyway",
				name, ShellQuote(v), strings.Join(taxonomy.Regions, ", "), ShellQuote(v)).WithCause(err)
		}
		return r, nil
	}
	return client.ParseRegion(taxonomy.Regions[0])
}

// ShellQuote makes w one word for a POSIX shell.
func ShellQuote(w string) string {
	if w != "" && strings.Trim(w, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// EmulatorSide is what client/platform needs to know of a local control
// plane: its placeholder credentials and its pace; createBucket is set for
// the in-process one.
func EmulatorSide(createBucket func(string)) *platform.Emulator {
	return &platform.Emulator{Credentials: embedded.Credentials(), Wait: embedded.WaitOptions, CreateBucket: createBucket}
}

// Local is the platform over an emulator this process runs (its artifact
// bucket included), as --local opens it.
func Local(ctx context.Context, emu *embedded.Emulator, region client.Region, getenv func(string) string) (*platform.Platform, error) {
	cpc, err := emu.Control(ctx)
	if err != nil {
		return nil, err
	}
	return platform.Open(ctx, platform.Options{Region: region, Endpoint: emu.URL, Control: cpc,
		Emulator: EmulatorSide(emu.Server.CreateBucket), Getenv: getenv})
}

// Daemon is the agentd an image is built from: binary, else (against an
// emulator) the host agentd the emulator's guests run; emu is the
// in-process emulator, if any.
func Daemon(p *platform.Platform, emu *embedded.Emulator, binary, agentdFlag string, getenv func(string) string) (string, error) {
	switch {
	case binary != "":
		return binary, nil
	case emu != nil:
		return emu.Agentd, nil
	case p.Local():
		return embedded.FindAgentd(agentdFlag, getenv)
	}
	return "", client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingArm64Only,
		"no BINARY and no --image: a build on AWS bakes an aarch64 agentd into the image (make build writes bin/linux-arm64/agentd), or --image launches an existing one")
}

// GuestMachine is the ELF machine a daemon baked into an image must be for:
// the host's for an emulator, aarch64 (0) for the platform.
func GuestMachine(p *platform.Platform) elf.Machine {
	if p.Local() {
		return emulator.HostMachine()
	}
	return 0
}

// UnperformedWarnings are the warnings for a local Dockerfile build whose
// steps the emulator did not perform: inProcess says the emulator is this
// process's (else a running one, whose own build log says).
func UnperformedWarnings(inProcess bool, dockerfile string) []string {
	if !inProcess {
		return []string{"a running emulator performs this Dockerfile's RUN steps only with a base image for FROM: start it with `microvm emulator --base-image PATH` (or where it can pull FROM); its build log names any step it did not perform"}
	}
	b, err := os.ReadFile(dockerfile)
	if err != nil {
		return nil
	}
	steps, err := emulator.UnperformedSteps(b)
	if err != nil || len(steps) == 0 {
		return nil
	}
	var out []string
	for _, s := range steps {
		out = append(out, "the emulator does not perform this Dockerfile step; its guests run without it: "+s)
	}
	return append(out, "with no base image for FROM (--base-image, or a registry to pull it from), the guests run on this machine's system directories")
}
