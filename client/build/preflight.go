package build

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/dockerfile/shell"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Check is what a caller's Dockerfile is checked against: the values the
// create call and the session will use, which the Dockerfile must agree with.
type Check struct {
	// Base defaults to ManagedBase.
	Base Base
	// Port is the hooks.port the create call sends; zero means
	// taxonomy.DefaultAgentPort.
	Port int
	// IdleTimeout is how long the client's SSE reader tolerates silence;
	// zero means client.DefaultIdleTimeout.
	IdleTimeout time.Duration
	// RepairIdentity is true when the create call grants the capabilities
	// identity repair needs; the image must then tell agentd it is a guest.
	RepairIdentity bool
}

// Preflight refuses a Dockerfile whose image could not work with this client,
// before any upload or AWS call. Each refusal is an InvalidArg *client.Error
// naming the finding that measured the failure it prevents, because every one
// of these mistakes otherwise surfaces a build later as a CREATE_FAILED or a
// run-hook timeout that names none of them.
//
// The Dockerfile is read with buildkit's own parser, so line continuations,
// comments, lowercase keywords, both ENV spellings, quoting and ARG
// substitution mean what they mean to the builder. Only the final stage and
// the stages it is built FROM are judged: that is the image that runs.
func Preflight(dockerfile []byte, c Check) error {
	if c.Base == (Base{}) {
		c.Base = ManagedBase()
	}
	if c.Port == 0 {
		c.Port = taxonomy.DefaultAgentPort
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = client.DefaultIdleTimeout
	}
	res, err := parser.Parse(bytes.NewReader(dockerfile))
	if err != nil {
		return client.Errorf(taxonomy.KindInvalidArg, "", "the Dockerfile does not parse: %w", err)
	}
	img, err := finalImage(res)
	if err != nil {
		return err
	}
	if err := checkFrom(img, c.Base); err != nil {
		return err
	}
	if err := checkWorkdir(img, c.Base); err != nil {
		return err
	}
	if err := checkPort(img, c.Port); err != nil {
		return err
	}
	if err := checkCmd(img); err != nil {
		return err
	}
	if err := checkKeepalive(img, c.IdleTimeout); err != nil {
		return err
	}
	return checkRepairIdentity(img, c.RepairIdentity)
}

// image is the final stage's lineage: the FROM reference it is rooted in and
// every instruction that shaped it, root stage first.
type image struct {
	from  string // the root stage's FROM reference, ARGs expanded
	instr []*parser.Node
	lex   *shell.Lex
}

// stage is one FROM and the instructions after it.
type stage struct {
	ref, alias string
	instr      []*parser.Node
}

func finalImage(res *parser.Result) (*image, error) {
	lex := shell.NewLex(res.EscapeToken)
	var globals []string // ARG defaults declared before the first FROM
	var stages []*stage
	for _, n := range res.AST.Children {
		switch strings.ToLower(n.Value) {
		case "from":
			s := &stage{}
			if n.Next == nil {
				return nil, fromErr("a FROM with no image")
			}
			ref, unmatched, err := lex.ProcessWord(n.Next.Value, shell.EnvsFromSlice(globals))
			if err != nil || len(unmatched) > 0 {
				// An ARG with no default is supplied at build time, so the base
				// the build will use cannot be known here.
				return nil, fromErr("FROM %s uses a build argument with no default, so the base cannot be checked; write the reference literally", n.Next.Value)
			}
			s.ref = ref
			if as := n.Next.Next; as != nil && strings.EqualFold(as.Value, "as") && as.Next != nil {
				s.alias = strings.ToLower(as.Next.Value)
			}
			stages = append(stages, s)
		case "arg":
			if len(stages) == 0 && n.Next != nil {
				if k, v, ok := strings.Cut(n.Next.Value, "="); ok {
					globals = append(globals, k+"="+v)
				}
			}
		default:
			if len(stages) > 0 {
				stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, n)
			}
		}
	}
	if len(stages) == 0 {
		// The build would fail on it too, but only after an upload and a
		// billable create.
		return nil, fromErr("the Dockerfile has no FROM")
	}
	// Walk from the final stage back through "FROM <earlier stage>" links.
	chain := []*stage{stages[len(stages)-1]}
	for i := len(stages) - 1; ; {
		cur := chain[len(chain)-1]
		j := -1
		for k := i - 1; k >= 0; k-- {
			if stages[k].alias != "" && stages[k].alias == strings.ToLower(cur.ref) {
				j = k
				break
			}
		}
		if j < 0 {
			break
		}
		chain = append(chain, stages[j])
		i = j
	}
	img := &image{from: chain[len(chain)-1].ref, lex: lex}
	for k := len(chain) - 1; k >= 0; k-- {
		img.instr = append(img.instr, chain[k].instr...)
	}
	return img, nil
}

