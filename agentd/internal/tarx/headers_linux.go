//go:build linux

package tarx

// What an archive's headers may say before anything is written: the
// end-of-archive marker, the raw header fields Go's reader would let
// through (a NUL inside a name, an octal size past its field), the caps,
// and Check, which runs all of it without a root.

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ErrNoEndMarker is an archive that stops without its two zero blocks: cut at
// a member boundary, it would otherwise read as a shorter, complete archive.
var ErrNoEndMarker = errors.New("the archive ends without its end-of-archive marker (two zero blocks), so it was cut short")

// endReader tells an archive that ends with its end-of-archive marker from one
// cut at a member boundary: archive/tar answers io.EOF for both. It counts the
// zero bytes that ended what was read since mark; the marker is two zero
// blocks, and the only other bytes tar.Reader reads inside Next before it
// answers io.EOF are a member's padding (under one block), so 1024 trailing
// zero bytes mean the marker was there.
//
// It also keeps the raw bytes Next reads (padding, header blocks and the GNU
// long-name and PAX records, each under 1 MiB by archive/tar's own cap) for
// headerFault, which archive/tar's parsed header cannot answer: it cuts a
// name at its first NUL.
type endReader struct {
	r     io.Reader
	zeros int64

	off        int64 // bytes consumed from the start of the archive
	recording  bool  // between mark and headerFault
	rec        []byte
	recStart   int64 // archive offset of rec[0]
	nextHeader int64 // archive offset where the next header is due; 0: unknown
}

func (e *endReader) mark() {
	e.zeros = 0
	e.recording, e.rec, e.recStart = true, e.rec[:0], e.off
}
func (e *endReader) sawEnd() bool { return e.zeros >= 2*512 }
func (e *endReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	e.count(p[:n])
	if e.recording {
		e.rec = append(e.rec, p[:n]...)
	}
	e.off += int64(n)
	return n, err
}

// headerFault walks the header blocks Next just read and refuses a member
// whose name or link target holds a NUL in any header form: the ustar name,
// prefix or linkname field, or a GNU long-name or long-link record.
// archive/tar cuts each at its first NUL, so "aaa\x00tail" was written as
// "aaa"; a NUL in a PAX path archive/tar refuses itself. It ends recording.
func (e *endReader) headerFault(hdr *tar.Header) error {
	rec, start := e.rec, e.recStart
	e.recording = false
	// Where this Next's header blocks begin: past the previous member's data
	// (which Next may have read, or skipped by seeking) and its padding.
	at := e.nextHeader - start
	if e.nextHeader == 0 || at < 0 || at > int64(len(rec)) {
		at = ((start + 511) &^ 511) - start
	}
	e.nextHeader = 0
	if at < 0 || at > int64(len(rec)) {
		return nil
	}
	pos := start + at
	blocks := rec[at:]
	for len(blocks) >= 512 {
		blk := blocks[:512]
		blocks, pos = blocks[512:], pos+512
		if bytes.Count(blk, []byte{0}) == 512 {
			return nil
		}
		flag := blk[156]
		switch flag {
		case tar.TypeGNULongName, tar.TypeGNULongLink, tar.TypeXHeader, tar.TypeXGlobalHeader:
			size, ok := sizeField(blk[124:136])
			if !ok || size > int64(len(blocks)) {
				return nil // archive/tar judged this record; nothing to add
			}
			data := blocks[:size]
			skip := min((size+511)&^511, int64(len(blocks)))
			blocks, pos = blocks[skip:], pos+skip
			if (flag == tar.TypeGNULongName || flag == tar.TypeGNULongLink) && innerNUL(data) {
				return &MemberError{hdr.Name, "its name or link target holds a NUL byte (in a GNU long-name record)"}
			}
			if flag == tar.TypeXGlobalHeader {
				e.nextHeader = pos // Next returns a global header itself
				return nil
			}
			continue
		}
		fields := [][]byte{blk[0:100], blk[157:257]}
		if string(blk[257:263]) == "ustar\x00" { // POSIX ustar: the prefix field
			fields = append(fields, blk[345:500])
		}
		for _, f := range fields {
			if innerNUL(f) {
				return &MemberError{hdr.Name, "its name or link target holds a NUL byte (in the header's name, prefix or linkname field)"}
			}
		}
		// The member's data on the wire, as archive/tar sizes it: none for a
		// header-only type, else a PAX size record over the size field.
		var phys int64
		switch flag {
		case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
		default:
			if v, ok := hdr.PAXRecords["size"]; ok {
				phys, _ = strconv.ParseInt(v, 10, 64)
			} else {
				phys, _ = sizeField(blk[124:136])
			}
		}
		if phys >= 0 {
			e.nextHeader = pos + (phys+511)&^511
		}
		return nil
	}
	return nil
}

