package checkpoint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/microvms/microvms/gen/cliapi"
)

// Manifest is a checkpoint's manifest, the shape api/cli.yaml declares.
type Manifest = cliapi.CheckpointManifest

// Format is the manifest format this package writes and reads.
const Format = 1

// MaxManifestBytes bounds a manifest read back from the bucket: a manifest
// is a few hundred bytes plus its paths and labels.
const MaxManifestBytes = 1 << 20

// digestPattern is a sha256 digest as manifests and keys spell it.
var digestPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sha256:[0-9a-f]{64}$`) })

// namePattern is what a checkpoint name may be: it becomes part of an S3
// key, so nothing that needs escaping and no path separators.
var namePattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`) })

// decodeManifest reads a manifest strictly: unknown keys, a format it does
// not know, or fields that cannot describe a real object are refused as
// foreign, because a restore trusts the manifest to say what to verify.
func decodeManifest(b []byte) (Manifest, error) {
	var m Manifest
	if len(b) > MaxManifestBytes {
		return m, refusef(ReasonForeign, "the manifest is %d bytes, over %d", len(b), MaxManifestBytes)
	}
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&m); err != nil {
		return Manifest{}, refusef(ReasonForeign, "the manifest is not a checkpoint manifest: %v", err)
	}
	if d.More() {
		return Manifest{}, refusef(ReasonForeign, "the manifest has bytes after its JSON object")
	}
	switch {
	case m.Format != Format:
		return Manifest{}, refusef(ReasonForeign, "the manifest's format is %d; this client reads format %d", m.Format, Format)
	case !digestPattern().MatchString(m.Digest):
		return Manifest{}, refusef(ReasonForeign, "the manifest's digest %q is not sha256:<64 hex>", m.Digest)
	case m.Size <= 0 || m.TreeBytes < 0 || m.Files < 0:
		return Manifest{}, refusef(ReasonForeign, "the manifest's sizes (object %d, tree %d, files %d) describe no object", m.Size, m.TreeBytes, m.Files)
	case m.Compression != "zstd":
		return Manifest{}, refusef(ReasonForeign, "the manifest's compression %q is not zstd", m.Compression)
	case m.ImageARN == "":
		return Manifest{}, refusef(ReasonForeign, "the manifest names no image")
	case m.Name != "" && !namePattern().MatchString(m.Name):
		return Manifest{}, refusef(ReasonForeign, "the manifest's name %q is not a checkpoint name", m.Name)
	}
	for _, p := range m.Paths {
		if !strings.HasPrefix(p, "/") {
			return Manifest{}, refusef(ReasonForeign, "the manifest's path %q is not absolute", p)
		}
	}
	return m, nil
}

func encodeManifest(m Manifest) ([]byte, error) {
	if m.Paths == nil {
		m.Paths = []string{}
	}
	if m.Labels == nil {
		m.Labels = []cliapi.CheckpointLabel{}
	}
	if m.ChangedUnderneath == nil {
		m.ChangedUnderneath = []string{}
	}
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encoding the manifest: %w", err)
	}
	return append(b, '\n'), nil
}