func fromErr(format string, args ...any) error {
	return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingBaseImageDockerRef, format, args...)
}

func checkFrom(img *image, b Base) error {
	if img.from == b.DockerRef {
		return nil
	}
	return fromErr("the Dockerfile builds FROM %s but base image %s pairs with FROM %s; the build runs on the base baseImageArn names, so the two must be the same image", img.from, b.Image, b.DockerRef)
}

func checkWorkdir(img *image, b Base) error {
	if b.Workdir != "" {
		return nil
	}
	for _, n := range img.instr {
		if strings.EqualFold(n.Value, "workdir") && n.Next != nil && strings.TrimSpace(n.Next.Value) != "" {
			return nil
		}
	}
	return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingBaseImagesLackWorkdir,
		"base image %s declares no WORKDIR and the Dockerfile sets none, so agentd and every exec without a cwd would run in /; add a WORKDIR line", b.Image)
}

// envValue is the last value the image's ENV lines give key, with quoting
// removed and earlier ENVs substituted. ok is false when nothing sets it;
// exact is false when the value depends on something unknown here.
func envValue(img *image, key string) (val string, ok, exact bool) {
	var env []string
	for _, n := range img.instr {
		if !strings.EqualFold(n.Value, "env") {
			continue
		}
		// The parser yields (key, value, separator) triples.
		for k := n.Next; k != nil && k.Next != nil; {
			v := k.Next
			word, unmatched, err := img.lex.ProcessWord(v.Value, shell.EnvsFromSlice(env))
			if err != nil {
				word = v.Value
			}
			env = append(env, k.Value+"="+word)
			if k.Value == key {
				val, ok, exact = word, true, err == nil && len(unmatched) == 0
			}
			k = v.Next
			if k != nil && (k.Value == "=" || k.Value == "") {
				k = k.Next
			}
		}
	}
	return val, ok, exact
}

func checkPort(img *image, port int) error {
	v, ok, exact := envValue(img, "AGENTD_PORT")
	if ok && !exact {
		return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingAgentPortAgreement,
			"AGENTD_PORT is set from a build argument, so it cannot be checked against hooks.port=%d; set ENV AGENTD_PORT=%d literally", port, port)
	}
	got := taxonomy.DefaultAgentPort
	if ok {
		// agentd ignores an unparseable value and keeps its default, so an
		// unparseable value is the default here too.
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 && n < 65536 {
			got = n
		}
	}
	if got == port {
		return nil
	}
	how := "sets ENV AGENTD_PORT=" + v
	if !ok {
		how = "sets no AGENTD_PORT, so agentd listens on its default " + strconv.Itoa(taxonomy.DefaultAgentPort)
	}
	return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingAgentPortAgreement,
		"the Dockerfile %s but the create call sends hooks.port=%d; the build dials its ready hook on hooks.port, so the image would fail with a clean build log naming no port; set ENV AGENTD_PORT=%d", how, port, port)
}

