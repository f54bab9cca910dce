// Command agentd is the in-VM daemon of a Lambda MicroVM image, run as the
// image's CMD. It is configured only by environment (see api/openapi.yaml
// x-limits; AGENTD_PORT defaults to 9000) and logs JSON lines to stderr.
//
// Being the CMD matters twice: an exec with no cwd inherits this process's
// working directory, which is the image WORKDIR, and no other process in the VM
// has read the machine identity before startup repair replaces it.
package main

import (
	"context"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/microvms/microvms/agentd"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
	os.Exit(run(log))
}

func run(log *slog.Logger) int {
	cfg, warnings := agentd.LoadConfig(os.LookupEnv)
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
	// All interfaces: the platform's endpoint proxy terminates outside the VM
	// and forwards inward, so a loopback-only listener would be unreachable.
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

// logLevel reads AGENTD_LOG (debug, info, warn, error); info by default.
func logLevel() slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(os.Getenv("AGENTD_LOG"))); err != nil {
		return slog.LevelInfo
	}
	return l
}
