package mcpserver

// The lifecycle tools of microvm mcp: create (from an image, or the local
// default one), suspend, resume, terminate and list, each on a sandbox the
// calling session owns.

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/build"
	"github.com/microvms/microvms/client/checkpoint"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/client/setup"
	"github.com/microvms/microvms/client/workflow"
	"github.com/microvms/microvms/cmd/microvm/internal/planes"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/mcpapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

func (s *mcpServer) create(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxCreateArgs) (mcpapi.SandboxCreateResult, string, error) {
	var out mcpapi.SandboxCreateResult
	if in.SizeMib != 0 && (s.p.Local == nil || in.Image != "") {
		return out, "", render.InvalidArg(taxonomy.SizeClassFinding, "size_mib %d: an image's size class is fixed when it is built (microvm build --memory), so size_mib only applies to the local default image", in.SizeMib)
	}
	// The cap counts creates in flight, so concurrent calls cannot pass it together.
	st.mu.Lock()
	if n := len(st.boxes) + st.creating; n >= mcpapi.MaxLiveSandboxes {
		st.mu.Unlock()
		return out, "", client.Errorf(taxonomy.KindPrecondition, "", "this session already holds %d sandboxes, the most it may (max_live_sandboxes in api/mcp.yaml); terminate one with sandbox_terminate first", n)
	}
	st.creating++
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		st.creating--
		st.mu.Unlock()
	}()
	o := sandbox.Options{Env: in.Env, Connectors: cplane.Connectors{InternetEgress: in.Egress}, ExecutionRoleARN: s.role}
	net, err := s.launchNetwork(in.NetworkAllow, in.NetworkDenyAll, in.SecretsFromEnv)
	if err != nil {
		return out, "", err
	}
	o.Network = net
	mounts, err := parseVolumes(in.Volumes)
	if err != nil {
		return out, "", err
	}
	// The store is opened before the launch: a missing bucket is refused
	// with nothing up.
	var vols *checkpoint.Volumes
	if len(mounts) > 0 {
		if vols, err = s.p.Platform.Volumes(ctx, s.bucket()); err != nil {
			return out, "", err
		}
	}
	image, err := s.imageFor(ctx, in)
	if err != nil {
		return out, "", err
	}
	var sb *sandbox.Sandbox
	if s.p.Local != nil && image == "" {
		image = "the local default image"
		sb, err = s.p.Local.Launch(ctx, o)
	} else {
		o.Image, o.ImageName = image, image
		if n := cplane.ImageName(image); n != "" {
			o.ImageName = n
		}
		o.Wait = s.p.Wait(10 * time.Minute)
		sb, err = sandbox.Launch(ctx, s.p.Control(), o)
	}
	if sb != nil {
		// Whatever the launch answered, a MicroVM exists: the session owns
		// it, or tears it down here when the session ended meanwhile.
		st.mu.Lock()
		if st.closed {
			st.mu.Unlock()
			rep := sb.Terminate(context.WithoutCancel(ctx), sandbox.TeardownOptions{})
			s.logf("teardown (%s): %s, launched as the session ended, terminated (leaked %v)", st.name, sb.ID(), rep.Leaked)
			return out, "", client.Errorf(taxonomy.KindInterrupted, "", "the session ended during the launch; %s was terminated", sb.ID())
		}
		st.boxes[sb.ID()] = &mcpBox{sb: sb, image: image, created: time.Now().UTC()}
		out.LiveSandboxes = int64(len(st.boxes))
		st.mu.Unlock()
	}
	if err != nil {
		if sb != nil {
			return out, "", fmt.Errorf("%w (sandbox %s is kept in this session so sandbox_terminate can clean it up)", err, sb.ID())
		}
		return out, "", err
	}
	if len(mounts) > 0 {
		b, berr := st.box(sb.ID())
		if berr == nil {
			berr = s.attachVolumes(ctx, st, vols, b, mounts)
		}
		if berr != nil {
			// attachVolumes terminated the sandbox: it leaves the session.
			st.mu.Lock()
			delete(st.boxes, sb.ID())
			st.mu.Unlock()
			return out, "", berr
		}
	}
	s.logf("%s: created %s from %s", st.name, sb.ID(), image)
	out.SandboxID, out.State, out.Image, out.MaxLiveSandboxes = sb.ID(), string(sb.Lifecycle()), image, mcpapi.MaxLiveSandboxes
	return out, fmt.Sprintf("sandbox %s is %s (image %s); this session holds %d of at most %d", sb.ID(), sb.Lifecycle(), image, out.LiveSandboxes, out.MaxLiveSandboxes), nil
}

// imageFor is the image a create launches: the call's, the server's
// --image, or in local mode an image of the asked size class ("" for the
// emulator's default image).
func (s *mcpServer) imageFor(ctx context.Context, in mcpapi.SandboxCreateArgs) (string, error) {
	local := s.p.Local != nil
	image := in.Image
	if image == "" {
		image = s.image
	}
	if image != "" {
		arn, _, err := workflow.ResolveImage(ctx, s.p.Platform, image)
		return arn, err
	}
	if !local {
		return "", client.Errorf(taxonomy.KindPrecondition, "", "no image: pass image to sandbox_create, or start the server with --image (MICROVM_IMAGE); `microvm build` makes one")
	}
	if in.SizeMib == 0 || in.SizeMib == taxonomy.DefaultBaselineMiB {
		return "", nil
	}
	s.imageMu.Lock()
	defer s.imageMu.Unlock()
	if arn, ok := s.sizeImages[in.SizeMib]; ok {
		return arn, nil
	}
	res, err := s.buildImage(ctx, int(in.SizeMib))
	if err != nil {
		return "", err
	}
	arn := res.ImageARN
	s.sizeImages[in.SizeMib] = arn
	return arn, nil
}

