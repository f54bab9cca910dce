package build

import (
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"testing"
)

// awsArtifactSHA256 is the sha256 of the artifact the generated stanza and
// a fixed daemon zip to, measured on the code before local builds could
// carry a build context (issue 39).
const awsArtifactSHA256 = "55a798db339af96311277381760426097e9027ec431d73d9923c2498396182a1"

// Catches: a change to what an AWS build uploads for an unchanged
// Dockerfile (local-build context leaking into the AWS artifact, a new
// entry, another compression or timestamp), which would rename every
// --reuse image and change what the platform builds.
func TestAWSArtifactBytesUnchanged(t *testing.T) {
	df, err := Dockerfile(DockerfileOptions{Workdir: "/workspace"})
	if err != nil {
		t.Fatal(err)
	}
	daemon := append(elfHeader(elf.EM_AARCH64, elf.ELFCLASS64, elf.ET_EXEC), []byte("agentd body")...)
	zip, err := Artifact(df, daemon)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(zip)
	if got := hex.EncodeToString(sum[:]); got != awsArtifactSHA256 {
		t.Fatalf("the AWS artifact's bytes changed: sha256 %s, want %s", got, awsArtifactSHA256)
	}
}
