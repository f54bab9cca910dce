package emulator

import (
	"encoding/base64"
	"fmt"
	"github.com/microvms/microvms/imagebuild"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	cp "github.com/microvms/microvms/gen/controlplane"
	"github.com/microvms/microvms/gen/taxonomy"
)

// image is one custom MicroVM image and its versions, oldest first.
type image struct {
	name      string
	arn       string
	state     cp.MicrovmImageState
	createdAt float64
	updatedAt *float64
	tags      map[string]string
	versions  []*version
	building  *version // the version whose builds are still running, if any
	active    string
	failed    string
}

// version is one image version: the build configuration it was made from,
// its own state and status, and its builds (one per chipset generation).
type version struct {
	id        string
	spec      cp.UpdateMicrovmImageRequest
	state     cp.MicrovmImageVersionState
	status    cp.MicrovmImageVersionStatus
	createdAt float64
	updatedAt *float64
	builds    []*build
	plan      BuildPlan
	seen      int
	local     *imagebuild.Unpacked // what a file:// artifact carried; nil for any other
	// dockerBuilding is true while the version's Dockerfile is being run.
	dockerBuilding bool
}

type build struct {
	id         string
	generation string
	state      cp.BuildState
	reason     *string
	createdAt  float64
	snapshot   *cp.SnapshotBuild
}

// managedVersions are the managed base's versions as its own listing spells
// them; a custom image's read-back spells the pinned one with a ".0".
var managedVersions = []string{"1", "0"}

const managedName = "al2023-1"

var imageNameRE = regexp.MustCompile("^" + taxonomy.ImageNamePattern + "$")

func (s *Server) managedArn() string {
	return fmt.Sprintf("arn:aws:lambda:%s:aws:microvm-image:%s", s.opt.Region, managedName)
}

func (s *Server) imageArn(name string) string {
	return fmt.Sprintf("arn:aws:lambda:%s:%s:microvm-image:%s", s.opt.Region, s.opt.Account, name)
}

// resolveImage finds an image by name or colon-form ARN. The slash form is
// answered the way the service answers it: a 403 that reads like IAM.
func (s *Server) resolveImage(w http.ResponseWriter, operation, id string) *image {
	if strings.Contains(id, ":microvm-image/") {
		writeError(w, http.StatusForbidden, "AccessDeniedException", ptr(fmt.Sprintf(
			"User: arn:aws:iam::%s:user/emulator is not authorized to perform: lambda:%s on resource: %s because no identity-based policy allows the lambda:%s action",
			s.opt.Account, operation, id, operation)))
		return nil
	}
	name := id
	if strings.HasPrefix(id, "arn:") {
		prefix := s.imageArn("")
		if !strings.HasPrefix(id, prefix) {
			notFound(w, "MicroVMImage", id)
			return nil
		}
		name = strings.TrimPrefix(id, prefix)
	}
	im := s.images[name]
	if im == nil {
		notFound(w, "MicroVMImage", id)
	}
	return im
}

func (im *image) version(id string) *version {
	for _, v := range im.versions {
		if v.id == id {
			return v
		}
	}
	return nil
}

