package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// BuildCmd builds an image and waits until it can launch.
type BuildCmd struct {
	Binary           string `arg:"" optional:"" help:"The agentd binary baked into the image as its CMD: aarch64 for AWS, the host's for an emulator (found as --agentd is when omitted)." type:"path"`
	Reuse            bool   `help:"Name the image <name>-<hash12> after a sha256 of the daemon, the Dockerfile (and its context) and the build settings (size class, base version, port, hooks), and reuse an image already under that name instead of building."`
	BaseImageVersion string `name:"base-image-version" help:"Pin the managed base image to this version, a bare integer as its listing spells it (1, not the read-back's 1.0; doctor lists them); unset, the build floats on the service default." placeholder:"VERSION"`
	ImageFlags
	InfraFlags
	LifecycleFlags
}

func (c *BuildCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	res, err := p.buildImage(ctx, c.ImageFlags, c.InfraFlags, c.Binary, c.Agentd, c.BaseImageVersion, c.Reuse, nil)
	if err != nil {
		return nil, err
	}
	if res.Reused {
		a.Progress("reusing %s: the build inputs are unchanged, so nothing was built", res.ImageARN)
	}
	d := cliapi.ImageData{ImageIdentifier: res.ImageARN, ImageName: res.Name, BuildLogGroup: res.LogGroup, Size: int64(c.Memory), Reused: res.Reused}
	return &render.Result{Type: cliapi.TypeImage, Data: d, Human: func(w io.Writer) error {
		fmt.Fprintf(w, "image: %s\nname: %s\n", d.ImageIdentifier, d.ImageName)
		if d.Reused {
			fmt.Fprintf(w, "reused: yes, the content hash matched; nothing was built\nsize: %d MiB requested (a reused image keeps the class it was created with)\n", d.Size)
		} else {
			fmt.Fprintf(w, "size: %d MiB\n", d.Size)
		}
		_, err := fmt.Fprintf(w, "build log group: %s (the service made it; deleting the image leaves it)\n", d.BuildLogGroup)
		return err
	}}, nil
}

// SuspendCmd freezes a RUNNING MicroVM.
type SuspendCmd struct {
	MicrovmID string  `arg:"" name:"microvm-id" help:"The MicroVM to freeze."`
	Timeout   float64 `help:"Seconds to wait for SUSPENDED." default:"300"`
	LifecycleFlags
}

func stateResult(st sandbox.Status) *render.Result {
	id := st.ID
	d := cliapi.StateData{MicrovmID: id, State: string(st.State)}
	if st.Endpoint != "" {
		ep := st.Endpoint
		d.Endpoint = &ep
	}
	return &render.Result{Type: cliapi.TypeState, Data: d, Human: func(w io.Writer) error {
		if d.Endpoint != nil {
			_, err := fmt.Fprintf(w, "%s is %s at %s\n", id, d.State, *d.Endpoint)
			return err
		}
		_, err := fmt.Fprintf(w, "%s is %s\n", id, d.State)
		return err
	}}
}

// refusedIn carries the state a lifecycle refusal was made in into the
// failure envelope's data, as microvmId and state.
func refusedIn(st sandbox.Status, err error) error {
	if k := client.KindOf(err); st.State != "" && (k == taxonomy.KindInvalidArg || k == taxonomy.KindWindowClosed) {
		return &render.Failure{Err: render.AsClientError(err), Data: map[string]any{"microvmId": st.ID, "state": string(st.State)}}
	}
	return err
}

func seconds64(s float64) (time.Duration, error) {
	if s <= 0 {
		return 0, render.InvalidArg("", "--timeout must be positive seconds, got %v", s)
	}
	return time.Duration(s * float64(time.Second)), nil
}

func (c *SuspendCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	timeout, err := seconds64(c.Timeout)
	if err != nil {
		return nil, err
	}
	c.forKept(a, "", c.MicrovmID)
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	update, stop := a.Waiting("suspending " + c.MicrovmID)
	defer stop()
	w := p.Wait(timeout)
	w.Progress = func(pr cplane.Progress) { update("suspending " + c.MicrovmID + ": " + pr.State) }
	st, err := p.Handle(c.MicrovmID).Suspend(ctx, w)
	if err != nil {
		return nil, refusedIn(st, err)
	}
	return stateResult(st), nil
}

// ResumeCmd thaws a SUSPENDED MicroVM.
type ResumeCmd struct {
	MicrovmID string  `arg:"" name:"microvm-id" help:"The MicroVM to thaw."`
	Timeout   float64 `help:"Seconds to wait for RUNNING." default:"300"`
	LifecycleFlags
}

func (c *ResumeCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	timeout, err := seconds64(c.Timeout)
	if err != nil {
		return nil, err
	}
	c.forKept(a, "", c.MicrovmID)
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	update, stop := a.Waiting("resuming " + c.MicrovmID)
	defer stop()
	w := p.Wait(timeout)
	w.Progress = func(pr cplane.Progress) { update("resuming " + c.MicrovmID + ": " + pr.State) }
	st, err := p.Handle(c.MicrovmID).Resume(ctx, w)
	if err != nil {
		return nil, refusedIn(st, err)
	}
	return stateResult(st), nil
}

