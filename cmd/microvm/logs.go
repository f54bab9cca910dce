package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/cliapi"
)

// LogsCmd reads an image's build log group.
type LogsCmd struct {
	ImageName string `arg:"" name:"image-name" help:"The image whose build log group (/aws/lambda-microvms/<image-name>) to read."`
	Limit     int    `help:"Most lines to read, oldest first." default:"1000"`
	LifecycleFlags
}

func (c *LogsCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	if c.Limit < 1 {
		return nil, render.InvalidArg("", "--limit must be at least 1, got %d", c.Limit)
	}
	group := build.LogGroup(c.ImageName)
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	lines, err := p.ReadLogGroup(ctx, group, c.Limit)
	if err != nil {
		return nil, err
	}
	d := cliapi.LogsData{LogGroup: group, Lines: lines}
	return &render.Result{Type: cliapi.TypeLogs, Data: d, Human: func(w io.Writer) error {
		if len(d.Lines) == 0 {
			_, err := fmt.Fprintf(w, "%s holds no lines\n", group)
			return err
		}
		for _, l := range d.Lines {
			fmt.Fprintln(w, l)
		}
		return nil
	}}, nil
}

// EmulatorCmd serves the emulated control plane in the foreground.
type EmulatorCmd struct {
	Listen    string `help:"Loopback address to serve on; port 0 picks a free one, printed on stderr." default:"127.0.0.1:4590" placeholder:"HOST:PORT"`
	StateDir  string `name:"state-dir" help:"Where the emulator keeps what it unpacks from local artifacts; unset, a temporary directory removed on exit." placeholder:"DIR" type:"path"`
	Agentd    string `name:"agentd" help:"The host agentd guests run when an image carries none; unset: $MICROVM_AGENTD, then next to the microvm executable, then PATH." placeholder:"PATH" type:"path"`
	GuestLog  bool   `name:"guest-log" help:"Copy the guests' agentd log lines to stderr."`
	BaseImage string `name:"base-image" help:"The image every build's Dockerfile FROM stands for, as an OCI image layout directory or a docker-save tarball (offline machines); unset, FROM is pulled from its registry with your Docker credentials." placeholder:"PATH" type:"path"`
	Bucket    string `help:"An S3 bucket the emulator's S3 slice holds from the start, for builds that upload their artifact to it (AWS_ENDPOINT_URL routes S3 here too)." env:"MICROVM_BUCKET" placeholder:"BUCKET"`
	RegionFlags
}

func (c *EmulatorCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	if c.BaseImage != "" {
		if err := checkBaseImagePath(c.BaseImage); err != nil {
			return nil, err
		}
	}
	region := client.USEast1
	if r, ok, err := c.flagRegion(); err != nil {
		return nil, err
	} else if ok {
		region = r
	}
	var guestLog io.Writer
	if c.GuestLog {
		guestLog = a.Stderr
	}
	// SIGHUP ends it too, so closing its terminal stops every guest.
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	var buckets []string
	if c.Bucket != "" {
		buckets = append(buckets, c.Bucket)
	}
	emu, err := embedded.Start(ctx, embedded.Options{Listen: c.Listen, StateDir: c.StateDir, Agentd: c.Agentd, Region: region, GuestLog: guestLog, Getenv: a.Env, Buckets: buckets, BaseImage: c.BaseImage,
		Warn: func(msg string) { a.Warn("%s", msg) }})
	if err != nil {
		return nil, err
	}
	defer emu.Close()
	// Not progress: the address is what the user came for, so --quiet keeps it.
	fmt.Fprintf(a.Stderr, "microvm emulator: serving Lambda MicroVMs (%s) with slices of S3, CloudWatch Logs and STS at %s\n", region, emu.URL)
	fmt.Fprintf(a.Stderr, "  point other commands at it:  export AWS_ENDPOINT_URL=%s\n", emu.URL)
	fmt.Fprintf(a.Stderr, "  (AWS_ENDPOINT_URL_LAMBDA_MICROVMS routes only the control plane; logs and S3 builds then go to AWS)\n")
	if c.Bucket != "" {
		fmt.Fprintf(a.Stderr, "  bucket s3://%s is ready for build artifacts\n", c.Bucket)
	}
	fmt.Fprintf(a.Stderr, "  guests run %s; Ctrl-C stops the emulator and every guest\n", emu.Agentd)
	<-ctx.Done()
	emu.Close()
	d := cliapi.EmulatorData{Endpoint: emu.URL, Agentd: emu.Agentd}
	if c.StateDir != "" {
		d.StateDir = &c.StateDir
	}
	return &render.Result{Type: cliapi.TypeEmulator, Data: d, Human: func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "emulator at %s stopped; every guest it started is gone\n", d.Endpoint)
		return err
	}}, nil
}

// KillCmd signals a running exec's process group.
type KillCmd struct {
	AttachFlags
	ExecID string `arg:"" name:"exec-id" help:"The exec to stop: SIGTERM to its process group, SIGKILL after the daemon's grace period."`
	Signal string `help:"Send this one signal to the process group instead, with no escalation: HUP INT QUIT KILL USR1 USR2 PIPE ALRM TERM CONT STOP TSTP WINCH (SIG prefix optional)." placeholder:"NAME"`
}

func (c *KillCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	var killed bool
	var sent *string
	if c.Signal != "" {
		killed, err = s.Exec(c.ExecID).Signal(ctx, c.Signal)
		name := signalLabel(c.Signal)
		sent = &name
	} else {
		killed, err = s.Exec(c.ExecID).Kill(ctx)
	}
	if err != nil {
		return nil, err
	}
	d := cliapi.KillData{ExecID: c.ExecID, Killed: killed, Signal: sent}
	return &render.Result{Type: cliapi.TypeKill, Data: d, Human: func(w io.Writer) error {
		if killed {
			_, err := fmt.Fprintf(w, "%s: signalled\n", c.ExecID)
			return err
		}
		_, err := fmt.Fprintf(w, "%s: its process group had already exited\n", c.ExecID)
		return err
	}}, nil
}