// observe advances the image's running build by one step.
func (s *Server) observe(im *image) {
	v := im.building
	if v == nil || v.plan.Wedge {
		return
	}
	if v.dockerBuilding {
		// The Dockerfile is still being run: IN_PROGRESS however often it
		// is read.
		v.state = cp.MicrovmImageVersionStateINPROGRESS
		for _, b := range v.builds {
			b.state = cp.BuildStateINPROGRESS
		}
		return
	}
	v.seen++
	if !s.opt.WallClock && v.seen <= max(v.plan.Steps, 1) {
		v.state = cp.MicrovmImageVersionStateINPROGRESS
		for _, b := range v.builds {
			b.state = cp.BuildStateINPROGRESS
		}
		return
	}
	now := s.now()
	v.updatedAt, im.updatedAt, im.building = &now, &now, nil
	first := len(im.versions) == 1
	if v.plan.FailReason == "" {
		if reason, unanswered := readyHookUnanswered(v); unanswered {
			// The platform's ready hook is dialled on hooks.port; a daemon
			// listening elsewhere never answers it. The code was installed,
			// so the builds keep codeInstallSizeInBytes alone, and the log
			// stays as green as the platform's: no line says why
			// (findings agent-port-agreement, build-introspection).
			v.state = cp.MicrovmImageVersionStateFAILED
			for _, b := range v.builds {
				b.state, b.reason = cp.BuildStateFAILED, ptr(reason)
				b.snapshot = &cp.SnapshotBuild{CodeInstallSizeInBytes: ptr[int64](214093824)}
			}
			im.failed = v.id
			im.state = map[bool]cp.MicrovmImageState{true: cp.MicrovmImageStateCREATEFAILED, false: cp.MicrovmImageStateUPDATEFAILED}[first]
			return
		}
	}
	if v.plan.FailReason != "" {
		// The reason lives on the builds only; the version says FAILED and
		// nothing else, and the image cannot say anything.
		v.state = cp.MicrovmImageVersionStateFAILED
		for _, b := range v.builds {
			b.state, b.reason = cp.BuildStateFAILED, ptr(v.plan.FailReason)
		}
		im.failed = v.id
		im.state = map[bool]cp.MicrovmImageState{true: cp.MicrovmImageStateCREATEFAILED, false: cp.MicrovmImageStateUPDATEFAILED}[first]
		s.logf(logGroupOf(im.name, v.spec), "build-"+v.id, "version %s FAILED: %s", v.id, v.plan.FailReason)
		return
	}
	s.logf(logGroupOf(im.name, v.spec), "build-"+v.id, "version %s SUCCESSFUL", v.id)
	v.state = cp.MicrovmImageVersionStateSUCCESSFUL
	for _, b := range v.builds {
		b.state = cp.BuildStateSUCCESSFUL
		b.snapshot = &cp.SnapshotBuild{MemorySnapshotSizeInBytes: ptr[int64](574869504), CodeInstallSizeInBytes: ptr[int64](214093824), DiskSnapshotSizeInBytes: ptr[int64](23474176)}
	}
	im.active = v.id
	im.state = map[bool]cp.MicrovmImageState{true: cp.MicrovmImageStateCREATED, false: cp.MicrovmImageStateUPDATED}[first]
}

// readyHookUnanswered reports whether v's daemon would listen on a port
// other than the one its build hooks are dialled on: the image's
// AGENTD_PORT (its Dockerfile's ENV, then the version's environment; 9000
// when neither sets it) against hooks.port (9000 when unset). Unknowable
// (no artifact read and no AGENTD_PORT in the environment) is not a
// mismatch. The reason is the one the platform gives a daemon that never
// answered its ready hook.
func readyHookUnanswered(v *version) (string, bool) {
	hookPort := taxonomy.DefaultAgentPort
	if h := v.spec.Hooks; h != nil && h.Port != nil {
		hookPort = *h.Port
	}
	guest, known := "", false
	if v.local != nil {
		guest, known = v.local.Env["AGENTD_PORT"], true
	}
	if e := v.spec.EnvironmentVariables; e != nil {
		if p, ok := (*e)["AGENTD_PORT"]; ok {
			guest, known = p, true
		}
	}
	if !known {
		return "", false
	}
	if strings.TrimSpace(guest) == "" {
		guest = strconv.Itoa(taxonomy.DefaultAgentPort)
	}
	if n, err := strconv.Atoi(strings.TrimSpace(guest)); err == nil && n == hookPort {
		return "", false
	}
	timeout := 300
	if h := v.spec.Hooks; h != nil && h.MicrovmImageHooks != nil && h.MicrovmImageHooks.ReadyTimeoutInSeconds != nil && *h.MicrovmImageHooks.ReadyTimeoutInSeconds > 0 {
		timeout = *h.MicrovmImageHooks.ReadyTimeoutInSeconds
	}
	return fmt.Sprintf("Ready hook invocation timed out after %s", isoSeconds(timeout)), true
}

// isoSeconds spells a duration as the service does in a hook-timeout
// reason: PT5M, PT90S, PT1H.
func isoSeconds(sec int) string {
	switch {
	case sec%3600 == 0:
		return fmt.Sprintf("PT%dH", sec/3600)
	case sec%60 == 0:
		return fmt.Sprintf("PT%dM", sec/60)
	}
	return fmt.Sprintf("PT%dS", sec)
}

