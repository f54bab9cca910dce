package emulator

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/imagebuild"
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
		for _, step := range u.Skipped {
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
		log := &buildLog{}
		progress := func(e BuildEvent) {
			if s.opt.BuildProgress != nil {
				s.opt.BuildProgress(name, e)
			}
			switch {
			case len(e.Output) > 0:
				// Whole lines (BuildEvent.Output), split here, outside the
				// lock; only the ones the log keeps take it.
				if kept := log.keep(e.Output); len(kept) > 0 {
					s.mu.Lock()
					for _, l := range kept {
						s.logf(group, stream, "%s", l)
					}
					s.mu.Unlock()
				}
			case e.Done:
				if e.Cached {
					s.mu.Lock()
					s.logf(group, stream, "step %d/%d: cached", e.Step, e.Steps)
					s.mu.Unlock()
				}
			default:
				s.mu.Lock()
				s.logf(group, stream, "step %d/%d (line %d): %s", e.Step, e.Steps, e.Line, e.Instruction)
				s.mu.Unlock()
			}
		}
		img, err := s.opt.Build(s.ctx, imagebuild.DockerBuild{
			Dockerfile: u.Dockerfile, Context: u.Context, BaseImage: s.opt.BaseImage, Cache: cache,
			Egress: egress, Progress: progress,
		})
		s.mu.Lock()
		defer s.mu.Unlock()
		v.dockerBuilding = false
		if note := log.dropped(); note != "" {
			s.logf(group, stream, "%s", note)
		}
		var unavailable *imagebuild.BaseUnavailableError
		switch {
		case err == nil:
			u.Root, u.Workdir, u.Skipped = img.Root, img.Workdir, nil
			u.Env = map[string]string{}
			for _, kv := range img.Env {
				k, val, _ := strings.Cut(kv, "=")
				u.Env[k] = val
			}
			s.logf(group, stream, "built the image's root from %s: %d steps, %d found made; guests run on it", img.BaseDigest, img.Steps, img.Cached)
		case errors.As(err, &unavailable) && s.opt.BaseImage == "":
			s.logf(group, stream, "%v", err)
			s.logf(group, stream, "this image's guests run on the host's system directories; give the emulator --base-image to build its own root")
			for _, step := range u.Skipped {
				s.logf(group, stream, "not performed by the emulator: %s", step)
			}
		default:
			v.plan.FailReason = err.Error()
			s.logf(group, stream, "the build failed: %v", err)
		}
	}()
}

// buildLog bounds what one build's step output leaves in its log group:
// taxonomy.LocalBuildLogLines lines and LocalBuildLogBytes bytes are kept,
// the rest only counted (each kept line costs the log its bytes and an
// event's overhead for the emulator's life).
type buildLog struct {
	mu                    sync.Mutex
	lines, bytes          int
	droppedN, droppedSize int64
}

// keep splits out, whole lines, and returns those the log keeps, without
// their newlines.
func (l *buildLog) keep(out []byte) [][]byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	var kept [][]byte
	for len(out) > 0 {
		i := bytes.IndexByte(out, '\n')
		if i < 0 {
			i = len(out)
		}
		line := out[:i]
		out = out[min(i+1, len(out)):]
		if l.lines >= taxonomy.LocalBuildLogLines || l.bytes+len(line) > taxonomy.LocalBuildLogBytes {
			l.droppedN++
			l.droppedSize += int64(len(line))
			continue
		}
		l.lines++
		l.bytes += len(line)
		kept = append(kept, line)
	}
	return kept
}

// dropped is the log's note on what it did not keep, or "".
func (l *buildLog) dropped() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.droppedN == 0 {
		return ""
	}
	return fmt.Sprintf("%d further lines of step output (%d bytes) are not kept: a local build's log keeps %d lines and %d bytes of it (LOCAL_BUILD_LOG_LINES, LOCAL_BUILD_LOG_BYTES)",
		l.droppedN, l.droppedSize, taxonomy.LocalBuildLogLines, taxonomy.LocalBuildLogBytes)
}

// getLocalBuild answers GET taxonomy.EmulatorImageBuildPath (rest is what
// follows its /images/ prefix): where the version's guests get their root
// and which of its Dockerfile's lines were not performed. A version with no
// artifact the emulator unpacked (AddImage's, or one it cannot read) runs
// on the host's directories and performed nothing.
func (s *Server) getLocalBuild(w http.ResponseWriter, r *http.Request, rest string) {
	if r.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, "ValidationException", ptr("GET only"))
		return
	}
	_, suffix, _ := strings.Cut(taxonomy.EmulatorImageBuildPath, "{imageVersion}")
	name, tail, ok := strings.Cut(rest, "/versions/")
	if !ok || !strings.HasSuffix(tail, suffix) || name == "" {
		writeError(w, http.StatusNotFound, "UnknownOperationException", ptr("no operation serves GET "+r.URL.EscapedPath()))
		return
	}
	name, nerr := url.PathUnescape(name)
	ver, verr := url.PathUnescape(strings.TrimSuffix(tail, suffix))
	if nerr != nil || verr != nil || ver == "" {
		writeError(w, http.StatusBadRequest, "ValidationException", ptr("the image name or version is not a path segment"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	im, v := s.findVersion(w, "GetLocalBuild", name, ver)
	if v == nil {
		return
	}
	_ = im
	out := cliapi.LocalBuild{Root: "host", Building: v.dockerBuilding, NotPerformed: []string{}}
	if u := v.local; u != nil {
		if u.Root != "" {
			out.Root = "image"
		}
		out.NotPerformed = append(out.NotPerformed, u.Skipped...)
	}
	writeJSON(w, http.StatusOK, out)
}
