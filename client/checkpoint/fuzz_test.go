package checkpoint

import (
	"archive/tar"
	"bytes"
	"errors"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func validManifest() Manifest {
	return Manifest{Format: Format, Digest: digestOf([]byte("x")), Size: 1, Compression: "zstd", Paths: []string{"/w"}, ImageARN: "arn:aws:lambda:us-east-1:123456789012:microvm-image:sandbox", ImageVersion: "1"}
}

// FuzzDecodeManifest: whatever bytes the bucket holds under a manifest key,
// decoding answers a manifest that passes its own checks or a foreign
// refusal, never a panic, and a decoded manifest encodes and decodes to
// itself.
func FuzzDecodeManifest(f *testing.F) {
	good, _ := encodeManifest(validManifest())
	f.Add(good)
	f.Add([]byte(`{"format":2}`))
	f.Add([]byte(`{}{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeManifest(b)
		if err != nil {
			var re *RefusalError
			if !errors.As(err, &re) || re.Reason != ReasonForeign {
				t.Fatalf("err %v is not a foreign refusal", err)
			}
			return
		}
		again, err := encodeManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeManifest(again); err != nil {
			t.Fatalf("a decoded manifest does not decode again: %v", err)
		}
	})
}

func archive(t testing.TB, members ...*tar.Header) []byte {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, h := range members {
		tw.WriteHeader(h)
		if h.Typeflag == tar.TypeReg {
			tw.Write(bytes.Repeat([]byte("a"), int(h.Size)))
		}
	}
	tw.Close()
	var z bytes.Buffer
	zw, _ := zstd.NewWriter(&z)
	zw.Write(raw.Bytes())
	zw.Close()
	return z.Bytes()
}

// FuzzVerifyArchive: verifyArchive reads any object within the manifest's
// counts (bounded: never more file bytes than TreeBytes, never more members
// than Files) and answers members or a refusal, never a panic. A member
// outside the checkpoint's paths is never among the answered members, and
// what layPath would upload of an accepted one is as long as counted.
func FuzzVerifyArchive(f *testing.F) {
	f.Add(archive(f, &tar.Header{Name: "w/", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "w/f", Typeflag: tar.TypeReg, Size: 3, Mode: 0o644}), int64(2), int64(3))
	f.Add(archive(f, &tar.Header{Name: "etc/passwd", Typeflag: tar.TypeReg, Size: 1}), int64(1), int64(1))
	f.Add(archive(f, &tar.Header{Name: "w/../../x", Typeflag: tar.TypeReg, Size: 1}), int64(1), int64(1))
	f.Add([]byte("not zstd"), int64(1), int64(1))
	f.Fuzz(func(t *testing.T, b []byte, files, treeBytes int64) {
		m := validManifest()
		m.Files, m.TreeBytes = files%64, treeBytes%(1<<20)
		members, sizes, err := verifyArchive(bytes.NewReader(b), m)
		if err != nil {
			var re *RefusalError
			if !errors.As(err, &re) {
				t.Fatalf("err %v is not a refusal", err)
			}
			return
		}
		if int64(len(members)) != m.Files {
			t.Fatalf("%d members answered, manifest counts %d", len(members), m.Files)
		}
		for _, mb := range members {
			if !under(mb.path, m.Paths) {
				t.Fatalf("member %s outside %v", mb.path, m.Paths)
			}
		}
		checkRelay(t, b, m, sizes)
	})
}

// Catches: an archive member that climbs out of the checkpoint's paths
// ("w/../etc") accepted because only its prefix was compared.
func TestVerifyArchiveRefusesClimbingNames(t *testing.T) {
	m := validManifest()
	m.Files, m.TreeBytes = 1, 1
	for _, name := range []string{"w/../etc/passwd", "etc/passwd", "w2/f", "/w/f"} {
		_, _, err := verifyArchive(bytes.NewReader(archive(t, &tar.Header{Name: name, Typeflag: tar.TypeReg, Size: 1})), m)
		var re *RefusalError
		if !errors.As(err, &re) || re.Reason != ReasonForeign {
			t.Errorf("%s: err %v, want a foreign refusal", name, err)
		}
	}
}

// Catches: a hard link whose target lies outside the checkpoint's paths
// (or under another of them) laid as a link to that file.
func TestVerifyArchiveRefusesLinksOut(t *testing.T) {
	m := validManifest()
	m.Paths = []string{"/v", "/w"}
	m.Files = 2
	for _, target := range []string{"etc/shadow", "v/f", "w/../etc/shadow"} {
		obj := archive(t, &tar.Header{Name: "v/f", Typeflag: tar.TypeDir, Mode: 0o755}, &tar.Header{Name: "w/l", Typeflag: tar.TypeLink, Linkname: target})
		_, _, err := verifyArchive(bytes.NewReader(obj), m)
		var re *RefusalError
		if !errors.As(err, &re) || re.Reason != ReasonForeign {
			t.Errorf("link to %s: err %v, want a foreign refusal", target, err)
		}
	}
}

// Catches: AllowOtherVersion ignored, or the version check skipped when
// the caller names the checkpoint's own image and another version.
func TestCheckVersion(t *testing.T) {
	m := validManifest()
	o := RestoreOptions{}
	if err := checkVersion(m, &o); err != nil || o.Options.Image != m.ImageARN || o.Options.Version != "1" {
		t.Fatalf("defaults: %v %+v", err, o.Options)
	}
	o = RestoreOptions{}
	o.Options.Version = "2"
	var re *RefusalError
	if err := checkVersion(m, &o); !errors.As(err, &re) || re.Reason != ReasonOtherVersion {
		t.Fatalf("other version: %v", err)
	}
	o.AllowOtherVersion = true
	if err := checkVersion(m, &o); err != nil || o.Options.Version != "2" {
		t.Fatalf("override: %v %+v", err, o.Options)
	}
}

// Catches: a path with a quote or a space breaking out of its shell word.
func TestFixupScriptQuotes(t *testing.T) {
	s := fixupScript([]member{{path: "/w/it's a $(x)", typ: tar.TypeReg, mode: 0o644}})
	if !bytes.Contains([]byte(s), []byte(`'/w/it'\''s a $(x)'`)) {
		t.Fatalf("script:\n%s", s)
	}
}

// Catches: a bake that copies the read-back base version ("1.0") into its
// create, which the service refuses (finding managed-base-versions).
func TestBareBaseVersion(t *testing.T) {
	for in, want := range map[string]string{"1.0": "1", "0.00": "0", "1": "1", "1.5": "1.5", "x.0": "x.0", ".0": ".0"} {
		if got := *bareBaseVersion(&in); got != want {
			t.Errorf("bareBaseVersion(%q) = %q, want %q", in, got, want)
		}
	}
	if bareBaseVersion(nil) != nil {
		t.Error("a nil version became one")
	}
}