// last is the image's last instruction named kw, or nil.
func last(img *image, kw string) *parser.Node {
	var found *parser.Node
	for _, n := range img.instr {
		if strings.EqualFold(n.Value, kw) {
			found = n
		}
	}
	return found
}

func isJSON(n *parser.Node) bool { return n.Attributes["json"] }

func checkCmd(img *image) error {
	f := taxonomy.FindingDaemonIsTheCmd
	if ep := last(img, "entrypoint"); ep != nil && (!isJSON(ep) || ep.Next != nil) {
		return client.Errorf(taxonomy.KindInvalidArg, f,
			"the Dockerfile's %q turns CMD into its arguments, so agentd never starts and the build's ready hook goes unanswered; use ENTRYPOINT [] with CMD [%q]", ep.Original, DaemonPath)
	}
	cmd := last(img, "cmd")
	if cmd == nil || cmd.Next == nil {
		return client.Errorf(taxonomy.KindInvalidArg, f,
			"the Dockerfile sets no CMD, so the base image's default process runs instead of agentd; add ENTRYPOINT [] and CMD [%q]", DaemonPath)
	}
	if !isJSON(cmd) {
		// The shell form runs /bin/sh -c as the process, which leaves a shell
		// between the platform's signals and agentd.
		return client.Errorf(taxonomy.KindInvalidArg, f,
			"the Dockerfile's %q is the shell form, which makes /bin/sh the container's process; use the exec form CMD [%q]", cmd.Original, DaemonPath)
	}
	return nil
}

func checkKeepalive(img *image, idle time.Duration) error {
	v, ok, _ := envValue(img, "AGENTD_SSE_KEEPALIVE_SECS")
	if !ok {
		return nil // agentd's default is well under any idle timeout this client uses
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || secs <= 0 {
		return nil // agentd ignores the value and keeps its default
	}
	if time.Duration(secs*float64(time.Second)) < idle {
		return nil
	}
	// Equality is refused too: a keepalive exactly at the timeout races it.
	return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingKeepaliveUnderIdleTimeout,
		"the Dockerfile sets AGENTD_SSE_KEEPALIVE_SECS=%s but this client gives up on a silent stream after %s; every quiet exec would look dead. Keep the keepalive under the idle timeout, or raise the client's idle timeout above it", v, idle)
}

// checkRepairIdentity refuses an image built with the capabilities identity
// repair needs (additionalOsCapabilities ALL) whose agentd is never told it is
// a guest: it would run widened for nothing, with every VM restored from the
// snapshot sharing one machine-id. agentd repairs only when
// AGENTD_REPAIR_IDENTITY (or its older spelling) is true, and off wins when
// either says false, so both are read as agentd reads them.
func checkRepairIdentity(img *image, granted bool) error {
	if !granted {
		return nil
	}
	on, off := false, ""
	for _, key := range []string{protocol.EnvRepairIdentity, "AGENTD_IDENTITY_REPAIR"} {
		v, ok, exact := envValue(img, key)
		if !ok {
			continue
		}
		if !exact {
			return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingGuestNotDetectable,
				"%s is set from a build argument, so whether agentd repairs identity cannot be checked; set ENV %s=1 literally", key, protocol.EnvRepairIdentity)
		}
		w := strings.ToLower(strings.TrimSpace(v))
		switch {
		case slices.Contains(protocol.SettingTrue, w):
			on = true
		case slices.Contains(protocol.SettingFalse, w):
			off = key + "=" + v
		}
	}
	if on && off == "" {
		return nil
	}
	why := "does not set " + protocol.EnvRepairIdentity + " to a true value"
	if off != "" {
		why = "sets " + off
	}
	return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingGuestNotDetectable,
		"the build grants the capabilities identity repair needs, but the Dockerfile %s, so agentd would never repair and every VM from the snapshot would share one machine-id; set ENV %s=1 (the generated stanza does), or build without identity repair", why, protocol.EnvRepairIdentity)
}
