// Command microvm is the CLI over the microvms client: it parses, calls the
// client, and renders. The platform is the library's: client/platform wires
// the control plane and the AWS services beside it, client/sandbox owns a
// MicroVM's lifecycle (by id too), client/kept remembers kept MicroVMs; the
// layering test refuses this package importing the control plane's SDK. It
// must never hold protocol or platform logic of its own, never write
// anything but one envelope to stdout under --json (the NDJSON of exec
// --stream and constants --emit-json are the two declared exceptions), and
// never choose an exit code except through an error kind and the generated
// exit table; its try: hints (hints.go) name something that can fix the
// failure.
package main

import (
	"context"
	"io"
	"os"
	"os/signal"
	"reflect"
	"strings"
	"syscall"

	"github.com/alecthomas/kong"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/cmd/microvm/internal/argv"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/localvm"
)

func main() {
	localvm.Init() // a re-executed guest stage never returns from here
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// kongExit carries kong's own exit (after --help or --version) out of the
// parser without os.Exit, so run stays the one place that decides the code.
type kongExit int

// run is the whole program; it returns the process exit status.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) (code int) {
	a := &app{IO: render.IO{Stdin: stdin, Stdout: stdout, Stderr: stderr, Env: os.Getenv}}
	a.StdoutTTY, a.StderrTTY = isTerminal(stdout), isTerminal(stderr)
	// Until kong has parsed, --json is read from the raw words, so that a parse
	// failure under --json is still an envelope.
	a.JSON = rawFlag(args, "--json")
	a.Dense = rawFlag(args, "--dense")

	defer func() {
		switch r := recover().(type) {
		case nil:
		case kongExit:
			code = int(r)
		default:
			// A panic in a handler is a bug in this CLI: report it through the
			// table's Unexpected row rather than as a Go stack on stdout.
			code = a.fail(client.Errorf(taxonomy.KindUnexpected, "", "internal error: %v", r))
		}
	}()

	cli := &CLI{}
	parser, err := kong.New(cli,
		kong.Name("microvm"),
		kong.Description("The CLI for AWS Lambda MicroVMs: attach to a VM's agentd, estimate cost, and publish the contract."),
		kong.Vars(vars(version)),
		kong.Writers(stdout, stderr),
		kong.Exit(func(c int) { panic(kongExit(c)) }),
	)
	if err != nil {
		return a.fail(client.Errorf(taxonomy.KindUnexpected, "", "building the parser: %v", err))
	}
	a.parser = parser
	protected, spelled := argv.ProtectBytes(argv.HoistFlags(parser, args))
	kctx, err := parser.Parse(protected)
	if err != nil {
		return a.fail(parseError(err))
	}
	if spelled {
		argv.RestoreBytes(reflect.ValueOf(cli))
	}
	a.JSON, a.Dense, a.Quiet = cli.JSON, cli.Dense, cli.Quiet
	for _, p := range kctx.Path {
		if p.Command != nil {
			a.command = p.Command.Name
			break
		}
	}
	cmd, ok := kctx.Selected().Target.Addr().Interface().(command)
	if !ok {
		return a.fail(client.Errorf(taxonomy.KindUnexpected, "", "%s has no handler", kctx.Command()))
	}
	res, err := cmd.run(ctx, a)
	if err != nil {
		return a.fail(err)
	}
	return a.Succeed(res)
}

// command is what every leaf of the tree implements.
type command interface {
	run(ctx context.Context, a *app) (*render.Result, error)
}

// parseError turns kong's refusal into the table's InvalidArg row, keeping
// kong's own message, and names the finding when a closed domain refused.
func parseError(err error) error {
	msg := err.Error()
	var finding taxonomy.FindingID
	// Only a closed-domain refusal names a finding: kong says "must be one
	// of" for an off-table value and "can't be used together" for the
	// region conflict; an unknown flag is a typo, not a measurement.
	closed := strings.Contains(msg, "must be one of") || strings.Contains(msg, "can't be used together")
	for flag, f := range flagFindings {
		if closed && (strings.Contains(msg, flag+" ") || strings.Contains(msg, flag+"=") || strings.Contains(msg, flag+":") || strings.HasSuffix(msg, flag)) {
			finding = f
		}
	}
	return client.Errorf(taxonomy.KindInvalidArg, finding, "%s", msg)
}

// rawFlag reports whether flag appears among the words before a "--".
func rawFlag(args []string, flag string) bool {
	for _, w := range args {
		if w == "--" {
			return false
		}
		if w == flag || w == flag+"=true" {
			return true
		}
	}
	return false
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
