package emulator

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// Catches, through a real AWS client nobody here wrote (boto3 reading the
// botocore model schema/ generates from the Smithy model): an operation the
// emulator answers outside the model (an error it does not list, a status
// not the operation's), an input constraint not enforced, a paginator that
// does not page, and a model translation boto3 cannot load.
// EMULATOR_BOTO3_STRICT=1 (make check) fails instead of skipping where
// python3 or boto3 is missing.
func TestBoto3DrivesTheEmulator(t *testing.T) {
	strict := os.Getenv("EMULATOR_BOTO3_STRICT") == "1"
	python := "python3"
	if p := os.Getenv("EMULATOR_PYTHON"); p != "" {
		python = p // e.g. /usr/bin/python3, Debian's boto3 rather than another install's
	}
	if err := exec.Command(python, "-c", "import boto3").Run(); err != nil {
		if strict {
			t.Fatalf("python3 with boto3 is needed (apt-get install python3-boto3): %v", err)
		}
		t.Skip("python3 with boto3 is not installed")
	}
	s := New(Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	dir, err := filepath.Abs("../clients/botocore")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), python, "test_lambda_microvms.py")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "MICROVMS_EMULATOR_URL="+base, "AWS_DATA_PATH="+dir,
		"PYTHONDONTWRITEBYTECODE=1", "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("the boto3 suite failed: %v", err)
	}
	if !strings.Contains(string(out), "boto3: 24 of 24 operations called") || !strings.Contains(string(out), ", 0 outside the model") {
		t.Fatal("the boto3 suite did not call every operation with every answer inside the model")
	}
	for _, r := range s.Requests() {
		if r.Service != "lambda" {
			t.Errorf("boto3 signed %s %s for %q", r.Method, r.Path, r.Service)
		}
	}
}