// validateBuildSpec applies the checks the service makes on a build
// configuration before it creates anything.
func (s *Server) validateBuildSpec(w http.ResponseWriter, spec *cp.UpdateMicrovmImageRequest) bool {
	bad := func(msg string) bool {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr(msg))
		return false
	}
	if spec.BaseImageArn != s.managedArn() {
		return bad(fmt.Sprintf("No managed MicroVM Image with arn %s is available", spec.BaseImageArn))
	}
	if v := spec.BaseImageVersion; v != nil && !slices.Contains(managedVersions, *v) {
		return bad(fmt.Sprintf("No managed MicroVM Image with arn %s and version %s is available", spec.BaseImageArn, *v))
	}
	if spec.CodeArtifact.Uri == nil || *spec.CodeArtifact.Uri == "" {
		return bad("codeArtifact must set exactly one member")
	}
	if l := spec.Logging; l != nil && (l.CloudWatch == nil) == (l.Disabled == nil) {
		return bad("logging must set exactly one member")
	}
	if c := spec.EgressNetworkConnectors; c != nil {
		if len(*c) > 1 {
			return bad("egressNetworkConnectors: Member must have length less than or equal to 1")
		}
		for _, arn := range *c {
			if !connectorARN(arn) {
				return bad("Malformed network connector ARN")
			}
		}
	}
	if spec.ClientToken != nil && (len(*spec.ClientToken) < 1 || len(*spec.ClientToken) > 128) {
		return bad("clientToken: Member must have length between 1 and 128")
	}
	return true
}

func connectorARN(s string) bool {
	return strings.HasPrefix(s, "arn:aws:lambda:") && strings.Contains(s, ":network-connector:aws-network-connector:")
}

// newVersion records a version of im built from spec and starts its builds.
func (s *Server) newVersion(im *image, spec cp.UpdateMicrovmImageRequest, wedge bool) *version {
	now := s.now()
	plan := s.opt.Builds(im.name)
	plan.Wedge = plan.Wedge || wedge
	v := &version{
		id:        fmt.Sprintf("%d.0", len(im.versions)+1),
		spec:      spec,
		state:     cp.MicrovmImageVersionStatePENDING,
		status:    cp.ACTIVE,
		createdAt: now,
		plan:      plan,
	}
	// The service normalises a pinned base version on the way back, and
	// records one even when none was pinned.
	base := "1"
	if spec.BaseImageVersion != nil {
		base = *spec.BaseImageVersion
	}
	v.spec.BaseImageVersion = ptr(base + ".0")
	v.spec.ClientToken = nil
	for _, gen := range []string{"4", "3"} {
		v.builds = append(v.builds, &build{id: s.nextID(""), generation: gen, state: cp.BuildStatePENDING, createdAt: now})
	}
	im.versions = append(im.versions, v)
	im.building = v
	s.localBuild(im, v)
	return v
}

// logGroupOf is the log group a version's build writes to: the one its
// logging names, else the service's default (finding build-logs-location).
func logGroupOf(name string, spec cp.UpdateMicrovmImageRequest) string {
	if l := spec.Logging; l != nil && l.CloudWatch != nil && l.CloudWatch.LogGroup != nil && *l.CloudWatch.LogGroup != "" {
		return *l.CloudWatch.LogGroup
	}
	return taxonomy.BuildLogGroupPrefix + name
}

