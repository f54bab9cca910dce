package emulator

import (
	"bytes"
	"errors"
	"strings"
)

// startDockerBuild runs version v's Dockerfile (dockerbuild.go) in the
// background, the version IN_PROGRESS until it ends: its guests then run on
// the image's own root. A FROM that cannot be had (no --base-image, no
// registry, never pulled before) leaves the guests on the host's system
// directories, as before, with every step that is then not performed named
// in the build log; any other failure fails the build with the step's line
// and status as its stateReason. Called with s.mu held.
func (s *Server) startDockerBuild(im *image, v *version, defaultCache string) {
	u := v.local
	group, stream := logGroupOf(im.name, v.spec), "build-"+v.id
	if s.opt.BaseImage == "" && !s.opt.PullBase {
		s.logf(group, stream, "no base image to build from (the emulator pulls none without being asked); this image's guests run on the host's system directories")
		for _, step := range u.skipped {
			s.logf(group, stream, "not performed by the emulator: %s", step)
		}
		return
	}
	cache := s.opt.BuildCache
	if cache == "" {
		cache = defaultCache
	}
	egress := v.spec.EgressNetworkConnectors != nil && len(*v.spec.EgressNetworkConnectors) > 0
	name := im.name
	v.dockerBuilding = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		var pending []byte // a step's output up to its last newline
		progress := func(e BuildEvent) {
			if s.opt.BuildProgress != nil {
				s.opt.BuildProgress(name, e)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			switch {
			case len(e.Output) > 0:
				pending = append(pending, e.Output...)
				for {
					i := bytes.IndexByte(pending, '\n')
					if i < 0 {
						break
					}
					s.logf(group, stream, "%s", pending[:i])
					pending = pending[i+1:]
				}
			case e.Done:
				if len(pending) > 0 {
					s.logf(group, stream, "%s", pending)
					pending = nil
				}
				if e.Cached {
					s.logf(group, stream, "step %d/%d: cached", e.Step, e.Steps)
				}
			default:
				s.logf(group, stream, "step %d/%d (line %d): %s", e.Step, e.Steps, e.Line, e.Instruction)
			}
		}
		img, err := BuildDockerfile(s.ctx, DockerBuild{
			Dockerfile: u.dockerfile, Context: u.context, BaseImage: s.opt.BaseImage, Cache: cache,
			Egress: egress, Progress: progress,
		})
		s.mu.Lock()
		defer s.mu.Unlock()
		v.dockerBuilding = false
		var unavailable *BaseUnavailableError
		switch {
		case err == nil:
			u.root, u.workdir, u.skipped = img.Root, img.Workdir, nil
			u.env = map[string]string{}
			for _, kv := range img.Env {
				k, val, _ := strings.Cut(kv, "=")
				u.env[k] = val
			}
			s.logf(group, stream, "built the image's root from %s: %d steps, %d found made; guests run on it", img.BaseDigest, img.Steps, img.Cached)
		case errors.As(err, &unavailable) && s.opt.BaseImage == "":
			s.logf(group, stream, "%v", err)
			s.logf(group, stream, "this image's guests run on the host's system directories; give the emulator --base-image to build its own root")
			for _, step := range u.skipped {
				s.logf(group, stream, "not performed by the emulator: %s", step)
			}
		default:
			v.plan.FailReason = err.Error()
			s.logf(group, stream, "the build failed: %v", err)
		}
	}()
}
