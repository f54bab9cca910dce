package platform

import (
	"context"
	"testing"

	"github.com/aws/aws-sdk-go-v2/credentials"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

var emu = &Emulator{Credentials: credentials.NewStaticCredentialsProvider("A", "B", "")}

// Each refusal is made without a request: nothing listens at these
// endpoints. Catches: a local control plane whose artifact or log groups go
// to AWS's own S3 or CloudWatch Logs (someone else's bucket and group of
// the same name), an AWS build without a role given a placeholder, and a
// loopback control plane taken for AWS.
func TestLocalControlPlaneKeepsItsNeighboursLocal(t *testing.T) {
	ctx := context.Background()
	p, err := Open(ctx, Options{Region: client.USEast1, Endpoint: "http://127.0.0.1:1", Emulator: emu,
		Getenv: env(map[string]string{"AWS_ENDPOINT_URL_LAMBDA_MICROVMS": "http://127.0.0.1:1"})})
	if err != nil || !p.Local() {
		t.Fatalf("%v local=%v", err, p != nil && p.Local())
	}
	if _, err := p.Uploader(ctx, "", "bucket", nil); client.KindOf(err) != taxonomy.KindPrecondition {
		t.Fatalf("a bucket on AWS's S3 for a local control plane: %v", err)
	}
	if d := p.LogGroups(ctx); d != nil {
		t.Fatalf("a log-group deleter on AWS for a local control plane: %T", d)
	}
	if _, err := p.ReadLogGroup(ctx, "/aws/lambda-microvms/x", 1); client.KindOf(err) != taxonomy.KindPrecondition {
		t.Fatalf("reading a log group on AWS for a local control plane: %v", err)
	}
	if role, err := p.BuildRole(""); err != nil || role == "" {
		t.Fatalf("the emulator's placeholder role: %q %v", role, err)
	}
	if _, _, needless, err := p.Identity(ctx); !needless || err != nil {
		t.Fatalf("STS asked for a local control plane with STS on AWS: %v %v", needless, err)
	}
	if err := p.CheckCredentials(ctx); err != nil {
		t.Fatalf("credentials demanded of a configured endpoint: %v", err)
	}

	aws, err := Open(ctx, Options{Region: client.USEast1, Getenv: env(nil)})
	if err != nil || aws.Local() {
		t.Fatalf("%v", err)
	}
	if _, err := aws.BuildRole(""); client.KindOf(err) != taxonomy.KindPrecondition {
		t.Fatalf("an AWS build without a role: %v", err)
	}
	if _, err := aws.Uploader(ctx, "", "", nil); client.KindOf(err) != taxonomy.KindPrecondition {
		t.Fatalf("an AWS build without a bucket: %v", err)
	}
}

// Catches: IsLocal taking a platform host, or a URL without a host, for
// this machine.
func TestIsLocal(t *testing.T) {
	for endpoint, want := range map[string]bool{
		"http://127.0.0.1:4590": true, "http://localhost:1": true, "http://[::1]:2": true,
		"https://lambda-microvms.us-east-1.amazonaws.com": false, "": false, "127.0.0.1:4590": false,
	} {
		if got := IsLocal(endpoint); got != want {
			t.Errorf("IsLocal(%q) = %v", endpoint, got)
		}
	}
}