func (s *mcpServer) suspend(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxSuspendArgs) (mcpapi.SandboxSuspendResult, string, error) {
	b, err := st.box(in.SandboxID)
	if err != nil {
		return mcpapi.SandboxSuspendResult{}, "", err
	}
	if err := b.sb.Suspend(ctx); err != nil {
		return mcpapi.SandboxSuspendResult{}, "", err
	}
	return mcpapi.SandboxSuspendResult{SandboxID: b.sb.ID(), State: string(b.sb.Lifecycle())}, fmt.Sprintf("sandbox %s is %s", b.sb.ID(), b.sb.Lifecycle()), nil
}

func (s *mcpServer) resume(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxResumeArgs) (mcpapi.SandboxResumeResult, string, error) {
	b, err := st.box(in.SandboxID)
	if err != nil {
		return mcpapi.SandboxResumeResult{}, "", err
	}
	if err := b.sb.Resume(ctx); err != nil {
		return mcpapi.SandboxResumeResult{}, "", err
	}
	return mcpapi.SandboxResumeResult{SandboxID: b.sb.ID(), State: string(b.sb.Lifecycle())}, fmt.Sprintf("sandbox %s is %s", b.sb.ID(), b.sb.Lifecycle()), nil
}

func (s *mcpServer) terminate(ctx context.Context, _ *mcp.CallToolRequest, st *mcpSession, in mcpapi.SandboxTerminateArgs) (mcpapi.SandboxTerminateResult, string, error) {
	b, err := st.box(in.SandboxID)
	if err != nil {
		return mcpapi.SandboxTerminateResult{}, "", err
	}
	// Teardown outlives the caller's cancel: a half-done one is the worst leak.
	// The volumes it holds get a last generation first.
	s.detachVolumes(ctx, b)
	rep := b.sb.Terminate(context.WithoutCancel(ctx), sandbox.TeardownOptions{})
	out := mcpapi.SandboxTerminateResult{SandboxID: b.sb.ID(), State: string(b.sb.Lifecycle()), Leaked: []string{}}
	for _, l := range rep.Leaked {
		out.Leaked = append(out.Leaked, l.String())
	}
	if rep.Clean() {
		st.mu.Lock()
		delete(st.boxes, in.SandboxID)
		st.mu.Unlock()
	}
	s.logf("%s: terminated %s (leaked %v)", st.name, b.sb.ID(), out.Leaked)
	text := fmt.Sprintf("sandbox %s is %s", b.sb.ID(), b.sb.Lifecycle())
	if len(out.Leaked) > 0 {
		text += "; left behind: " + strings.Join(out.Leaked, "; ")
	}
	return out, text, nil
}

func (s *mcpServer) list(_ context.Context, _ *mcp.CallToolRequest, st *mcpSession, _ mcpapi.SandboxListArgs) (mcpapi.SandboxListResult, string, error) {
	st.mu.Lock()
	out := mcpapi.SandboxListResult{Sandboxes: []mcpapi.Sandbox{}, MaxLiveSandboxes: mcpapi.MaxLiveSandboxes}
	for _, b := range st.boxes {
		out.Sandboxes = append(out.Sandboxes, mcpapi.Sandbox{SandboxID: b.sb.ID(), State: string(b.sb.Lifecycle()), Image: b.image, CreatedAt: b.created.Format(time.RFC3339)})
	}
	st.mu.Unlock()
	slices.SortFunc(out.Sandboxes, func(x, y mcpapi.Sandbox) int {
		return strings.Compare(x.CreatedAt+x.SandboxID, y.CreatedAt+y.SandboxID)
	})
	var b strings.Builder
	fmt.Fprintf(&b, "%d of at most %d sandboxes", len(out.Sandboxes), out.MaxLiveSandboxes)
	for _, sb := range out.Sandboxes {
		fmt.Fprintf(&b, "\n%s %s (image %s, created %s)", sb.SandboxID, sb.State, sb.Image, sb.CreatedAt)
	}
	return out, b.String(), nil
}

// buildImage builds the local default image at another size class, or
// reuses one built from the same inputs (workflow.Build), with the role and
// bucket setup.env names for this plane.
func (s *mcpServer) buildImage(ctx context.Context, memoryMiB int) (*build.Result, error) {
	p := s.p
	daemon, err := planes.Daemon(p.Platform, p.Local, "", p.Agentd, p.Getenv)
	if err != nil {
		return nil, err
	}
	size, err := client.SizeClassFromBaseline(memoryMiB)
	if err != nil {
		return nil, err
	}
	infra := setup.Infra{}.Filled("", p.Getenv, p.Endpoint(), p.Region().String())
	return workflow.Build(ctx, p.Platform, workflow.BuildOptions{
		Daemon: daemon, Reuse: true, Size: size, Port: taxonomy.DefaultAgentPort,
		Bucket: infra.Bucket, BuildRoleARN: infra.BuildRoleARN,
		ArtifactDir: func() (string, error) { return workflow.ArtifactDir(p.Getenv) },
		Machine:     planes.GuestMachine(p.Platform),
	}, func(name string) { s.logf("building image %s (%s)", name, size) })
}
