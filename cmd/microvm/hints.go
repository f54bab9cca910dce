package main

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/taxonomy"
)

// diagnosisBudget bounds the one state read that explains a failure at an
// attached MicroVM's endpoint.
const diagnosisBudget = 10 * time.Second

// diagnosed replaces a failure at an attached MicroVM's endpoint that
// looks transient (or unreachable) with its cause when the MicroVM's state
// explains it: a suspended MicroVM is not "try again", it is "resume it".
func (a *app) diagnosed(ce *client.Error) *client.Error {
	if !a.attached || a.status == nil || (ce.Kind() != taxonomy.KindRetryable && !a.unreachable) {
		return ce
	}
	if wire, _ := ce.WireKind(); wire == taxonomy.WireAuthTokenMint {
		return ce
	}
	ctx, cancel := context.WithTimeout(context.Background(), diagnosisBudget)
	defer cancel()
	st, err := a.status(ctx)
	if err != nil {
		return ce
	}
	cause := st.Unavailable()
	if cause == nil {
		return ce
	}
	a.vmStatus, a.unreachable = &st, false
	return render.AsClientError(cause).WithCause(ce)
}

// suggestionsFor names what can fix a failure, in words a CLI user can
// type: a command, a flag, a variable. The library says what went wrong; the
// CLI says what to type next. A hint that could not fix the failure (doctor
// for a VM's state, --local when it was passed) is not given.
func (a *app) suggestionsFor(ce *client.Error, interrupted bool) []string {
	s := []string{}
	if st := a.vmStatus; st != nil {
		if st.State == sandbox.Suspended || st.State == sandbox.Suspending {
			return append(s, "microvm resume "+st.ID+", then run the same command again")
		}
		return append(s, "microvm ls lists the MicroVMs still alive; microvm run --keep launches a new one")
	}
	if a.unreachable {
		return append(s, "check --endpoint (or MICROVM_ENDPOINT): a MicroVM's endpoint is the bare host its launch reported, a local agentd's is http://127.0.0.1:PORT with --direct; then `microvm health`")
	}
	if wire, ok := ce.WireKind(); ok {
		switch wire {
		case taxonomy.WireUnauthorized:
			s = append(s, "check --agent-token (or MICROVM_AGENT_TOKEN): the daemon holds a different token")
		case taxonomy.WireNotBootstrapped:
			s = append(s, "the daemon has no token yet: wait for the run hook, then run the same command again")
		case taxonomy.WireTransport:
			s = append(s, "check --endpoint (or MICROVM_ENDPOINT) and that the VM is RUNNING (`microvm ls`), then run the same command again")
		case taxonomy.WireNotFound:
			if a.command == "cp" {
				s = append(s, "check the vm: path: it must exist on the VM; `microvm dir DIR` lists a directory")
			} else {
				s = append(s, "check the exec id: an acked exec is collected after its TTL; `microvm ps` lists the ones the daemon holds")
			}
		case taxonomy.WireExecTimeout:
			s = append(s, "the exec was left running: read it with `microvm exec --poll ID`, or raise --timeout")
		case taxonomy.WireOutputGap:
			s = append(s, "output was lost before it was read: use `microvm exec --stream` to read as it arrives")
		case taxonomy.WireAuthTokenMint:
			s = append(s, "the proxy token is minted through the control plane for --microvm-id: check --control-endpoint (or AWS_ENDPOINT_URL) and --region, then run the same command again")
		}
		return s
	}
	switch ce.Kind() {
	case taxonomy.KindInvalidArg:
		if strings.Contains(ce.Error(), "no kept MicroVM") {
			s = append(s, "microvm ls lists the MicroVMs this user launched; pass --endpoint and --agent-token for one launched elsewhere")
		}
		if a.command == "" {
			s = append(s, "microvm --help, or `microvm manifest` for every flag and its domain")
		} else {
			s = append(s, "microvm help "+a.command+", or `microvm manifest` for every flag and its domain")
		}
	case taxonomy.KindPrecondition:
		switch {
		case cplane.IsNotFound(ce):
			s = append(s, "check the MicroVM or image id and --region: `microvm ls` lists the live MicroVMs")
		case ce.Finding() == taxonomy.FindingArm64Only:
			s = append(s, "pass --local to build and run on this machine with no AWS account",
				"for AWS, pass the aarch64 agentd `make build` writes: bin/linux-arm64/agentd")
		case strings.Contains(ce.Error(), "no host agentd"):
			s = append(s, "make build (bin/agentd next to bin/microvm), or pass --agentd PATH")
		case strings.Contains(ce.Error(), "readable by others"):
			s = append(s, "chmod 600 the kept record, or pass --endpoint and --agent-token")
		case a.command == "cp" && strings.Contains(ce.Error(), "--parents"):
			s = append(s, "pass --parents to create the missing directories, or make them: microvm mkdir DIR")
		case !a.attached && a.parser != nil && hasCommand(a.parser, "doctor"):
			// doctor checks what a lifecycle command needs: region,
			// credentials, bucket, roles, bases, the daemon's architecture.
			s = append(s, "microvm doctor")
		}
	case taxonomy.KindTimeout:
		switch {
		case interrupted && a.command == "exec":
			s = append(s, "the exec was left running: `microvm exec --poll EXEC_ID` reads it, `microvm kill EXEC_ID` stops it")
		case interrupted:
			s = append(s, "nothing on the VM was stopped; run the same command again to finish")
		case a.command == "exec":
			s = append(s, "raise --timeout; nothing was killed", "`microvm kill EXEC_ID` stops an exec left running")
		}
	case taxonomy.KindInterrupted:
		s = append(s, "an exec left running is stopped with `microvm kill EXEC_ID`; a kept MicroVM with `microvm terminate MICROVM_ID`")
	case taxonomy.KindWindowClosed:
		s = append(s, "microvm run --keep launches a new one")
	case taxonomy.KindCredentials:
		switch {
		case ce.Finding() == taxonomy.FindingEndpointAuth:
			// The client's answer to a 403 on a session without a proxy
			// token, which only --direct builds.
			s = append(s, "drop --direct (and MICROVM_DIRECT): the endpoint is behind the platform proxy; pass --microvm-id so a proxy token is minted")
		case ce.Finding() == taxonomy.FindingUnsupportedRegion:
			s = append(s, "check --region first: an AccessDeniedException with a null message is the unsupported-region signature, not an IAM problem")
		case a.awsWithoutCredentials:
			if !a.attached {
				s = append(s, "pass --local to run everything on this machine, with no AWS account")
			}
			s = append(s, "serve a local control plane with `microvm emulator` and export AWS_ENDPOINT_URL=http://127.0.0.1:PORT (the address it prints)",
				"for AWS itself, give the SDK credentials: AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (`aws configure` writes a profile)")
		default:
			s = append(s, "give the AWS SDK credentials: AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (`aws configure` writes a profile)",
				"an AccessDeniedException with a null message is the unsupported-region signature, not an IAM problem: check --region first")
		}
	}
	return s
}

