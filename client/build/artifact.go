package build

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"regexp"
	"sync"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// CheckDaemon refuses a daemon binary the platform cannot run: anything but
// an ELF executable for aarch64. A host-architecture binary builds cleanly and
// then fails as a ready-hook timeout that says nothing about architecture.
func CheckDaemon(binary []byte) error { return CheckDaemonFor(binary, elf.EM_AARCH64) }

// CheckDaemonFor is CheckDaemon for guests of another architecture: the
// local emulator runs its guests on the host, so an image built for it
// carries a daemon for the host's machine (emulator.HostMachine).
func CheckDaemonFor(binary []byte, machine elf.Machine) error {
	if machine == elf.EM_NONE {
		machine = elf.EM_AARCH64
	}
	f, err := elf.NewFile(bytes.NewReader(binary))
	if err != nil {
		return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingArm64Only,
			"the daemon binary is not an ELF file (%v); build it with GOOS=linux GOARCH=arm64", err)
	}
	defer f.Close()
	if machine != elf.EM_AARCH64 {
		if f.Machine != machine {
			return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingArm64Only,
				"the daemon binary is %s, but these guests run on %s", f.Machine, machine)
		}
	} else if f.Machine != elf.EM_AARCH64 || f.Class != elf.ELFCLASS64 {
		return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingArm64Only,
			"the daemon binary is %s %s, but the platform runs aarch64 guests only; build it with GOOS=linux GOARCH=arm64", f.Class, f.Machine)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingArm64Only,
			"the daemon binary is an ELF %s, not an executable", f.Type)
	}
	return nil
}

// The artifact's two entries. The Dockerfile's COPY names "agentd".
const (
	dockerfileEntry = "Dockerfile"
	daemonEntry     = "agentd"
)

// zipEpoch is the one modification time every entry carries, so the zip's
// bytes depend on its inputs alone and not on when or where it was built.
var zipEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Artifact zips the Dockerfile and the daemon into the bytes codeArtifact
// points at. It is deterministic: equal inputs give equal bytes. The daemon
// entry carries mode 0755 itself, because a non-executable daemon surfaces as
// a run-hook timeout rather than as a permission error. There is no parameter
// through which a token could reach the zip: the image is a snapshot every VM
// shares, so per-VM secrets travel in the runHookPayload.
func Artifact(dockerfile string, daemon []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	entries := []struct {
		name string
		mode fs.FileMode
		data []byte
	}{
		{dockerfileEntry, 0o644, []byte(dockerfile)},
		{daemonEntry, 0o755, daemon},
	}
	for _, e := range entries {
		h := &zip.FileHeader{Name: e.name, Method: zip.Deflate, Modified: zipEpoch}
		h.SetMode(e.mode)
		w, err := zw.CreateHeader(h)
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(e.data); err != nil {
			return nil, err
		}
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// ContentHash is the lowercase hex sha256 of the build's inputs: the
// Dockerfile and the daemon, each length-prefixed so moving bytes from one to
// the other changes the hash. The inputs are hashed rather than the zip, so a
// change in how the zip is written never renames every image.
func ContentHash(dockerfile string, daemon []byte) string {
	h := sha256.New()
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(dockerfile)))
	h.Write(n[:])
	h.Write([]byte(dockerfile))
	binary.BigEndian.PutUint64(n[:], uint64(len(daemon)))
	h.Write(n[:])
	h.Write(daemon)
	return hex.EncodeToString(h.Sum(nil))
}

var imageNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]*$`) })

// ReuseName is the content-addressed image name <prefix>-<first 12 hex of
// hash>. An image already existing under exactly this name was built from the
// same inputs, so it is reused instead of built again.
func ReuseName(prefix, hash string) (string, error) {
	if len(hash) < 12 {
		return "", client.Errorf(taxonomy.KindInvalidArg, "", "content hash %q is shorter than 12 hex digits", hash)
	}
	name := prefix + "-" + hash[:12]
	if !imageNameRE().MatchString(prefix) || len(name) > taxonomy.MaxImageNameLen {
		return "", client.Errorf(taxonomy.KindInvalidArg, "",
			"image prefix %q must be letters, digits, '-' or '_' and leave room for the 13-character hash suffix within %d characters", prefix, taxonomy.MaxImageNameLen)
	}
	return name, nil
}

// LogGroup is the build log group the service creates for an image. It
// outlives the image, so teardown deletes it or names it as leaked.
func LogGroup(imageName string) string { return taxonomy.BuildLogGroupPrefix + imageName }
