package sparse

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// expand turns fuzz bytes into file content with long zero runs: a byte
// under 16 is that many whole blocks of zeros, anything else is itself.
func expand(in []byte) []byte {
	var out []byte
	for _, b := range in {
		if b < 16 {
			out = append(out, make([]byte, int(b)*Block+int(b))...)
			continue
		}
		out = append(out, b)
	}
	return out
}

// FuzzWriter: whatever the content and however it is split into writes,
// the file reads back byte for byte at its full length. Wrong edits caught:
// a zero run's seek off by its length, a partial block skipped as a hole
// when it is not all zeros, and Finish dropped (a trailing hole lost).
func FuzzWriter(f *testing.F) {
	f.Add([]byte("a\x03b\x0f"), uint16(1))
	f.Add([]byte("\x01\x01\x01"), uint16(4095))
	f.Add([]byte("xyz\x02"), uint16(4097))
	f.Fuzz(func(t *testing.T, in []byte, step uint16) {
		data := expand(in)
		if len(data) > 1<<20 {
			return
		}
		path := filepath.Join(t.TempDir(), "f")
		file, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		defer file.Close()
		w := New(file)
		n := int(step)%(3*Block) + 1
		for off := 0; off < len(data); off += n {
			if _, err := w.Write(data[off:min(off+n, len(data))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Finish(); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, data) || w.Written() != int64(len(data)) {
			t.Fatalf("read back %d bytes (%v), want %d; written %d", len(got), err, len(data), w.Written())
		}
		if w.OnDisk() > int64(len(data)) {
			t.Fatalf("%d bytes written for %d of content", w.OnDisk(), len(data))
		}
	})
}

// The disk limit counts bytes written, not holes: 1 MiB of zeros passes a
// 4 KiB limit, the next non-zero block does not. Wrong edit caught: the
// limit counting logical bytes (the zeros refused) or checked after the
// write (the block written past it).
func TestDiskLimitCountsWrittenBytes(t *testing.T) {
	file, err := os.Create(filepath.Join(t.TempDir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	w := &Writer{F: file, DiskLimit: Block}
	if _, err := w.Write(make([]byte, 1<<20)); err != nil {
		t.Fatalf("zeros: %v", err)
	}
	if _, err := w.Write(bytes.Repeat([]byte("x"), Block)); err != nil {
		t.Fatalf("one block at the limit: %v", err)
	}
	if _, err := w.Write([]byte("y")); !errors.Is(err, ErrDiskLimit) || w.OnDisk() != Block {
		t.Fatalf("past the limit: %v, %d on disk", err, w.OnDisk())
	}
}