// hasCommand reports whether the parser has a top-level command name.
func hasCommand(k *kong.Kong, name string) bool {
	for _, n := range k.Model.Children {
		if n.Name == name {
			return true
		}
	}
	return false
}

// fail writes the failure envelope (or its human form) and returns the exit
// code, which is the error kind's row of the generated table and nothing else.
func (a *app) fail(err error) int {
	ce := render.AsClientError(err)
	if wire, _ := ce.WireKind(); a.attached && wire == taxonomy.WireTransport && nothingListens(ce) {
		// The client retried and gave up: nothing listens at the endpoint
		// (connection refused) or its name does not resolve. Running the
		// identical command again will not help until the endpoint is fixed
		// or the VM is up, so this is a missing prerequisite, not row 3.
		// data.kind still says Transport.
		ce = client.WireErrorf(taxonomy.WireTransport, "%s", ce.Error()).WithCause(ce)
		ce = client.Errorf(taxonomy.KindPrecondition, "", "nothing answers at the endpoint: %s", ce.Error()).WithCause(ce)
		a.unreachable = true
	}
	ce = a.diagnosed(ce)
	interrupted := false
	if a.attached && ce.Kind() == taxonomy.KindInterrupted {
		interrupted = true
		// ERR_INTERRUPTED means "after launch; teardown ran": an attached
		// command launched nothing and tears nothing down. Stopping its wait
		// is a client-side deadline the caller chose, and the exec (or the
		// file on the VM) is left as it was, which is ERR_TIMEOUT's row.
		ce = client.Errorf(taxonomy.KindTimeout, "", "interrupted: %s; nothing on the VM was stopped", ce.Error()).WithCause(ce)
	}
	var partial any
	var human func(io.Writer) error
	var extra []string
	var f *render.Failure
	if errors.As(err, &f) {
		partial, human, extra = f.Data, f.Human, f.Suggestions
	}
	env := render.FailureEnvelope(ce, partial)
	if m, ok := env.Data.(map[string]any); ok && a.unreachable {
		m["kind"] = taxonomy.WireTransport.String()
	}
	env.Suggestions = a.suggestionsFor(ce, interrupted)
	if len(extra) > 0 {
		env.Suggestions = append(append([]string{}, extra...), env.Suggestions...)
	}
	return a.WriteFailure(env, human)
}

// nothingListens reports a transport failure that retrying cannot fix:
// the connection was refused, or the host name does not resolve.
func nothingListens(err error) bool {
	var dns *net.DNSError
	return errors.Is(err, syscall.ECONNREFUSED) || (errors.As(err, &dns) && dns.IsNotFound)
}
