package schema

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Catches: a trap whose member the model renamed (or api/traps.yaml
// misspells) silently matching nothing, which turned the refusal off when
// the wiring found members by name at run time. Generation must fail and
// name the member.
func TestTrapNamingNoMemberFailsGeneration(t *testing.T) {
	m, err := loadSDKModel("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := trapsSource("..", m); err != nil {
		t.Fatalf("the committed api/traps.yaml: %v", err)
	}
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "api"), 0o755); err != nil {
		t.Fatal(err)
	}
	bad := "traps:\n  - check: checkRunHookPayload\n    finding: run-hook-payload-ceiling\n    members_named: [runHookPayloadRenamed]\n"
	if err := os.WriteFile(filepath.Join(root, "api", "traps.yaml"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = trapsSource(root, m)
	if err == nil || !strings.Contains(err.Error(), "runHookPayloadRenamed") {
		t.Fatalf("a trap naming no member: %v, want a generation error naming it", err)
	}
}

// Catches: a member the trap names that the generator does not wire on
// every operation taking it (an operation added to the model later must be
// covered without an edit).
func TestEveryImageMemberIsWired(t *testing.T) {
	m, err := loadSDKModel("..")
	if err != nil {
		t.Fatal(err)
	}
	src, err := trapsSource("..", m)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range m.Ops {
		for _, mem := range op.Input.Members {
			if mem.Wire != "imageIdentifier" && mem.Wire != "baseImageArn" && mem.Wire != "Resource" {
				continue
			}
			call := `checkImageARN("` + op.Name + `", "` + mem.GoName + `", in.` + mem.GoName + `)`
			if !strings.Contains(src, call) {
				t.Errorf("%s.%s is not wired: no %s", op.Name, mem.Wire, call)
			}
		}
	}
}
