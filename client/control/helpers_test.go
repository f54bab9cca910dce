package control

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// fixedNow is the signing clock of every test client, so signatures and
// golden requests are reproducible.
var fixedNow = time.Date(2026, 8, 15, 17, 17, 28, 0, time.UTC)

type harness struct {
	emu *emulator.Server
	c   *Client
	url string
}

// newHarness serves a fresh emulator on loopback and points a client at it.
func newHarness(t *testing.T, eo emulator.Options, mod func(*Options)) *harness {
	t.Helper()
	emu := emulator.New(eo)
	url, stop, err := emu.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	o := Options{
		Region:      client.USEast1,
		Endpoint:    url,
		Credentials: credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", ""),
		MaxBackoff:  time.Millisecond,
		Now:         func() time.Time { return fixedNow },
		Getenv:      func(string) string { return "" },
	}
	if mod != nil {
		mod(&o)
	}
	c, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{emu: emu, c: c, url: url}
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fastWait polls without sleeping; the emulator advances per observation.
var fastWait = WaitOptions{Interval: time.Millisecond, Timeout: 20 * time.Second}

// requireKind asserts err is a *client.Error of kind naming finding.
func requireKind(t *testing.T, err error, kind taxonomy.ErrorKind, finding taxonomy.FindingID) *client.Error {
	t.Helper()
	var ce *client.Error
	if !errors.As(err, &ce) {
		t.Fatalf("want *client.Error of kind %v, got %T %v", kind, err, err)
	}
	if ce.Kind() != kind {
		t.Fatalf("want kind %v, got %v: %v", kind, ce.Kind(), err)
	}
	if ce.Finding() != finding {
		t.Fatalf("want finding %q, got %q: %v", finding, ce.Finding(), err)
	}
	return ce
}

// repeatReader yields the same bytes forever: a clientToken source with no
// randomness, which is the wrong edit the wedge test models.
type repeatReader struct{}

func (repeatReader) Read(p []byte) (int, error) {
	copy(p, bytes.Repeat([]byte{7}, len(p)))
	return len(p), nil
}

func testSpec(name string) ImageSpec {
	return ImageSpec{
		Name:            name,
		BuildRoleARN:    "arn:aws:iam::123456789012:role/build",
		CodeArtifactURI: "s3://bucket/" + name + ".zip",
	}
}