// sizeField reads a header's size field: octal text, or GNU base-256 when
// its first byte has the high bit set.
func sizeField(b []byte) (int64, bool) {
	if len(b) > 0 && b[0]&0x80 != 0 {
		var n int64
		for _, c := range b[1:] {
			if n > (1<<62)>>8 {
				return 0, false
			}
			n = n<<8 | int64(c)
		}
		return n, true
	}
	return octal(b)
}

// innerNUL reports a NUL followed by anything but NULs: a field's own
// terminator and zero fill are fine, a NUL inside the text is not.
func innerNUL(b []byte) bool {
	return bytes.IndexByte(bytes.TrimRight(b, "\x00"), 0) >= 0
}

// octal reads a header's octal size field (space- or NUL-terminated).
func octal(b []byte) (int64, bool) {
	t := strings.Trim(string(b), " \x00")
	if t == "" {
		return 0, true
	}
	n, err := strconv.ParseInt(t, 8, 64)
	return n, err == nil && n >= 0
}

func (e *endReader) count(p []byte) {
	i := len(p)
	for i > 0 && p[i-1] == 0 {
		i--
	}
	if i == 0 {
		e.zeros += int64(len(p))
	} else {
		e.zeros = int64(len(p) - i)
	}
}

// seekEndReader is an endReader over a seekable source, so tar.Reader skips
// member content with a seek instead of reading it. A seek is never part of
// the marker, so it resets the count.
type seekEndReader struct {
	endReader
	s io.Seeker
}

func (e *seekEndReader) Seek(off int64, whence int) (int64, error) {
	if !(off == 0 && whence == io.SeekCurrent) {
		e.zeros = 0
	}
	n, err := e.s.Seek(off, whence)
	if err == nil && n != e.off {
		e.off = n
		if e.recording {
			// Skipped content is never header bytes: record afresh from here.
			e.rec, e.recStart = e.rec[:0], n
		}
	}
	return n, err
}

// Check reads an archive's structure without writing anything: every header,
// member content skipped by seeking, through to the end-of-archive marker. It
// refuses what Extract would refuse before its first write could happen (a
// truncated or malformed archive, one over the caps, a device or fifo member,
// a name that climbs out of the root), so a refusal of those leaves the tree
// exactly as it was. Extract still applies every rule itself.
func Check(r io.ReadSeeker, caps Caps) error {
	total, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		return err
	}
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return err
	}
	er := &seekEndReader{endReader: endReader{r: r}, s: r}
	tr := tar.NewReader(er)
	var members, size int64
	for {
		er.mark()
		hdr, err := tr.Next()
		if err == io.EOF {
			if !er.sawEnd() {
				return &MalformedError{Err: ErrNoEndMarker}
			}
			return nil
		}
		if err != nil && !errors.Is(err, tar.ErrInsecurePath) {
			return &MalformedError{Err: err}
		}
		if err := er.headerFault(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		members++
		if caps.MaxMembers > 0 && members > caps.MaxMembers {
			return &LimitError{Detail: fmt.Sprintf("archive has more than %d members (limits.max_tar_members)", caps.MaxMembers)}
		}
		switch hdr.Typeflag {
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			return &MemberError{hdr.Name, "device and fifo members are not extractable"}
		case tar.TypeReg, '\x00', tar.TypeCont, tar.TypeGNUSparse:
			if hdr.Size < 0 {
				return &MemberError{hdr.Name, "negative size"}
			}
			size += hdr.Size
			if caps.MaxBytes > 0 && (hdr.Size > caps.MaxBytes || size > caps.MaxBytes) {
				return &LimitError{Detail: fmt.Sprintf("archive exceeds %d bytes of member content (limits.max_tar_bytes)", caps.MaxBytes)}
			}
			// Named here: the seek past a cut member only fails in the next
			// Next, which cannot say whose content was short.
			pos, err := r.Seek(0, io.SeekCurrent)
			if err == nil && !sparse(hdr) && pos+hdr.Size > total {
				return &MalformedError{Err: fmt.Errorf("member %s ends after %d of its %d declared bytes", hdr.Name, total-pos, hdr.Size)}
			}
		}
		if _, ok := Normalize(hdr.Name); !ok {
			return &MemberError{hdr.Name, "path escapes the extraction root"}
		}
		if err := checkName(hdr.Name); err != nil {
			return err
		}
	}
}

// sparse reports a member whose content on the wire is a sparse map and data
// runs, shorter than its size.
func sparse(hdr *tar.Header) bool {
	return hdr.Typeflag == tar.TypeGNUSparse || hdr.PAXRecords["GNU.sparse.major"] != "" || hdr.PAXRecords["GNU.sparse.size"] != ""
}

// checkName refuses a member name the kernel would refuse: a component longer
// than NAME_MAX is the archive's fault, not this machine's.
func checkName(name string) error {
	for _, c := range strings.Split(name, "/") {
		if len(c) > maxNameBytes {
			return &MemberError{name, fmt.Sprintf("a path component is %d bytes, longer than the %d a file name may have", len(c), maxNameBytes)}
		}
	}
	return nil
}

// maxNameBytes is NAME_MAX.
const maxNameBytes = 255
