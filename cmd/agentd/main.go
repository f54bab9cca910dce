// Command agentd is the in-VM daemon of a Lambda MicroVM image, run as the
// image's CMD. It is configured only by environment (api/openapi.yaml
// x-limits and x-settings; `agentd --help` lists them) and logs JSON lines to
// stderr. Its only arguments are --help and --version, which print and exit
// without reading any setting, binding a port or touching the machine.
//
// Being the CMD matters twice: an exec with no cwd inherits this process's
// working directory, which is the image WORKDIR, and no other process in the VM
// has read the machine identity before startup repair replaces it.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/microvms/microvms/agentd"
	"github.com/microvms/microvms/gen/protocol"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run decides on the arguments before anything else, so --help on a
// developer's machine is only ever a print.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "-h", "-help", "--help", "help":
			if len(args) == 1 {
				usage(stdout)
				return 0
			}
		case "-V", "-v", "-version", "--version", "version":
			if len(args) == 1 {
				fmt.Fprintf(stdout, "agentd %s (protocol v%s)\n", agentd.Version, protocol.ProtocolVersion)
				return 0
			}
		}
		fmt.Fprintf(stderr, "agentd: unexpected argument %q; agentd is configured by environment only\n\n", strings.Join(args, " "))
		usage(stderr)
		return 2
	}
	return serve(stderr)
}

func serve(stderr io.Writer) int {
	cfg, warnings := agentd.LoadConfig(os.LookupEnv)
	log := slog.New(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	for _, w := range warnings {
		// Not fatal: a daemon that refuses to start strands the VM with no way in.
		log.Warn("configuration value ignored", "reason", w)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	srv, err := agentd.NewServer(cfg, log)
	if err != nil {
		log.Error("cannot build the daemon", "err", err.Error())
		return 1
	}
	// Every interface unless AGENTD_LISTEN narrows it: the platform's endpoint
	// proxy terminates outside the VM and forwards inward.
	ln, err := net.Listen("tcp", cfg.ListenAddr())
	if err != nil {
		log.Error("cannot listen", "addr", cfg.ListenAddr(), "err", err.Error())
		return 1
	}
	log.Info("agentd listening", "addr", ln.Addr().String(), "version", agentd.Version)
	if err := srv.Serve(ctx, ln); err != nil {
		log.Error("serve failed", "err", err.Error())
		return 1
	}
	log.Info("agentd stopped")
	return 0
}

// usage lists every setting from the generated contract, so it cannot name a
// variable the daemon does not read.
func usage(w io.Writer) {
	fmt.Fprintf(w, `agentd %s: the in-VM daemon of a Lambda MicroVM image (wire protocol v%s).

Usage:
  agentd             serve; run as the image's CMD
  agentd --help      print this and exit
  agentd --version   print the version and exit

Configured by environment only. Identity repair rewrites this machine's
machine-id, hostname and boot_id, so it runs only with AGENTD_REPAIR_IDENTITY=1,
which the generated Dockerfile stanza sets (docs/PLATFORM.md).
Names marked * are read by the reference daemon too.

`, agentd.Version, protocol.ProtocolVersion)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  VARIABLE\tDEFAULT\tMEANING")
	mark := func(env string) string {
		if slices.Contains(protocol.ReferenceEnv, env) {
			return env + " *"
		}
		return env
	}
	for _, s := range protocol.Settings {
		def := s.Default
		if def == "" {
			def = "(unset)"
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark(s.Env), def, s.Description)
		for _, a := range s.Aliases {
			fmt.Fprintf(tw, "  %s\t\tolder spelling of %s\n", a, s.Env)
		}
	}
	for _, l := range protocol.Limits {
		if l.Env == "" {
			continue
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", mark(l.Env), strconv.FormatFloat(l.Default, 'f', -1, 64), l.Description)
	}
	_ = tw.Flush()
}