// localBuild unpacks a file:// artifact for v's guests, or fails the build
// with the reason; any other artifact leaves the guests on the launcher's
// own daemon. Called with s.mu held.
func (s *Server) localBuild(im *image, v *version) {
	group, stream := logGroupOf(im.name, v.spec), "build-"+v.id
	uri := ""
	if v.spec.CodeArtifact.Uri != nil {
		uri = *v.spec.CodeArtifact.Uri
	}
	s.logf(group, stream, "version %s of %s: building from %s", v.id, im.name, uri)
	var artifact []byte
	var err error
	if path := imagebuild.ArtifactPath(uri); path != "" {
		artifact, err = imagebuild.ReadArtifactFile(path)
	} else if bucket, key, ok := imagebuild.ArtifactObject(uri); ok && s.s3.buckets[bucket] != nil {
		// A bucket of the emulator's own S3 slice: the build reads the
		// object as the platform's build reads it from S3, and a missing
		// object fails the build.
		obj := s.s3.buckets[bucket].objects[key]
		if obj == nil {
			err = fmt.Errorf("reading the code artifact: s3://%s/%s: NoSuchKey: The specified key does not exist", bucket, key)
		} else {
			artifact = obj.bytes()
		}
	} else {
		s.logf(group, stream, "the emulator cannot read %s; this image's guests run the emulator's own agentd", uri)
		return
	}
	dir, derr := s.state()
	if err == nil && derr != nil {
		err = derr
	}
	if err == nil {
		v.local, err = imagebuild.Unpack(artifact, filepath.Join(dir, "images", im.name, v.id))
	}
	if err != nil {
		v.plan.FailReason = err.Error()
		return
	}
	s.logf(group, stream, "unpacked the artifact: guests run its agentd")
	s.startDockerBuild(im, v, filepath.Join(dir, "build-cache"))
}

// AddImage creates a built, ACTIVE image named name directly (no artifact,
// no build, its run hook enabled), for tests and embedded use that need an image to launch from.
// It returns the image's colon-form ARN, which is what RunMicrovm and
// sandbox.Options.Image take. Its guests run the emulator's host agentd.
func (s *Server) AddImage(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	im := &image{name: name, arn: s.imageArn(name), state: cp.MicrovmImageStateCREATING, createdAt: s.now()}
	s.images[name] = im
	// Its run hook is enabled, as client/build enables it: the model's
	// default (DISABLED) would leave the guest's daemon without a token.
	hooks := &cp.Hooks{MicrovmHooks: &cp.MicrovmHooks{Run: ptr(cp.ENABLED)}}
	v := s.newVersion(im, cp.UpdateMicrovmImageRequest{BaseImageArn: s.managedArn(), BuildRoleArn: "arn:aws:iam::" + s.opt.Account + ":role/build", CodeArtifact: cp.CodeArtifact{Uri: ptr("s3://emulator/" + name + ".zip")}, Hooks: hooks}, false)
	v.plan = BuildPlan{Steps: 0}
	s.observe(im)
	s.observe(im)
	return im.arn
}

func (s *Server) CreateMicrovmImage(w http.ResponseWriter, r *http.Request) {
	var req cp.CreateMicrovmImageRequest
	if !decode(w, r, &req) {
		return
	}
	spec := specOf(req)
	if !imageNameRE.MatchString(req.Name) || len(req.Name) > 64 {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr("name: Member must satisfy regular expression pattern: "+taxonomy.ImageNamePattern))
		return
	}
	if !s.validateBuildSpec(w, &spec) {
		return
	}
	replay := false
	if req.ClientToken != nil {
		if prev, seen := s.tokens[*req.ClientToken]; seen {
			if im := s.images[prev]; im != nil && prev == req.Name {
				// An idempotent retry of a create that still exists.
				writeJSON(w, http.StatusCreated, s.createReply(im, im.versions[0]))
				return
			}
			// The token outlived its image: the service replays the old
			// create as a no-op and the new image's builds never start.
			replay = true
		}
	}
	if s.images[req.Name] != nil {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr(fmt.Sprintf("A MicroVM image with the name '%s' already exists in this account", req.Name)))
		return
	}
	if req.ClientToken != nil {
		s.tokens[*req.ClientToken] = req.Name
	}
	im := &image{name: req.Name, arn: s.imageArn(req.Name), state: cp.MicrovmImageStateCREATING, createdAt: s.now()}
	if req.Tags != nil {
		im.tags = *req.Tags
	}
	s.images[req.Name] = im
	v := s.newVersion(im, spec, replay)
	writeJSON(w, http.StatusCreated, s.createReply(im, v))
}