// TerminateCmd tears down a MicroVM and, if asked, its image and build log
// group. A step that fails is named in leaked; the command then exits
// ERR_PLATFORM with the data, never silently.
type TerminateCmd struct {
	MicrovmID       string `arg:"" name:"microvm-id" help:"The MicroVM to terminate."`
	ImageIdentifier string `name:"image-identifier" help:"The image to delete with --delete-image (its ARN or name); unset, the run ledger's record of this MicroVM names it." placeholder:"IDENTIFIER"`
	ImageName       string `name:"image-name" help:"The image's name, which names its build log group; unset, it is read from the identifier." placeholder:"NAME"`
	DeleteImage     bool   `name:"delete-image" help:"Also delete the image and its build log group (the service made the group; nothing else removes it)."`
	Wait            bool   `help:"Wait for TERMINATED rather than returning once the call is accepted."`
	StateDir        string `name:"state-dir" help:"Where the run ledgers live; the record of this MicroVM is closed." env:"MICROVM_STATE_DIR" placeholder:"DIR" type:"path"`
	LifecycleFlags
}

// ledgerRecordFor finds the newest run record naming id.
func ledgerRecordFor(dir, id string) (*ledger.Run, error) {
	runs, _, err := ledger.List(dir)
	if err != nil {
		return nil, err
	}
	for i := len(runs) - 1; i >= 0; i-- {
		if runs[i].MicrovmID == id {
			return &runs[i], nil
		}
	}
	return nil, nil
}

func (c *TerminateCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	dir, err := ledgerDir(a, c.StateDir)
	if err != nil {
		return nil, err
	}
	rec, _ := ledgerRecordFor(dir, c.MicrovmID)
	image := c.ImageIdentifier
	if c.DeleteImage && image == "" && rec != nil {
		image = rec.ImageARN
	}
	if c.DeleteImage && image == "" {
		return nil, render.InvalidArg(taxonomy.FindingBuildLogGroupSurvives, "--delete-image needs --image-identifier: no run record names the image of %s", c.MicrovmID)
	}
	name := c.ImageName
	if name == "" && image != "" {
		name = cplane.ImageName(image)
	}
	c.forKept(a, c.StateDir, c.MicrovmID)
	p, err := c.open(ctx, a)
	if err != nil {
		return nil, err
	}
	defer p.close()
	// Teardown outlives an interrupt: a half-done teardown is the worst leak.
	ctx = context.WithoutCancel(ctx)
	d := cliapi.TeardownData{MicrovmID: c.MicrovmID, Leaked: []string{}, UndeletedLogGroups: []string{}}
	releaseVolumes(ctx, a, p, c.MicrovmID, c.StateDir) // volume.go
	a.Progress("terminating %s", c.MicrovmID)
	h := p.Handle(c.MicrovmID)
	st, err := h.Terminate(ctx)
	state := string(st.State)
	terminated := err == nil
	if err != nil {
		d.Leaked = append(d.Leaked, "microvm "+c.MicrovmID)
		a.Warn("the terminate call for %s failed, so it may still bill: %v", c.MicrovmID, err)
	}
	if terminated && (c.Wait || c.DeleteImage) {
		update, stop := a.Waiting("waiting for " + c.MicrovmID + " to terminate")
		w := p.Wait(5 * time.Minute)
		w.Progress = func(pr cplane.Progress) { update("waiting for " + c.MicrovmID + ": " + pr.State) }
		got, err := h.Await(ctx, sandbox.Terminated, w)
		stop()
		if err != nil {
			a.Warn("%s did not reach TERMINATED: %v", c.MicrovmID, err)
		} else {
			state = string(got.State)
		}
	}
	if c.DeleteImage {
		d.ImageIdentifier = &image
		a.Progress("deleting image %s", image)
		if err := p.DeleteImage(ctx, image); err != nil {
			d.Leaked = append(d.Leaked, "image "+image)
			a.Warn("could not delete image %s, which keeps billing storage: %v", image, err)
		}
		if name != "" {
			group := build.LogGroup(name)
			if err := p.DeleteLogGroup(ctx, group); err != nil {
				d.UndeletedLogGroups = append(d.UndeletedLogGroups, group)
				a.Warn("the build log group %s was not deleted (nothing else will remove it): %v", group, err)
			}
		}
	}
	d.State = &state
	if terminated {
		a.forget(dir, c.MicrovmID)
	}
	if rec != nil {
		if err := closeRecord(dir, rec.ID, d.Leaked); err != nil {
			a.Warn("the run ledger was not updated: %v", err)
		}
	}
	res := &render.Result{Type: cliapi.TypeTeardown, Data: d, Human: func(w io.Writer) error {
		fmt.Fprintf(w, "terminated %s (%s)\n", d.MicrovmID, state)
		for _, l := range d.Leaked {
			fmt.Fprintf(w, "LEAKED: %s\n", l)
		}
		for _, g := range d.UndeletedLogGroups {
			fmt.Fprintf(w, "NOT DELETED: log group %s\n", g)
		}
		return nil
	}}
	if len(d.Leaked) > 0 {
		return nil, &render.Failure{Err: client.Errorf(taxonomy.KindPlatform, taxonomy.FindingBuildLogGroupSurvives, "teardown left %s", strings.Join(d.Leaked, ", ")), Data: d, Human: res.Human}
	}
	return res, nil
}

// closeRecord marks a run record closed (or names what leaked), rewriting
// its file in place through the ledger's own writer.
func closeRecord(dir, id string, leaked []string) error {
	return ledger.Close(dir, id, leaked)
}
