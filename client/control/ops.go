package control

import (
	"context"
	"net"
	"strings"
	"time"

	"github.com/microvms/microvms/client"
	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// RunHook is a run-time hook's setting: enabled, with a timeout of 1..60 s
// (zero means the platform default).
type RunHook struct {
	Enabled bool
	Timeout client.RunHookTimeout
}

// BuildHook is a build-time hook's setting, with a timeout of 1..3600 s.
type BuildHook struct {
	Enabled bool
	Timeout client.BuildHookTimeout
}

// Hooks is the image's lifecycle-hook configuration. The run-time and
// build-time families take different timeout types, so one's number cannot
// land in the other's field.
type Hooks struct {
	// Port is the guest port the platform dials for hooks and the endpoint.
	Port                            int
	Run, Resume, Suspend, Terminate RunHook
	Ready, Validate                 BuildHook
}

func hookState(on bool) *cp.HookState {
	if on {
		return ptr(cp.ENABLED)
	}
	return ptr(cp.DISABLED)
}

func runTimeout(t client.RunHookTimeout) *int {
	if t.IsZero() {
		return nil
	}
	return ptr(t.Seconds())
}

func buildTimeout(t client.BuildHookTimeout) *int {
	if t.IsZero() {
		return nil
	}
	return ptr(t.Seconds())
}

func (h *Hooks) wire() (*cp.Hooks, error) {
	if h == nil {
		return nil, nil
	}
	if h.Port < 1 || h.Port > 65535 {
		return nil, refuse(taxonomy.FindingAgentPortAgreement, "hook port %d is outside 1..65535", h.Port)
	}
	return &cp.Hooks{
		Port: ptr(h.Port),
		MicrovmHooks: &cp.MicrovmHooks{
			Run: hookState(h.Run.Enabled), RunTimeoutInSeconds: runTimeout(h.Run.Timeout),
			Resume: hookState(h.Resume.Enabled), ResumeTimeoutInSeconds: runTimeout(h.Resume.Timeout),
			Suspend: hookState(h.Suspend.Enabled), SuspendTimeoutInSeconds: runTimeout(h.Suspend.Timeout),
			Terminate: hookState(h.Terminate.Enabled), TerminateTimeoutInSeconds: runTimeout(h.Terminate.Timeout),
		},
		MicrovmImageHooks: &cp.MicrovmImageHooks{
			Ready: hookState(h.Ready.Enabled), ReadyTimeoutInSeconds: buildTimeout(h.Ready.Timeout),
			Validate: hookState(h.Validate.Enabled), ValidateTimeoutInSeconds: buildTimeout(h.Validate.Timeout),
		},
	}, nil
}

// ImageSpec is one image build. There is no clientToken field: the client
// mints a fresh one per attempt (see clientToken).
type ImageSpec struct {
	// Name is the image name (CreateImage only; UpdateImage ignores it).
	Name string
	// BaseImageARN defaults to the managed base in the client's region.
	BaseImageARN string
	// BaseImageVersion pins the base; empty takes the service's default,
	// which has moved before.
	BaseImageVersion string
	BuildRoleARN     string
	// CodeArtifactURI is the S3 URI of the uploaded artifact.
	CodeArtifactURI string
	Description     string
	// InternetEgress gives the image's builds outbound network.
	InternetEgress bool
	// Size is the baseline size class; zero leaves the platform default.
	Size client.SizeClass
	// RepairIdentity grants the guest the capabilities it needs to give each
	// VM its own hostname and boot_id (sethostname and a bind mount need
	// CAP_SYS_ADMIN, which only additionalOsCapabilities=["ALL"] grants).
	RepairIdentity bool
	Hooks          *Hooks
	Environment    map[string]string
	Tags           map[string]string
	// Logging is the build's log destination; nil takes the default group.
	Logging *cp.Logging
}

func (c *Client) buildSpec(s ImageSpec) (cp.UpdateMicrovmImageRequest, error) {
	var out cp.UpdateMicrovmImageRequest
	base := s.BaseImageARN
	if base == "" {
		base = c.ManagedBaseImageARN()
	}
	if s.BaseImageVersion != "" {
		if err := CheckImageVersion(s.BaseImageVersion); err != nil {
			return out, err
		}
		out.BaseImageVersion = ptr(s.BaseImageVersion)
	}
	if s.BuildRoleARN == "" || s.CodeArtifactURI == "" {
		return out, refuse("", "an image build needs BuildRoleARN and CodeArtifactURI")
	}
	if l := s.Logging; l != nil && (l.CloudWatch == nil) == (l.Disabled == nil) {
		return out, refuse("", "Logging must set exactly one of CloudWatch or Disabled")
	}
	hooks, err := s.Hooks.wire()
	if err != nil {
		return out, err
	}
	tok, err := clientToken(c.rnd, "build")
	if err != nil {
		return out, err
	}
	out.BaseImageArn, out.BuildRoleArn, out.ClientToken = base, s.BuildRoleARN, &tok
	out.CodeArtifact = cp.CodeArtifact{Uri: ptr(s.CodeArtifactURI)}
	out.CpuConfigurations = &[]cp.CpuConfiguration{{Architecture: cp.ARM64}}
	out.EgressNetworkConnectors = egress(c.region, s.InternetEgress)
	out.Hooks, out.Logging = hooks, s.Logging
	if s.Description != "" {
		out.Description = ptr(s.Description)
	}
	if !s.Size.IsZero() {
		out.Resources = &[]cp.Resources{{MinimumMemoryInMiB: s.Size.BaselineMiB()}}
	}
	if s.RepairIdentity {
		out.AdditionalOsCapabilities = &[]cp.Capability{cp.ALL}
	}
	if len(s.Environment) > 0 {
		out.EnvironmentVariables = ptr(s.Environment)
	}
	return out, nil
}

// CreateImage starts building a new image. Wait for it with WaitImage.
func (c *Client) CreateImage(ctx context.Context, s ImageSpec) (*cp.CreateMicrovmImageResponse, error) {
	const op = "CreateMicrovmImage"
	if s.Name == "" || len(s.Name) > taxonomy.MaxImageNameLen || !imageNameRE.MatchString(s.Name) {
		return nil, refuse("", "image name %q must be 1..%d of [a-zA-Z0-9-_]", s.Name, taxonomy.MaxImageNameLen)
	}
	b, err := c.buildSpec(s)
	if err != nil {
		return nil, err
	}
	req := cp.CreateMicrovmImageRequest{
		AdditionalOsCapabilities: b.AdditionalOsCapabilities, BaseImageArn: b.BaseImageArn, BaseImageVersion: b.BaseImageVersion,
		BuildRoleArn: b.BuildRoleArn, ClientToken: b.ClientToken, CodeArtifact: b.CodeArtifact, CpuConfigurations: b.CpuConfigurations,
		Description: b.Description, EgressNetworkConnectors: b.EgressNetworkConnectors, EnvironmentVariables: b.EnvironmentVariables,
		Hooks: b.Hooks, Logging: b.Logging, Name: s.Name, Resources: b.Resources,
	}
	if len(s.Tags) > 0 {
		req.Tags = ptr(s.Tags)
	}
	r, err := c.api.CreateMicrovmImageWithResponse(withOperation(ctx, op), req)
	if err != nil {
		return nil, err
	}
	return reply(op, r.JSON201, r.Body, nil)
}

// UpdateImage builds a new version of an existing image. The operation has
// PUT semantics, so the whole build configuration is sent again.
func (c *Client) UpdateImage(ctx context.Context, ref ImageRef, s ImageSpec) (*cp.UpdateMicrovmImageResponse, error) {
	const op = "UpdateMicrovmImage"
	if err := ref.check(); err != nil {
		return nil, err
	}
	b, err := c.buildSpec(s)
	if err != nil {
		return nil, err
	}
	r, err := c.api.UpdateMicrovmImageWithResponse(withOperation(ctx, op), ref.id, b)
	if err != nil {
		return nil, err
	}
	return reply(op, r.JSON200, r.Body, nil)
}

// GetImage reads an image. It carries no failure reason; see WaitImage.
func (c *Client) GetImage(ctx context.Context, ref ImageRef) (*cp.GetMicrovmImageOutput, error) {
	const op = "GetMicrovmImage"
	if err := ref.check(); err != nil {
		return nil, err
	}
	r, err := c.api.GetMicrovmImageWithResponse(withOperation(ctx, op), ref.id)
	if err != nil {
		return nil, err
	}
	return reply(op, r.JSON200, r.Body, nil)
}

// DeleteImage deletes an image. An image still building refuses with a
// ConflictException.
func (c *Client) DeleteImage(ctx context.Context, ref ImageRef) (*cp.DeleteMicrovmImageOutput, error) {
	const op = "DeleteMicrovmImage"
	if err := ref.check(); err != nil {
		return nil, err
	}
	r, err := c.api.DeleteMicrovmImageWithResponse(withOperation(ctx, op), ref.id)
	if err != nil {
		return nil, err
	}
	return reply(op, r.JSON200, r.Body, nil)
}

// GetImageVersion reads one version, the whole build configuration echoed.
// Its baseImageVersion is normalised by the service; compare it with
// SameBaseVersion.
func (c *Client) GetImageVersion(ctx context.Context, ref ImageRef, version string) (*cp.GetMicrovmImageVersionOutput, error) {
	const op = "GetMicrovmImageVersion"
	if err := firstErr(ref.check(), CheckImageVersion(version)); err != nil {
		return nil, err
	}
	r, err := c.api.GetMicrovmImageVersionWithResponse(withOperation(ctx, op), ref.id, version)
	if err != nil {
		return nil, err
	}
	return reply(op, r.JSON200, r.Body, nil)
}

// SetImageVersionStatus retires (INACTIVE) or restores (ACTIVE) a version.
// An inactive version refuses launches, pinned or not.
func (c *Client) SetImageVersionStatus(ctx context.Context, ref ImageRef, version string, status cp.MicrovmImageVersionStatus) (*cp.UpdateMicrovmImageVersionResponse, error) {
	const op = "UpdateMicrovmImageVersion"
	if err := firstErr(ref.check(), CheckImageVersion(version)); err != nil {
		return nil, err
	}
	if !status.Valid() {
		return nil, refuse("", "image version status %q is not ACTIVE or INACTIVE", status)
	}
	r, err := c.api.UpdateMicrovmImageVersionWithResponse(withOperation(ctx, op), ref.id, version, cp.UpdateMicrovmImageVersionRequest{Status: status})
	if err != nil {
		return nil, err
	}
	return reply(op, r.JSON200, r.Body, nil)
}

// DeleteImageVersion deletes a version; the service refuses an image's last.
func (c *Client) DeleteImageVersion(ctx context.Context, ref ImageRef, version string) (*cp.DeleteMicrovmImageVersionOutput, error) {
	const op = "DeleteMicrovmImageVersion"
	if err := firstErr(ref.check(), CheckImageVersion(version)); err != nil {
		return nil, err
	}
	r, err := c.api.DeleteMicrovmImageVersionWithResponse(withOperation(ctx, op), ref.id, version)
	if err != nil {
		return nil, err
	}
	return reply(op, r.JSON200, r.Body, nil)
}

// GetImageBuild reads one build, with its snapshot sizes when it got that far.
func (c *Client) GetImageBuild(ctx context.Context, ref ImageRef, version, buildID string) (*cp.GetMicrovmImageBuildOutput, error) {
	const op = "GetMicrovmImageBuild"
	if err := firstErr(ref.check(), CheckImageVersion(version)); err != nil {
		return nil, err
	}
	if buildID == "" || strings.ContainsFunc(buildID, isSpace) {
		return nil, refuse("", "build id %q must be non-empty with no whitespace", buildID)
	}
	r, err := c.api.GetMicrovmImageBuildWithResponse(withOperation(ctx, op), ref.id, version, buildID)
	if err != nil {
		return nil, err
	}
	return reply(op, r.JSON200, r.Body, nil)
}

// imageARNForTags returns the colon-form ARN TagResource takes: only images
// are taggable (the shared Lambda ARN grammar has no MicroVM resource).
func imageARNForTags(ref ImageRef) error {
	if err := ref.check(); err != nil {
		return err
	}
	if !ref.IsARN() {
		return refuse(taxonomy.FindingImageARNColon, "tagging takes the image's ARN (arn:aws:lambda:<region>:<account>:microvm-image:<name>), not its name %q", ref.id)
	}
	return nil
}

// TagImage adds tags to an image.
func (c *Client) TagImage(ctx context.Context, ref ImageRef, tags map[string]string) error {
	const op = "TagResource"
	if err := imageARNForTags(ref); err != nil {
		return err
	}
	_, err := c.api.TagResourceWithResponse(withOperation(ctx, op), ref.id, cp.TagResourceRequest{Tags: tags})
	return err
}

// UntagImage removes tag keys from an image.
func (c *Client) UntagImage(ctx context.Context, ref ImageRef, keys ...string) error {
	const op = "UntagResource"
	if err := imageARNForTags(ref); err != nil {
		return err
	}
	if len(keys) == 0 {
		return refuse("", "UntagImage needs at least one key")
	}
	_, err := c.api.UntagResourceWithResponse(withOperation(ctx, op), ref.id, &cp.UntagResourceParams{TagKeys: keys})
	return err
}

// ImageTags lists an image's tags.
func (c *Client) ImageTags(ctx context.Context, ref ImageRef) (map[string]string, error) {
	const op = "ListTags"
	if err := imageARNForTags(ref); err != nil {
		return nil, err
	}
	r, err := c.api.ListTagsWithResponse(withOperation(ctx, op), ref.id)
	if err != nil {
		return nil, err
	}
	out, err := reply(op, r.JSON200, r.Body, nil)
	if err != nil {
		return nil, err
	}
	if out.Tags == nil {
		return map[string]string{}, nil
	}
	return *out.Tags, nil
}

// IdlePolicy is the launch's idle behaviour. AutoResume is a real platform
// feature, so it is a field rather than a hard-coded false.
type IdlePolicy struct {
	MaxIdle, SuspendedFor time.Duration
	AutoResume            bool
}

// LaunchSpec is one RunMicrovm. There is no clientToken field; each Launch
// mints its own.
type LaunchSpec struct {
	// Image must be the colon-form ARN: RunMicrovm does not take a name.
	Image ImageRef
	// Version pins an image version; empty takes the latest active one.
	Version          string
	ExecutionRoleARN string
	Payload          RunHookPayload
	Connectors       Connectors
	Idle             *IdlePolicy
	// MaxDuration is at most 8 hours, in whole seconds; zero is the default.
	MaxDuration time.Duration
	Logging     *cp.Logging
}

func (c *Client) launchRequest(s LaunchSpec) (cp.RunMicrovmRequest, error) {
	var out cp.RunMicrovmRequest
	if err := s.Image.check(); err != nil {
		return out, err
	}
	if !s.Image.IsARN() {
		return out, refuse(taxonomy.FindingImageARNColon, "RunMicrovm takes the image's colon-form ARN, not the name %q; GetImage returns it", s.Image.id)
	}
	if s.Version != "" {
		if err := CheckImageVersion(s.Version); err != nil {
			return out, err
		}
		out.ImageVersion = ptr(s.Version)
	}
	dur, err := checkMaxDuration(s.MaxDuration)
	if err != nil {
		return out, err
	}
	if p := s.Idle; p != nil {
		if p.MaxIdle%time.Second != 0 || p.MaxIdle < taxonomy.MinIdleDurationSec*time.Second || p.SuspendedFor < 0 || p.SuspendedFor%time.Second != 0 {
			return out, refuse(taxonomy.FindingIdlePolicy, "idle policy needs whole seconds: max idle at least %ds, suspended window at least 0", taxonomy.MinIdleDurationSec)
		}
		out.IdlePolicy = &cp.IdlePolicy{MaxIdleDurationSeconds: int(p.MaxIdle / time.Second), SuspendedDurationSeconds: int(p.SuspendedFor / time.Second), AutoResumeEnabled: p.AutoResume}
	}
	if !s.Payload.IsZero() {
		out.RunHookPayload = ptr(s.Payload.s)
	}
	if s.ExecutionRoleARN != "" {
		out.ExecutionRoleArn = ptr(s.ExecutionRoleARN)
	}
	tok, err := clientToken(c.rnd, "launch")
	if err != nil {
		return out, err
	}
	out.ImageIdentifier, out.MaximumDurationInSeconds, out.ClientToken, out.Logging = s.Image.id, dur, &tok, s.Logging
	out.IngressNetworkConnectors = s.Connectors.ingress(c.region)
	out.EgressNetworkConnectors = egress(c.region, s.Connectors.InternetEgress)
	return out, nil
}

// Launch runs a MicroVM. It returns in PENDING; WaitRunning waits for RUNNING.
func (c *Client) Launch(ctx context.Context, s LaunchSpec) (*cp.RunMicrovmResponse, error) {
	const op = "RunMicrovm"
	req, err := c.launchRequest(s)
	if err != nil {
		return nil, err
	}
	r, err := c.api.RunMicrovmWithResponse(withOperation(ctx, op), req)
	if err != nil {
		return nil, err
	}
	return reply(op, r.JSON200, r.Body, nil)
}

func checkID(id string) error {
	if id == "" || len(id) > 256 || strings.ContainsFunc(id, isSpace) || strings.Contains(id, "/") {
		return refuse("", "MicroVM id %q must be 1..256 bytes with no whitespace or slash", id)
	}
	return nil
}

// GetMicrovm reads a MicroVM. Its endpoint is a bare host; see EndpointURL.
func (c *Client) GetMicrovm(ctx context.Context, id string) (*cp.GetMicrovmResponse, error) {
	const op = "GetMicrovm"
	if err := checkID(id); err != nil {
		return nil, err
	}
	r, err := c.api.GetMicrovmWithResponse(withOperation(ctx, op), id)
	if err != nil {
		return nil, err
	}
	return reply(op, r.JSON200, r.Body, nil)
}

// Suspend asks a RUNNING MicroVM to suspend; WaitSuspended waits for it.
func (c *Client) Suspend(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := c.api.SuspendMicrovmWithResponse(withOperation(ctx, "SuspendMicrovm"), id)
	return err
}

// Resume asks a SUSPENDED MicroVM to resume; WaitRunning waits for it.
func (c *Client) Resume(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := c.api.ResumeMicrovmWithResponse(withOperation(ctx, "ResumeMicrovm"), id)
	return err
}

// Terminate asks a MicroVM to terminate; WaitTerminated waits for it.
func (c *Client) Terminate(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	_, err := c.api.TerminateMicrovmWithResponse(withOperation(ctx, "TerminateMicrovm"), id)
	return err
}

// MintAuthToken mints a proxy token for calls through the MicroVM's
// endpoint. There is no shell counterpart: this client never calls
// CreateMicrovmShellAuthToken.
func (c *Client) MintAuthToken(ctx context.Context, id string, req TokenRequest) (AuthToken, error) {
	const op = "CreateMicrovmAuthToken"
	if err := checkID(id); err != nil {
		return AuthToken{}, err
	}
	body, err := req.wire()
	if err != nil {
		return AuthToken{}, err
	}
	minted := c.now()
	r, err := c.api.CreateMicrovmAuthTokenWithResponse(withOperation(ctx, op), id, body)
	if err != nil {
		return AuthToken{}, err
	}
	out, err := reply(op, r.JSON200, r.Body, nil)
	if err != nil {
		return AuthToken{}, err
	}
	return newAuthToken(out.AuthToken, req, minted)
}

// EndpointURL turns the bare host GetMicrovm and RunMicrovm return into a
// URL; the service sends no scheme (finding endpoint-bare-host). A platform
// endpoint gets https://. A loopback host (127.0.0.0/8, ::1, localhost,
// with or without a port) gets http://: no platform endpoint is loopback,
// and the local emulator serves its endpoint proxy as plain HTTP there, the
// one place client.Proxied accepts plain HTTP. A value that already has a
// scheme is returned unchanged.
func EndpointURL(endpoint string) string {
	if strings.Contains(endpoint, "://") {
		return endpoint
	}
	if isLoopbackHost(endpoint) {
		return "http://" + endpoint
	}
	return "https://" + endpoint
}

// isLoopbackHost reports whether a bare host[:port] names this machine.
func isLoopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func isSpace(r rune) bool {
	return r == ' ' || r == '\t' || r == '\n' || r == '\r' || r == '\v' || r == '\f'
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func ptr[T any](v T) *T { return &v }