func specOf(req cp.CreateMicrovmImageRequest) cp.UpdateMicrovmImageRequest {
	return cp.UpdateMicrovmImageRequest{
		AdditionalOsCapabilities: req.AdditionalOsCapabilities, BaseImageArn: req.BaseImageArn, BaseImageVersion: req.BaseImageVersion,
		BuildRoleArn: req.BuildRoleArn, ClientToken: req.ClientToken, CodeArtifact: req.CodeArtifact, CpuConfigurations: req.CpuConfigurations,
		Description: req.Description, EgressNetworkConnectors: req.EgressNetworkConnectors, EnvironmentVariables: req.EnvironmentVariables,
		Hooks: req.Hooks, Logging: req.Logging, Resources: req.Resources,
	}
}

func (s *Server) createReply(im *image, v *version) cp.CreateMicrovmImageResponse {
	sp := v.spec
	return cp.CreateMicrovmImageResponse{
		AdditionalOsCapabilities: sp.AdditionalOsCapabilities, BaseImageArn: sp.BaseImageArn, BaseImageVersion: sp.BaseImageVersion,
		BuildRoleArn: sp.BuildRoleArn, CodeArtifact: sp.CodeArtifact, CpuConfigurations: sp.CpuConfigurations, CreatedAt: im.createdAt,
		Description: sp.Description, EgressNetworkConnectors: sp.EgressNetworkConnectors, EnvironmentVariables: sp.EnvironmentVariables,
		Hooks: sp.Hooks, ImageArn: im.arn, ImageVersion: v.id, LatestActiveImageVersion: nonEmpty(im.active),
		LatestFailedImageVersion: nonEmpty(im.failed), Logging: sp.Logging, Name: im.name, Resources: sp.Resources, State: im.state,
		Tags: tagsPtr(im.tags), UpdatedAt: im.updatedAt,
	}
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func tagsPtr(t map[string]string) *map[string]string {
	if len(t) == 0 {
		return nil
	}
	c := make(map[string]string, len(t))
	for k, v := range t {
		c[k] = v
	}
	return &c
}

func (s *Server) UpdateMicrovmImage(w http.ResponseWriter, r *http.Request, imageIdentifier string) {
	var req cp.UpdateMicrovmImageRequest
	if !decode(w, r, &req) {
		return
	}
	im := s.resolveImage(w, "UpdateMicrovmImage", imageIdentifier)
	if im == nil || !s.validateBuildSpec(w, &req) {
		return
	}
	if im.building != nil {
		writeError(w, http.StatusConflict, "ConflictException", ptr("The MicroVM image is being built"))
		return
	}
	im.state = cp.MicrovmImageStateUPDATING
	v := s.newVersion(im, req, false)
	c := s.createReply(im, v)
	writeJSON(w, http.StatusOK, cp.UpdateMicrovmImageResponse{
		AdditionalOsCapabilities: c.AdditionalOsCapabilities, BaseImageArn: c.BaseImageArn, BaseImageVersion: c.BaseImageVersion,
		BuildRoleArn: c.BuildRoleArn, CodeArtifact: c.CodeArtifact, CpuConfigurations: c.CpuConfigurations, CreatedAt: c.CreatedAt,
		Description: c.Description, EgressNetworkConnectors: c.EgressNetworkConnectors, EnvironmentVariables: c.EnvironmentVariables,
		Hooks: c.Hooks, ImageArn: c.ImageArn, ImageVersion: c.ImageVersion, LatestActiveImageVersion: c.LatestActiveImageVersion,
		LatestFailedImageVersion: c.LatestFailedImageVersion, Logging: c.Logging, Name: c.Name, Resources: c.Resources, State: c.State,
		UpdatedAt: v.createdAt,
	})
}

func (s *Server) GetMicrovmImage(w http.ResponseWriter, r *http.Request, imageIdentifier string) {
	im := s.resolveImage(w, "GetMicrovmImage", imageIdentifier)
	if im == nil {
		return
	}
	s.observe(im)
	writeJSON(w, http.StatusOK, cp.GetMicrovmImageOutput{
		CreatedAt: im.createdAt, ImageArn: im.arn, LatestActiveImageVersion: nonEmpty(im.active),
		LatestFailedImageVersion: nonEmpty(im.failed), Name: im.name, State: im.state, Tags: tagsPtr(im.tags), UpdatedAt: im.updatedAt,
	})
}

func (s *Server) DeleteMicrovmImage(w http.ResponseWriter, r *http.Request, imageIdentifier string) {
	im := s.resolveImage(w, "DeleteMicrovmImage", imageIdentifier)
	if im == nil {
		return
	}
	if im.building != nil {
		// An image in CREATING cannot be deleted, which is what makes the
		// replay wedge expensive.
		writeError(w, http.StatusConflict, "ConflictException", ptr("Cannot delete a MicroVM image while it is being built"))
		return
	}
	delete(s.images, im.name)
	writeJSON(w, http.StatusOK, cp.DeleteMicrovmImageOutput{ImageIdentifier: imageIdentifier, State: cp.MicrovmImageStateDELETING})
}

func (s *Server) versionSummary(im *image, v *version) cp.MicrovmImageVersionSummary {
	sp := v.spec
	return cp.MicrovmImageVersionSummary{
		AdditionalOsCapabilities: sp.AdditionalOsCapabilities, BaseImageArn: sp.BaseImageArn, BaseImageVersion: sp.BaseImageVersion,
		BuildRoleArn: sp.BuildRoleArn, CodeArtifact: sp.CodeArtifact, CpuConfigurations: sp.CpuConfigurations, CreatedAt: v.createdAt,
		Description: sp.Description, EgressNetworkConnectors: sp.EgressNetworkConnectors, EnvironmentVariables: sp.EnvironmentVariables,
		Hooks: sp.Hooks, ImageArn: im.arn, ImageVersion: v.id, Logging: sp.Logging, Resources: sp.Resources, State: v.state,
		Status: v.status, Tags: tagsPtr(im.tags), UpdatedAt: v.updatedAt,
	}
}

func (s *Server) ListMicrovmImageVersions(w http.ResponseWriter, r *http.Request, imageIdentifier string, params cp.ListMicrovmImageVersionsParams) {
	im := s.resolveImage(w, "ListMicrovmImageVersions", imageIdentifier)
	if im == nil {
		return
	}
	s.observe(im)
	items, next, ok := paginate(w, im.versions, params.MaxResults, params.NextToken)
	if !ok {
		return
	}
	out := cp.ListMicrovmImageVersionsOutput{Items: []cp.MicrovmImageVersionSummary{}, NextToken: next}
	for _, v := range items {
		out.Items = append(out.Items, s.versionSummary(im, v))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) findVersion(w http.ResponseWriter, operation, imageIdentifier, imageVersion string) (*image, *version) {
	im := s.resolveImage(w, operation, imageIdentifier)
	if im == nil {
		return nil, nil
	}
	v := im.version(imageVersion)
	if v == nil {
		notFound(w, "MicroVMImageVersion", imageIdentifier+" version "+imageVersion)
		return nil, nil
	}
	return im, v
}

func (s *Server) GetMicrovmImageVersion(w http.ResponseWriter, r *http.Request, imageIdentifier string, imageVersion string) {
	im, v := s.findVersion(w, "GetMicrovmImageVersion", imageIdentifier, imageVersion)
	if v == nil {
		return
	}
	s.observe(im)
	writeJSON(w, http.StatusOK, cp.GetMicrovmImageVersionOutput(s.versionSummary(im, v)))
}

func (s *Server) UpdateMicrovmImageVersion(w http.ResponseWriter, r *http.Request, imageIdentifier string, imageVersion string) {
	var req cp.UpdateMicrovmImageVersionRequest
	if !decode(w, r, &req) {
		return
	}
	if !req.Status.Valid() {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr("status: Member must satisfy enum value set: [ACTIVE, INACTIVE]"))
		return
	}
	im, v := s.findVersion(w, "UpdateMicrovmImageVersion", imageIdentifier, imageVersion)
	if v == nil {
		return
	}
	v.status = req.Status
	now := s.now()
	v.updatedAt = &now
	writeJSON(w, http.StatusOK, cp.UpdateMicrovmImageVersionResponse(s.versionSummary(im, v)))
}

func (s *Server) DeleteMicrovmImageVersion(w http.ResponseWriter, r *http.Request, imageIdentifier string, imageVersion string) {
	im, v := s.findVersion(w, "DeleteMicrovmImageVersion", imageIdentifier, imageVersion)
	if v == nil {
		return
	}
	if len(im.versions) == 1 || im.building == v {
		writeError(w, http.StatusConflict, "ConflictException", ptr("Cannot delete the only version of a MicroVM image, or one that is being built"))
		return
	}
	im.versions = slices.DeleteFunc(im.versions, func(x *version) bool { return x == v })
	writeJSON(w, http.StatusOK, cp.DeleteMicrovmImageVersionOutput{ImageIdentifier: imageIdentifier, ImageVersion: imageVersion, State: cp.MicrovmImageVersionStateDELETING})
}

func (s *Server) buildSummary(im *image, v *version, b *build) cp.MicrovmImageBuildSummary {
	return cp.MicrovmImageBuildSummary{
		Architecture: cp.ARM64, BuildId: b.id, BuildState: b.state, Chipset: cp.GRAVITON, ChipsetGeneration: b.generation,
		CreatedAt: b.createdAt, ImageArn: im.arn, ImageVersion: v.id, StateReason: b.reason,
	}
}

func (s *Server) ListMicrovmImageBuilds(w http.ResponseWriter, r *http.Request, imageIdentifier string, imageVersion string, params cp.ListMicrovmImageBuildsParams) {
	im, v := s.findVersion(w, "ListMicrovmImageBuilds", imageIdentifier, imageVersion)
	if v == nil {
		return
	}
	s.observe(im)
	builds := slices.DeleteFunc(slices.Clone(v.builds), func(b *build) bool {
		return params.ChipsetGeneration != nil && *params.ChipsetGeneration != b.generation
	})
	items, next, ok := paginate(w, builds, params.MaxResults, params.NextToken)
	if !ok {
		return
	}
	out := cp.ListMicrovmImageBuildsOutput{Items: []cp.MicrovmImageBuildSummary{}, NextToken: next}
	for _, b := range items {
		out.Items = append(out.Items, s.buildSummary(im, v, b))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) GetMicrovmImageBuild(w http.ResponseWriter, r *http.Request, imageIdentifier string, imageVersion string, buildId string) {
	im, v := s.findVersion(w, "GetMicrovmImageBuild", imageIdentifier, imageVersion)
	if v == nil {
		return
	}
	s.observe(im)
	for _, b := range v.builds {
		if b.id == buildId {
			sum := s.buildSummary(im, v, b)
			writeJSON(w, http.StatusOK, cp.GetMicrovmImageBuildOutput{
				Architecture: sum.Architecture, BuildId: sum.BuildId, BuildState: sum.BuildState, Chipset: sum.Chipset,
				ChipsetGeneration: sum.ChipsetGeneration, CreatedAt: sum.CreatedAt, ImageArn: sum.ImageArn,
				ImageVersion: sum.ImageVersion, SnapshotBuild: b.snapshot, StateReason: sum.StateReason,
			})
			return
		}
	}
	notFound(w, "MicroVMImageBuild", buildId)
}

func (s *Server) ListMicrovmImages(w http.ResponseWriter, r *http.Request, params cp.ListMicrovmImagesParams) {
	names := make([]string, 0, len(s.images))
	for n := range s.images {
		names = append(names, n)
	}
	slices.Sort(names)
	// The service pages over every image and filters each page afterwards,
	// so a page may come back empty while later pages match.
	page, next, ok := paginate(w, names, params.MaxResults, params.NextToken)
	if !ok {
		return
	}
	out := cp.ListMicrovmImagesResponse{Items: []cp.MicrovmImageSummary{}, NextToken: next}
	for _, n := range page {
		if params.NameFilter != nil && !strings.Contains(n, *params.NameFilter) {
			continue
		}
		im := s.images[n]
		out.Items = append(out.Items, cp.MicrovmImageSummary{
			CreatedAt: im.createdAt, ImageArn: im.arn, LatestActiveImageVersion: nonEmpty(im.active),
			LatestFailedImageVersion: nonEmpty(im.failed), Name: im.name, State: im.state,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) ListManagedMicrovmImages(w http.ResponseWriter, r *http.Request, params cp.ListManagedMicrovmImagesParams) {
	items, next, ok := paginate(w, []string{s.managedArn()}, params.MaxResults, params.NextToken)
	if !ok {
		return
	}
	out := cp.ListManagedMicrovmImagesOutput{Items: []cp.ManagedMicrovmImageSummary{}, NextToken: next}
	for _, arn := range items {
		out.Items = append(out.Items, cp.ManagedMicrovmImageSummary{ImageArn: arn, CreatedAt: 1781654400})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) ListManagedMicrovmImageVersions(w http.ResponseWriter, r *http.Request, imageIdentifier string, params cp.ListManagedMicrovmImageVersionsParams) {
	if imageIdentifier != s.managedArn() {
		notFound(w, "ManagedMicroVMImage", imageIdentifier)
		return
	}
	items, next, ok := paginate(w, managedVersions, params.MaxResults, params.NextToken)
	if !ok {
		return
	}
	out := cp.ListManagedMicrovmImageVersionsOutput{Items: []cp.ManagedMicrovmImageVersion{}, NextToken: next}
	for _, v := range items {
		out.Items = append(out.Items, cp.ManagedMicrovmImageVersion{ImageArn: imageIdentifier, ImageVersion: v, CreatedAt: 1781654400})
	}
	writeJSON(w, http.StatusOK, out)
}

// paginate slices items by an opaque cursor. Cursors are URL-safe base64
// with '=' padding, as the service's are, so a client that does not
// percent-encode them is caught by gate.
func paginate[T any](w http.ResponseWriter, items []T, maxResults *int, nextToken *string) ([]T, *string, bool) {
	size := 50
	if maxResults != nil {
		if *maxResults < 1 || *maxResults > 50 {
			writeError(w, http.StatusBadRequest, "ValidationException", ptr("maxResults: Member must have value between 1 and 50"))
			return nil, nil, false
		}
		size = *maxResults
	}
	start := 0
	if nextToken != nil {
		raw, err := base64.URLEncoding.DecodeString(*nextToken)
		n, perr := strconv.Atoi(strings.TrimRight(strings.TrimPrefix(string(raw), "offset:"), "."))
		if err != nil || perr != nil || n < 0 || n > len(items) {
			writeError(w, http.StatusBadRequest, "ValidationException", ptr("Invalid pagination token"))
			return nil, nil, false
		}
		start = n
	}
	end := min(start+size, len(items))
	var next *string
	if end < len(items) {
		plain := fmt.Sprintf("offset:%d", end)
		for len(plain)%3 == 0 {
			plain += "." // keep the encoding padded, as real cursors often are
		}
		next = ptr(base64.URLEncoding.EncodeToString([]byte(plain)))
	}
	return items[start:end], next, true
}

var taggableImage = regexp.MustCompile(`^arn:aws[a-zA-Z-]*:lambda:[a-z0-9-]+:\d{12}:microvm-image:[a-zA-Z0-9-_]+$`)

func (s *Server) taggable(w http.ResponseWriter, resource string) *image {
	if !taggableImage.MatchString(resource) {
		// The shared Lambda ARN grammar knows images but not MicroVMs.
		writeError(w, http.StatusBadRequest, "InvalidParameterValueException", ptr("1 validation error detected: Value '"+resource+"' at 'resource' failed to satisfy constraint"))
		return nil
	}
	im := s.images[strings.TrimPrefix(resource, s.imageArn(""))]
	if im == nil {
		notFound(w, "MicroVMImage", "MicroVMImageID: "+resource)
	}
	return im
}

func (s *Server) TagResource(w http.ResponseWriter, r *http.Request, resource string) {
	var req cp.TagResourceRequest
	if !decode(w, r, &req) {
		return
	}
	im := s.taggable(w, resource)
	if im == nil {
		return
	}
	if im.tags == nil {
		im.tags = map[string]string{}
	}
	for k, v := range req.Tags {
		im.tags[k] = v
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) UntagResource(w http.ResponseWriter, r *http.Request, resource string, params cp.UntagResourceParams) {
	im := s.taggable(w, resource)
	if im == nil {
		return
	}
	for _, k := range params.TagKeys {
		delete(im.tags, k)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) ListTags(w http.ResponseWriter, r *http.Request, resource string) {
	im := s.taggable(w, resource)
	if im == nil {
		return
	}
	tags := tagsPtr(im.tags)
	if tags == nil {
		tags = &map[string]string{}
	}
	writeJSON(w, http.StatusOK, cp.ListTagsResponse{Tags: tags})
}
