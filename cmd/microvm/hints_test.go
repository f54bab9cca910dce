package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
	"github.com/aws/smithy-go"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Every `try:` line the CLI can print, one case each: the failure, and what
// the line must name. Together the cases must produce every hint literal
// in suggestionsFor (checked from its source), and every command and flag a
// hint names must exist in the parser, so a hint can always be typed.
//
// Catches: a suspended MicroVM told to retry instead of `microvm resume
// ID`, `microvm doctor` offered where it cannot help (an attached VM's
// state), --local offered to an attached command, a missing credential
// chain without --local and `microvm emulator`, a not-found id without
// `microvm ls`, a hint naming a command or flag that does not exist, and a
// new hint added without a case here.
func TestEveryHintNamesAFix(t *testing.T) {
	k, err := kong.New(&CLI{}, kong.Name("microvm"), kong.Vars(vars(version)), kong.Exit(func(int) {}))
	if err != nil {
		t.Fatal(err)
	}
	notFound := client.Errorf(taxonomy.KindPrecondition, "", "GetMicrovm failed: HTTP 404 ResourceNotFoundException").
		WithCause(&smithy.GenericAPIError{Code: "ResourceNotFoundException", Message: "no such MicroVM"})
	suspended := sandbox.Status{ID: "mvm-1", State: sandbox.Suspended}
	dead := sandbox.Status{ID: "mvm-1", State: sandbox.Terminated}
	wire := func(w taxonomy.WireKind) *client.Error { return client.WireErrorf(w, "x") }
	kind := func(kd taxonomy.ErrorKind, f taxonomy.FindingID, msg string) *client.Error {
		return client.Errorf(kd, f, "%s", msg)
	}
	cases := []struct {
		name        string
		command     string
		attached    bool
		unreachable bool
		noAWS       bool
		vm          *sandbox.Status
		interrupted bool
		err         *client.Error
		want        []string // substrings of the hints, in order
		wantNot     []string
	}{
		{name: "suspended VM", command: "exec", attached: true, vm: &suspended, err: kind(taxonomy.KindPrecondition, taxonomy.FindingSuspendIsFreeze, "suspended"), want: []string{"microvm resume mvm-1"}, wantNot: []string{"doctor"}},
		{name: "dead VM", command: "exec", attached: true, vm: &dead, err: kind(taxonomy.KindPrecondition, "", "dead"), want: []string{"microvm ls", "microvm run --keep"}},
		{name: "nothing listens", command: "exec", attached: true, unreachable: true, err: kind(taxonomy.KindPrecondition, "", "refused"), want: []string{"--endpoint"}},
		{name: "wrong agent token", command: "exec", err: wire(taxonomy.WireUnauthorized), want: []string{"--agent-token"}},
		{name: "not bootstrapped", command: "exec", err: wire(taxonomy.WireNotBootstrapped), want: []string{"run the same command again"}},
		{name: "transport", command: "exec", err: wire(taxonomy.WireTransport), want: []string{"--endpoint", "microvm ls"}},
		{name: "cp path not found", command: "cp", err: wire(taxonomy.WireNotFound), want: []string{"vm: path", "microvm dir"}},
		{name: "exec id not found", command: "ack", err: wire(taxonomy.WireNotFound), want: []string{"microvm ps"}},
		{name: "exec timeout", command: "exec", err: wire(taxonomy.WireExecTimeout), want: []string{"microvm exec --poll", "--timeout"}},
		{name: "output gap", command: "exec", err: wire(taxonomy.WireOutputGap), want: []string{"microvm exec --stream"}},
		{name: "mint failed", command: "exec", err: wire(taxonomy.WireAuthTokenMint), want: []string{"--control-endpoint", "--region"}},
		{name: "not kept", command: "exec", err: kind(taxonomy.KindInvalidArg, "", "missing --endpoint; no kept MicroVM \"x\" is remembered"), want: []string{"microvm ls", "--agent-token", "microvm help exec"}},
		{name: "parse error", command: "", err: kind(taxonomy.KindInvalidArg, "", "unknown"), want: []string{"microvm --help", "microvm manifest"}},
		{name: "bad flag", command: "run", err: kind(taxonomy.KindInvalidArg, "", "bad"), want: []string{"microvm help run"}},
		{name: "id not found", command: "suspend", err: notFound, want: []string{"--region", "microvm ls"}, wantNot: []string{"doctor"}},
		{name: "no aarch64 daemon", command: "run", err: kind(taxonomy.KindPrecondition, taxonomy.FindingArm64Only, "no BINARY"), want: []string{"--local", "make build"}},
		{name: "no host agentd", command: "run", err: kind(taxonomy.KindPrecondition, "", "no host agentd for the emulator's guests"), want: []string{"make build", "--agentd"}, wantNot: []string{"--local"}},
		{name: "kept record readable by others", command: "exec", attached: true, err: kind(taxonomy.KindPrecondition, "", "kept: x is readable by others"), want: []string{"chmod 600", "--agent-token"}},
		{name: "cp parent missing", command: "cp", attached: true, err: kind(taxonomy.KindPrecondition, "", "pass --parents to create it"), want: []string{"--parents", "microvm mkdir"}},
		{name: "lifecycle precondition", command: "build", err: kind(taxonomy.KindPrecondition, "", "needs --build-role-arn"), want: []string{"microvm doctor"}},
		{name: "attached precondition", command: "stat", attached: true, err: kind(taxonomy.KindPrecondition, "", "something"), want: nil, wantNot: []string{"doctor"}},
		{name: "exec interrupted", command: "exec", interrupted: true, err: kind(taxonomy.KindTimeout, "", "x"), want: []string{"microvm exec --poll", "microvm kill"}},
		{name: "cp interrupted", command: "cp", interrupted: true, err: kind(taxonomy.KindTimeout, "", "x"), want: []string{"run the same command again"}},
		{name: "exec timeout client side", command: "exec", err: kind(taxonomy.KindTimeout, "", "x"), want: []string{"--timeout", "microvm kill"}},
		{name: "run interrupted", command: "run", err: kind(taxonomy.KindInterrupted, "", "x"), want: []string{"microvm kill", "microvm terminate"}},
		{name: "window closed", command: "resume", err: kind(taxonomy.KindWindowClosed, "", "x"), want: []string{"microvm run --keep"}},
		{name: "direct behind the proxy", command: "exec", err: kind(taxonomy.KindCredentials, taxonomy.FindingEndpointAuth, "x"), want: []string{"--direct", "--microvm-id"}},
		{name: "unsupported region", command: "run", err: kind(taxonomy.KindCredentials, taxonomy.FindingUnsupportedRegion, "x"), want: []string{"--region"}},
		{name: "no AWS credentials, lifecycle", command: "run", noAWS: true, err: kind(taxonomy.KindCredentials, "", "no AWS credentials"), want: []string{"--local", "microvm emulator", "AWS_PROFILE"}},
		{name: "no AWS credentials, attached", command: "exec", attached: true, noAWS: true, err: kind(taxonomy.KindCredentials, "", "no AWS credentials"), want: []string{"microvm emulator", "AWS_PROFILE"}, wantNot: []string{"--local"}},
		{name: "credentials refused", command: "run", err: kind(taxonomy.KindCredentials, "", "denied"), want: []string{"AWS_PROFILE", "--region"}},
	}
	var printed []string
	for _, c := range cases {
		a := &app{parser: k, command: c.command, attached: c.attached, unreachable: c.unreachable, awsWithoutCredentials: c.noAWS, vmStatus: c.vm}
		got := a.suggestionsFor(c.err, c.interrupted)
		joined := strings.Join(got, "\n")
		rest := joined
		for _, w := range c.want {
			i := strings.Index(rest, w)
			if i < 0 {
				t.Errorf("%s: the hints lack %q (in order):\n%s", c.name, w, joined)
				break
			}
			rest = rest[i+len(w):]
		}
		for _, w := range c.wantNot {
			if strings.Contains(joined, w) {
				t.Errorf("%s: a hint names %q, which cannot fix it:\n%s", c.name, w, joined)
			}
		}
		if len(c.want) == 0 && len(got) != 0 {
			t.Errorf("%s: want no hint, got %v", c.name, got)
		}
		printed = append(printed, got...)
	}
	// The stream's resume hint is a try: line too.
	printed = append(printed, (&ExecCmd{Command: []string{"grep", "-r", "x"}}).resumeHints("x-1", 12)...)
	checkTypable(t, k, printed)

	for _, lit := range hintLiterals(t) {
		found := false
		for _, p := range printed {
			if strings.Contains(p, lit) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no case prints the hint %q: add one above", lit)
		}
	}
}

