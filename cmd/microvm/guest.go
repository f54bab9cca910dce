package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// The guest commands: the daemon's filesystem operations
// (stat, dir, mkdir, mv, rm), its exec listing (ps) and its metrics. Each is
// one call (dir: one call per page) through client.Session.

// entryLine is one ls -l style line.
func entryLine(e cliapi.FileEntry) string {
	name := e.Path
	if e.SymlinkTarget != nil {
		name += " -> " + *e.SymlinkTarget
	}
	return fmt.Sprintf("%s\t%s\t%d:%d\t%s\t%s\t%s", e.Type, e.Mode, e.UID, e.GID, render.HumanBytes(e.Size), e.Mtime, name)
}

// guestPath accepts /path or vm:/path, as cp names the guest side.
func guestPath(p string) string { return strings.TrimPrefix(p, "vm:") }

// StatCmd describes one guest path.
type StatCmd struct {
	AttachFlags
	Path string `arg:"" help:"The guest path (a final symlink is described, not followed)."`
}

func (c *StatCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	fi, err := s.Stat(ctx, guestPath(c.Path))
	if err != nil {
		return nil, err
	}
	e := render.FileEntry(fi)
	return &render.Result{Type: cliapi.TypeStat, Data: cliapi.StatData{Entry: e}, Human: func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, entryLine(e))
		return tw.Flush()
	}}, nil
}

// DirCmd lists a guest directory.
type DirCmd struct {
	AttachFlags
	Path  string `arg:"" help:"The guest directory."`
	Depth uint32 `help:"Levels to descend: 1 lists the directory's own entries." default:"1"`
	Page  uint32 `help:"Entries fetched per request; 0 means the daemon's default." default:"0"`
}

func (c *DirCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	d := cliapi.DirData{Path: guestPath(c.Path), Entries: []cliapi.FileEntry{}}
	err = s.List(ctx, d.Path, client.ListOptions{Depth: c.Depth, Limit: c.Page}, func(fi protocol.FileInfo) error {
		d.Entries = append(d.Entries, render.FileEntry(fi))
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &render.Result{Type: cliapi.TypeDir, Data: d, Human: func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		for _, e := range d.Entries {
			fmt.Fprintln(tw, entryLine(e))
		}
		return tw.Flush()
	}}, nil
}

// MkdirCmd creates a guest directory with its parents.
type MkdirCmd struct {
	AttachFlags
	Path string `arg:"" help:"The guest directory to create, parents included; one already there is success."`
	Mode string `help:"Octal permission bits for what is created (before the guest's umask)." default:"0755"`
}

func (c *MkdirCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	mode, err := strconv.ParseUint(strings.TrimPrefix(c.Mode, "0o"), 8, 32)
	if err != nil || mode > 0o777 {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "", "--mode %q is not octal permission bits such as 0755", c.Mode)
	}
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	path := guestPath(c.Path)
	created, err := s.Mkdir(ctx, path, fs.FileMode(mode))
	if err != nil {
		return nil, err
	}
	d := cliapi.MkdirData{Path: path, Created: created}
	return &render.Result{Type: cliapi.TypeMkdir, Data: d, Human: func(w io.Writer) error {
		if created {
			_, err := fmt.Fprintf(w, "%s: created\n", path)
			return err
		}
		_, err := fmt.Fprintf(w, "%s: already a directory\n", path)
		return err
	}}, nil
}

// MvCmd moves a guest entry.
type MvCmd struct {
	AttachFlags
	From    string `arg:"" help:"The guest path to move."`
	To      string `arg:"" help:"Its new guest path; the parent must exist."`
	Replace bool   `help:"Replace what is at the destination; without it an existing destination is refused and left alone."`
}

func (c *MvCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	d := cliapi.MoveData{From: guestPath(c.From), To: guestPath(c.To)}
	if err := s.Move(ctx, d.From, d.To, c.Replace); err != nil {
		return nil, err
	}
	return &render.Result{Type: cliapi.TypeMove, Data: d, Human: func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s -> %s\n", d.From, d.To)
		return err
	}}, nil
}

