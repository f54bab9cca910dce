package build

import (
	"archive/zip"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"io"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/taxonomy"
)

// elfHeader is a minimal 64-bit little-endian ELF header for machine.
func elfHeader(machine elf.Machine, class elf.Class, typ elf.Type) []byte {
	h := make([]byte, 64)
	copy(h, elf.ELFMAG)
	h[elf.EI_CLASS] = byte(class)
	h[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	binary.LittleEndian.PutUint16(h[16:], uint16(typ))
	binary.LittleEndian.PutUint16(h[18:], uint16(machine))
	binary.LittleEndian.PutUint32(h[20:], uint32(elf.EV_CURRENT))
	binary.LittleEndian.PutUint16(h[52:], 64) // e_ehsize
	return h
}

func TestCheckDaemon(t *testing.T) {
	if err := CheckDaemon(elfHeader(elf.EM_AARCH64, elf.ELFCLASS64, elf.ET_EXEC)); err != nil {
		t.Fatalf("an aarch64 executable was refused: %v", err)
	}
	// Each row is a binary a wrong edit would let through: skipping the check,
	// checking only the ELF magic, or accepting the host's x86-64 build.
	for name, bin := range map[string][]byte{
		"not ELF":       []byte("#!/bin/sh\necho agentd\n"),
		"x86-64":        elfHeader(elf.EM_X86_64, elf.ELFCLASS64, elf.ET_EXEC),
		"32-bit ARM":    elfHeader(elf.EM_ARM, elf.ELFCLASS64, elf.ET_EXEC),
		"relocatable":   elfHeader(elf.EM_AARCH64, elf.ELFCLASS64, elf.ET_REL),
		"empty":         nil,
		"truncated ELF": elfHeader(elf.EM_AARCH64, elf.ELFCLASS64, elf.ET_EXEC)[:20],
	} {
		err := CheckDaemon(bin)
		if err == nil || findingOf(err) != taxonomy.FindingArm64Only {
			t.Errorf("%s: want a refusal naming arm64-only, got %v", name, err)
		}
	}
}

func TestArtifactDeterministicAndExecutable(t *testing.T) {
	daemon := elfHeader(elf.EM_AARCH64, elf.ELFCLASS64, elf.ET_EXEC)
	df := good(t)
	a, err := Artifact(df, daemon)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Artifact(df, daemon)
	// Catches a wrong edit that stamps entries with time.Now or iterates a map.
	if !bytes.Equal(a, b) {
		t.Fatal("two artifacts from equal inputs differ")
	}
	zr, err := zip.NewReader(bytes.NewReader(a), int64(len(a)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]*zip.File{}
	for _, f := range zr.File {
		got[f.Name] = f
	}
	if len(got) != 2 || got["Dockerfile"] == nil || got["agentd"] == nil {
		t.Fatalf("entries: %v", got)
	}
	// Catches dropping the explicit mode: a non-executable daemon is a run-hook timeout.
	if m := got["agentd"].Mode().Perm(); m != 0o755 {
		t.Fatalf("agentd mode %v, want 0755", m)
	}
	rc, _ := got["agentd"].Open()
	body, _ := io.ReadAll(rc)
	if !bytes.Equal(body, daemon) {
		t.Fatal("daemon bytes changed in the round trip")
	}
	rc, _ = got["Dockerfile"].Open()
	body, _ = io.ReadAll(rc)
	if string(body) != df {
		t.Fatal("Dockerfile changed in the round trip")
	}
}

func TestContentHashAndReuseName(t *testing.T) {
	h := ContentHash("ab", []byte("c"))
	// Length prefixes: moving a byte across the boundary must rename the image.
	if h == ContentHash("a", []byte("bc")) {
		t.Fatal("hash is a plain concatenation")
	}
	if h != ContentHash("ab", []byte("c")) || h == ContentHash("ab", []byte("d")) {
		t.Fatal("hash does not follow exactly its inputs")
	}
	name, err := ReuseName("task", h)
	if err != nil || name != "task-"+h[:12] {
		t.Fatalf("ReuseName = %q, %v", name, err)
	}
	for _, p := range []string{"", "has space", "slash/x", strings.Repeat("a", taxonomy.MaxImageNameLen)} {
		if _, err := ReuseName(p, h); err == nil {
			t.Errorf("prefix %q accepted", p)
		}
	}
	if LogGroup(name) != "/aws/lambda-microvms/"+name {
		t.Fatalf("log group %q", LogGroup(name))
	}
}
