package main

import (
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/setup"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// DoctorCmd checks every prerequisite of the lifecycle commands and says
// which one is wrong, one check per line.
type DoctorCmd struct {
	Binary string `help:"The agentd binary to check the architecture of (aarch64 for AWS, the host's for an emulator); unset, the one an emulator would run." type:"path" placeholder:"PATH"`
	InfraFlags
	LifecycleFlags
}

// check is one line of the report, api/cli.yaml's doctorCheck. A failing
// advisory check does not fail the doctor.
type check = cliapi.DoctorCheck

func pass(name, detail string) check { return check{Name: name, OK: true, Detail: detail, Fatal: true} }
func fail(name, detail, remedy string) check {
	return check{Name: name, Detail: detail, Fatal: true, Remedy: remedy}
}
func advisory(c check) check { c.Fatal = false; return c }

func (c *DoctorCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	var checks []check
	p, err := c.open(ctx, a)
	if p != nil {
		defer p.close()
	}
	switch {
	case err != nil && client.KindOf(err) == taxonomy.KindInvalidArg:
		return nil, err
	case err != nil:
		remedy := "pass --local to check this machine's emulator instead, or `microvm emulator` and AWS_ENDPOINT_URL for a running one"
		if c.Local {
			// --local was passed: the in-process emulator did not start.
			remedy = "make build (bin/agentd next to bin/microvm), or pass --agentd PATH"
		}
		checks = append(checks, fail("control-plane", err.Error(), remedy))
	}
	if p != nil {
		checks = append(checks, pass("region", fmt.Sprintf("%s is a region measured to carry MicroVMs", p.Region())))
		checks = append(checks, c.credentials(ctx, p))
		c.InfraFlags = c.InfraFlags.withSetup(a, p)
		checks = append(checks, c.infra(p)...)
		checks = append(checks, c.account(ctx, p)...)
		checks = append(checks, c.managedBases(ctx, p)...)
	}
	checks = append(checks, c.binary(p))
	if p != nil && p.Local() {
		checks = append(checks, localGuestChecks()...)
		checks = append(checks, c.guestInit(p))
	}
	ok := true
	for _, ch := range checks {
		ok = ok && (ch.OK || !ch.Fatal)
	}
	d := cliapi.DoctorData{Checks: checks, OK: ok}
	human := func(w io.Writer) error {
		status := func(ch check) string {
			switch {
			case !ch.OK && ch.Fatal:
				return "FAIL"
			case !ch.OK:
				return "note"
			}
			return "ok  "
		}
		if a.StdoutTTY {
			// A frame on a terminal; a fatal failure is the row the reader
			// must not skim past, so it is drawn in red.
			g := render.Grid{Headers: []string{"status", "check", "detail", "remedy"}}
			failing := 0
			for _, ch := range checks {
				if !ch.OK && ch.Fatal {
					failing++
				}
				g.Add(!ch.OK && ch.Fatal, strings.TrimSpace(status(ch)), ch.Name, ch.Detail, ch.Remedy)
			}
			g.Footer = fmt.Sprintf("%d checks, %d failing", len(checks), failing)
			return a.WriteGrid(w, g)
		}
		// One check per line: status, name, what was found, then what to do.
		width := 0
		for _, ch := range checks {
			width = max(width, len(ch.Name))
		}
		for _, ch := range checks {
			line := fmt.Sprintf("%s  %-*s  %s", status(ch), width, ch.Name, ch.Detail)
			if ch.Remedy != "" {
				line += " -- try: " + ch.Remedy
			}
			if _, err := fmt.Fprintln(w, line); err != nil {
				return err
			}
		}
		return nil
	}
	if !ok {
		return nil, &render.Failure{Err: client.Errorf(taxonomy.KindPrecondition, "", "a prerequisite is missing: see the failing checks"), Data: d, Human: human}
	}
	return &render.Result{Type: cliapi.TypeDoctor, Data: d, Human: human}, nil
}

// credentials asks STS, at STS's own endpoint, whose credentials sign: an
// emulator's STS answers for its placeholder principal. A control plane on
// this machine with STS on AWS needs no credentials for the control plane,
// so STS is not asked.
func (c *DoctorCmd) credentials(ctx context.Context, p *plane) check {
	who, stsLocal, needless, err := p.Identity(ctx)
	switch {
	case needless:
		return pass("credentials", "not needed: the control plane at "+p.Endpoint()+" is on this machine (an emulator)")
	case err != nil:
		return fail("credentials", err.Error(), "`aws sso login`, or set AWS_PROFILE or AWS_ACCESS_KEY_ID")
	case stsLocal:
		return pass("credentials", "not needed: STS at "+p.STSEndpoint()+" (an emulator) says "+who)
	}
	return pass("credentials", "STS says "+who)
}

func (c *DoctorCmd) infra(p *plane) []check {
	var out []check
	for _, v := range []struct{ name, value, env string }{
		{"bucket", c.Bucket, "MICROVM_BUCKET"},
		{"build-role", c.BuildRoleARN, "MICROVM_BUILD_ROLE_ARN"},
		{"execution-role", c.ExecutionRoleARN, "MICROVM_EXECUTION_ROLE_ARN"},
	} {
		switch {
		case v.value != "":
			out = append(out, pass(v.name, v.value))
		case p.Local():
			out = append(out, pass(v.name, "not needed against an emulator ($"+v.env+" unset)"))
		case v.name == "execution-role":
			out = append(out, advisory(fail(v.name, "unset ($"+v.env+")", "a MicroVM without one gets no AWS credentials of its own")))
		default:
			out = append(out, fail(v.name, "unset ($"+v.env+")", "export "+v.env+"=... (or pass --"+strings.ReplaceAll(v.name, "-role", "-role-arn")+")"))
		}
	}
	return out
}

// account checks the bucket and roles the environment (or setup.env)
// names: they exist, carry setup's settings, trust the service and allow
// what a build and a run need (client/setup, by IAM's policy simulation).
func (c *DoctorCmd) account(ctx context.Context, p *plane) []check {
	g := setup.Given{Bucket: c.Bucket, BuildRoleARN: c.BuildRoleARN, ExecutionRoleARN: c.ExecutionRoleARN}
	if g == (setup.Given{}) {
		return nil
	}
	o, err := p.SetupOptions(ctx, "", false)
	if err != nil {
		return []check{fail("account", err.Error(), "set AWS_ENDPOINT_URL to reach IAM and S3 where the control plane is")}
	}
	var out []check
	for _, ch := range setup.CheckAccount(ctx, o, g) {
		switch {
		case ch.OK:
			out = append(out, pass(ch.Name, ch.Detail))
		case ch.Advisory:
			out = append(out, advisory(fail(ch.Name, ch.Detail, ch.Remedy)))
		default:
			out = append(out, fail(ch.Name, ch.Detail, ch.Remedy))
		}
	}
	return out
}

func (c *DoctorCmd) managedBases(ctx context.Context, p *plane) []check {
	base := cplane.ManagedBaseImageARN(p.Region().String())
	var out []check
	items, err := p.ManagedImages(ctx)
	if err == nil {
		var others []string
		known := false
		for _, arn := range items {
			if arn == base {
				known = true
			} else {
				others = append(others, arn)
			}
		}
		switch {
		case known && len(others) == 0:
			out = append(out, pass("managed-bases", base+" is the only managed base in "+p.Region().String()))
		case known:
			out = append(out, advisory(fail("managed-bases", fmt.Sprintf("%s is known; also published: %s", base, strings.Join(others, ", ")),
				"informational: the listing names no docker reference or WORKDIR, so this client builds on the base it knows")))
		default:
			out = append(out, fail("managed-bases", fmt.Sprintf("%s is not published in %s", base, p.Region()),
				"check the region: the base this client builds on is not there"))
		}
	}
	if err != nil {
		out = append(out, advisory(fail("managed-bases", "listing the managed bases: "+err.Error(), "informational; a build does not depend on this read")))
	}
	names, err := p.ManagedImageVersions(ctx, base)
	if err == nil {
		out = append(out, pass("base-image-versions", fmt.Sprintf("%s: %s (pin one with build --base-image-version)", taxonomy.ManagedBaseImage, strings.Join(names, ", "))))
	}
	if err != nil {
		out = append(out, advisory(fail("base-image-versions", "listing the base's versions: "+err.Error(), "informational; an unpinned build floats on the service default")))
	}
	return out
}

func (c *DoctorCmd) binary(p *plane) check {
	local := p != nil && p.Local()
	path := c.Binary
	if path == "" {
		if !local {
			return advisory(fail("binary", "no --binary given, so its architecture was not checked", "microvm doctor --binary bin/linux-arm64/agentd (make build writes it)"))
		}
		found, err := embedded.FindAgentd(c.Agentd, p.a.Env)
		if err != nil {
			return fail("binary", err.Error(), "make build")
		}
		path = found
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fail("binary", err.Error(), "make build")
	}
	want := elf.EM_AARCH64
	if local {
		want = emulator.HostMachine()
	}
	if err := build.CheckDaemonFor(b, want); err != nil {
		return fail("binary", err.Error(), map[bool]string{true: "go build -o bin/ ./cmd/agentd (the emulator runs guests on this host)", false: "CGO_ENABLED=0 GOOS=linux GOARCH=arm64 go build ./cmd/agentd"}[local])
	}
	f, _ := elf.NewFile(bytes.NewReader(b))
	arch := want.String()
	if f != nil {
		f.Close()
	}
	return pass("binary", fmt.Sprintf("%s is an ELF executable for %s", path, arch))
}

// guestInit says whether local guests of the agentd the emulator would run
// start from the init installed beside it, or (slower, still confined) from
// the microvm binary.
func (c *DoctorCmd) guestInit(p *plane) check {
	found, err := embedded.FindAgentd(c.Agentd, p.a.Env)
	if err != nil {
		return advisory(fail("guest-init", err.Error(), "make build"))
	}
	init, err := emulator.GuestInitBeside(found)
	if err != nil {
		return advisory(fail("guest-init", "local guests start from the microvm binary, tens of milliseconds slower each: "+err.Error(), "make build (bin/microvm-guest-init beside bin/agentd)"))
	}
	return pass("guest-init", "local guests start from "+init)
}

// localGuestChecks say whether this host confines local guests, and which
// of their limits it can set (measured here, as this user: a separate
// `microvm emulator` run as another user may get others).
func localGuestChecks() []check {
	var out []check
	if err := emulator.CheckIsolation(); err != nil {
		out = append(out, fail("local-isolation", err.Error(), "see what is missing above; local guests are never started unconfined"))
	} else {
		out = append(out, pass("local-isolation", "guests get user, mount, PID, UTS, IPC, network and cgroup namespaces, a syscall filter and no new privileges"))
	}
	l := emulator.ProbeLimits()
	switch {
	case len(l.Missing) == 0:
		out = append(out, pass("local-limits", strings.Join(l.Applied, ", ")+" (the default size class)"))
	default:
		detail := "missing: " + strings.Join(l.Missing, "; ")
		if len(l.Applied) > 0 {
			detail = "in force: " + strings.Join(l.Applied, ", ") + "; " + detail
		}
		out = append(out, advisory(fail("local-limits", detail, "run under a systemd user slice with cgroup delegation (systemd-run --user --scope -p Delegate=yes microvm ...), or as root on a cgroup v1 host")))
	}
	if err := emulator.CheckEgress(); err != nil {
		out = append(out, advisory(fail("local-egress", err.Error(), "only needed for --egress")))
	} else {
		out = append(out, pass("local-egress", "--egress guests get slirp4netns, with the host's loopback out of reach"))
	}
	if err := emulator.CheckNetworkPolicy(); err != nil {
		out = append(out, advisory(fail("local-network-policy", err.Error(), "only needed for --network-allow and --secret")))
	} else {
		out = append(out, pass("local-network-policy", "--network-allow guests get a tun served by the emulator under their policy"))
	}
	return out
}