// checkTypable holds every `microvm WORD` and --flag a hint names to the
// parser's commands and flags.
func checkTypable(t *testing.T, k *kong.Kong, hints []string) {
	t.Helper()
	flags := map[string]bool{"help": true}
	commands := map[string]bool{}
	var walk func(n *kong.Node)
	walk = func(n *kong.Node) {
		for _, f := range n.Flags {
			flags[f.Name] = true
		}
		for _, c := range n.Children {
			commands[c.Name] = true
			walk(c)
		}
	}
	walk(k.Model.Node)
	cmdRe, flagRe := regexp.MustCompile(`microvm ([a-z][a-z-]*)`), regexp.MustCompile(`(?:^|[ (\x60])--([a-z][a-z-]*)`)
	for _, h := range hints {
		for _, m := range cmdRe.FindAllStringSubmatch(h, -1) {
			if !commands[m[1]] {
				t.Errorf("hint %q names `microvm %s`, which is no command", h, m[1])
			}
		}
		for _, m := range flagRe.FindAllStringSubmatch(h, -1) {
			if !flags[m[1]] {
				t.Errorf("hint %q names --%s, which is no flag", h, m[1])
			}
		}
	}
}

// hintLiterals are the string literals suggestionsFor appends, each cut at
// its first formatted part.
func hintLiterals(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "hints.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var lits []string
	ast.Inspect(f, func(n ast.Node) bool {
		fn, ok := n.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "suggestionsFor" {
			return true
		}
		ast.Inspect(fn.Body, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			if id, ok := call.Fun.(*ast.Ident); !ok || id.Name != "append" {
				return true
			}
			for _, arg := range call.Args[1:] {
				for {
					b, ok := arg.(*ast.BinaryExpr)
					if !ok {
						break
					}
					arg = b.X
				}
				if bl, ok := arg.(*ast.BasicLit); ok && bl.Kind == token.STRING {
					if s, err := strconv.Unquote(bl.Value); err == nil {
						lits = append(lits, s)
					}
				}
			}
			return true
		})
		return false
	})
	if len(lits) < 25 {
		t.Fatalf("found %d hint literals in suggestionsFor; the scan is not reading it", len(lits))
	}
	return lits
}
