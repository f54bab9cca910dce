package agentd

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
)

// bigDir makes a directory of n empty files for the listing benchmarks.
func bigDir(b *testing.B, n int) string {
	b.Helper()
	dir := b.TempDir()
	for i := range n {
		f, err := os.Create(filepath.Join(dir, "entry-"+strconv.Itoa(i)))
		if err != nil {
			b.Fatal(err)
		}
		f.Close()
	}
	return dir
}

// BenchmarkList100k lists a directory of 100,000 files four ways in one run:
// through a real agentd over HTTP in pages of max_list_page (the whole
// route: walk, stat, JSON both ways, loopback transport), listDir in process with the same
// pages, and the baselines os.ReadDir with an lstat per entry (the same
// facts the route returns) and os.ReadDir alone (names and types only).
// ns/op and B/op are per whole listing.
func BenchmarkList100k(b *testing.B) {
	const n = 100_000
	dir := bigDir(b, n)
	b.Run("agentd-http", func(b *testing.B) {
		d := startDaemon(b, nil)
		d.bootstrap(nil)
		// A plain client: the tests' contract-validating transport would be
		// most of what is measured.
		plain, err := protocol.NewClientWithResponses(d.base)
		if err != nil {
			b.Fatal(err)
		}
		limit := uint32(protocol.DefaultMaxListPage)
		b.ReportAllocs()
		for b.Loop() {
			params := protocol.FsListParams{Path: dir, Limit: &limit}
			got := 0
			for {
				r, err := plain.FsListWithResponse(context.Background(), &params, auth(testToken))
				if err != nil || r.JSON200 == nil {
					b.Fatalf("list: %v", err)
				}
				got += len(r.JSON200.Entries)
				if r.JSON200.NextCursor == nil {
					break
				}
				params.Cursor = r.JSON200.NextCursor
			}
			if got != n {
				b.Fatalf("listed %d, want %d", got, n)
			}
		}
	})
	b.Run("listDir-pages", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var cursor []string
			got := 0
			for {
				page, err := listDir(dir, 1, cursor, protocol.DefaultMaxListPage)
				if err != nil {
					b.Fatal(err)
				}
				got += len(page.entries)
				if page.next == nil {
					break
				}
				cursor, _ = parseCursor(*page.next)
			}
			if got != n {
				b.Fatalf("listed %d, want %d", got, n)
			}
		}
	})
	b.Run("os.ReadDir+lstat", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ents, err := os.ReadDir(dir)
			if err != nil {
				b.Fatal(err)
			}
			for _, e := range ents {
				if _, err := e.Info(); err != nil {
					b.Fatal(err)
				}
			}
			if len(ents) != n {
				b.Fatalf("read %d", len(ents))
			}
		}
	})
	b.Run("os.ReadDir", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			ents, err := os.ReadDir(dir)
			if err != nil || len(ents) != n {
				b.Fatalf("read %d: %v", len(ents), err)
			}
		}
	})
}
