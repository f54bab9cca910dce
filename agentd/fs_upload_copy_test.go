package agentd

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// Uploads are gathered into uploadBufferBytes before each write; sizes on
// either side of that boundary land byte for byte. Catches: writing the
// buffer's full length instead of what was read into it, or dropping the
// last partial buffer at EOF.
func TestUploadSizesAroundTheWriteBufferLandWhole(t *testing.T) {
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	dir := t.TempDir()
	for _, size := range []int{0, 1, uploadBufferBytes - 1, uploadBufferBytes, uploadBufferBytes + 1, 3*uploadBufferBytes + 12345} {
		want := make([]byte, size)
		_, _ = rand.Read(want)
		p := filepath.Join(dir, fmt.Sprintf("f%d", size))
		if r := fsDo(t, srv, "PUT", "/v1/fs/file", fsQuery("path", p), bytes.NewReader(want)); r.status != 204 {
			t.Fatalf("size %d: %+v", size, r)
		}
		got, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("size %d: landed %d bytes, not the bytes sent", size, len(got))
		}
	}
}

// A Content-Length body cut short past the first write buffer commits
// nothing: net/http reports the cut as io.ErrUnexpectedEOF, which copyBody
// must not take for the end of the body. Catches: treating
// io.ErrUnexpectedEOF like io.EOF (io.ReadFull's habit), which would commit
// the first 1.5 MiB as if it were the whole file.
func TestUploadCutShortAfterAFullBufferCommitsNothing(t *testing.T) {
	srv := fsServer(t, testFS(protocol.LimitSet{}))
	dir := t.TempDir()
	p := filepath.Join(dir, "cut")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(srv.URL)
	c, err := net.DialTimeout("tcp", u.Host, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	sent := uploadBufferBytes + uploadBufferBytes/2
	head := fmt.Sprintf("PUT /v1/fs/file?%s HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n",
		fsQuery("path", p).Encode(), 3*uploadBufferBytes)
	if _, err := io.WriteString(c, head); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(bytes.Repeat([]byte("x"), sent)); err != nil {
		t.Fatal(err)
	}
	_ = c.(*net.TCPConn).CloseWrite()
	// The handler answers (or the server drops the connection) once it has
	// seen the cut; either way the reply is read to its end.
	reply, _ := io.ReadAll(c)
	c.Close()
	if strings.HasPrefix(string(reply), "HTTP/1.1 204") {
		t.Fatalf("a cut upload was answered 204: %q", reply)
	}
	// Bounded wait for the handler to finish cleaning up.
	for i := 0; i < 100 && len(tempLeftovers(t, dir, "cut")) > 0; i++ {
		time.Sleep(20 * time.Millisecond)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("a cut upload replaced the file with %d bytes", len(b))
	}
	if extra := tempLeftovers(t, dir, "cut"); len(extra) > 0 {
		t.Fatalf("temp files left: %v", extra)
	}
}