// RmCmd removes a guest entry.
type RmCmd struct {
	AttachFlags
	Path      string `arg:"" help:"The guest path to remove; a symlink is removed, never followed."`
	Recursive bool   `short:"r" help:"Remove a directory with everything under it; without it a non-empty directory is refused."`
}

func (c *RmCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	path := guestPath(c.Path)
	n, err := s.Remove(ctx, path, c.Recursive)
	if err != nil {
		return nil, err
	}
	d := cliapi.RemoveData{Path: path, Removed: int64(n)}
	return &render.Result{Type: cliapi.TypeRemove, Data: d, Human: func(w io.Writer) error {
		_, err := fmt.Fprintf(w, "%s: %d removed\n", path, n)
		return err
	}}, nil
}

// PsCmd lists the daemon's execs.
type PsCmd struct {
	AttachFlags
}

func (c *PsCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	list, err := s.Execs(ctx)
	if err != nil {
		return nil, err
	}
	d := cliapi.PsData{Execs: make([]cliapi.ExecSummary, 0, len(list))}
	for _, e := range list {
		cmd := e.Command
		if cmd == nil {
			cmd = []string{}
		}
		d.Execs = append(d.Execs, cliapi.ExecSummary{ExecID: e.ExecID, Phase: string(e.Phase), StartedAt: e.StartedAt.UTC().Format(time.RFC3339Nano), Command: cmd, PID: int64(e.Pid)})
	}
	return &render.Result{Type: cliapi.TypePs, Data: d, Human: func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		fmt.Fprintln(tw, "EXEC ID\tPHASE\tPID\tSTARTED\tCOMMAND")
		for _, r := range d.Execs {
			words := make([]string, len(r.Command))
			for i, w := range r.Command {
				words[i] = shellQuote(w)
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", r.ExecID, r.Phase, r.PID, r.StartedAt, strings.Join(words, " "))
		}
		return tw.Flush()
	}}, nil
}

// MetricsCmd samples the guest's CPU, memory, disk and load.
type MetricsCmd struct {
	AttachFlags
}

func (c *MetricsCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	m, err := s.Metrics(ctx)
	if err != nil {
		return nil, err
	}
	d := cliapi.MetricsData{
		SampledAt: m.SampledAt.UTC().Format(time.RFC3339Nano), CPUCount: int64(m.CPU.Count),
		CPUUsedPercent: m.CPU.UsedPercent, CPUWindowSecs: m.CPU.WindowSecs,
		MemoryTotalBytes: int64(m.Memory.TotalBytes), MemoryAvailableBytes: int64(m.Memory.AvailableBytes), MemoryUsedBytes: int64(m.Memory.UsedBytes),
		DiskPath: m.Disk.Path, DiskTotalBytes: int64(m.Disk.TotalBytes), DiskAvailableBytes: int64(m.Disk.AvailableBytes), DiskUsedBytes: int64(m.Disk.UsedBytes),
		Load1: m.Load.Load1, Load5: m.Load.Load5, Load15: m.Load.Load15,
	}
	return &render.Result{Type: cliapi.TypeMetrics, Data: d, Human: func(w io.Writer) error {
		tw := tabwriter.NewWriter(w, 0, 2, 2, ' ', 0)
		fmt.Fprintf(tw, "cpu\t%.1f%% of %d over %.1fs\n", d.CPUUsedPercent, d.CPUCount, d.CPUWindowSecs)
		fmt.Fprintf(tw, "memory\t%s used of %s (%s available)\n", render.HumanBytes(d.MemoryUsedBytes), render.HumanBytes(d.MemoryTotalBytes), render.HumanBytes(d.MemoryAvailableBytes))
		fmt.Fprintf(tw, "disk %s\t%s used of %s (%s available)\n", d.DiskPath, render.HumanBytes(d.DiskUsedBytes), render.HumanBytes(d.DiskTotalBytes), render.HumanBytes(d.DiskAvailableBytes))
		fmt.Fprintf(tw, "load\t%.2f %.2f %.2f\n", d.Load1, d.Load5, d.Load15)
		return tw.Flush()
	}}, nil
}

// signalLabel is the name kill --signal reports: the daemon's, without SIG.
func signalLabel(name string) string { return strings.TrimPrefix(name, "SIG") }
