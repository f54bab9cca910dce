package client

import (
	"context"
	"io/fs"
	"net/http"
	"strconv"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// The filesystem operations are routes of ours, absent from the
// reference daemon: against one, they answer 404 unmatched, which reads here
// as a NotFound wire error. A missing path is an error for which
// errors.Is(err, fs.ErrNotExist) holds.

// Stat describes path without following a final symlink.
func (s *Session) Stat(ctx context.Context, path string) (protocol.FileInfo, error) {
	var fi protocol.FileInfo
	params := protocol.FsStatParams{Path: path}
	resp, err := s.send(ctx, call{op: protocol.OpFsStat, file: true, path: path,
		build: func(server string) (*http.Request, error) { return protocol.NewFsStatRequest(server, &params) }})
	if err != nil {
		return fi, err
	}
	return fi, decodeJSON(protocol.OpFsStat, resp, &fi)
}

// ListOptions shapes a listing. Zero Depth means 1 (the directory's own
// entries); zero Limit means the daemon's default page size.
type ListOptions struct {
	Depth  uint32
	Limit  uint32
	Cursor string
}

// ListPage reads one page of the listing of dir.
func (s *Session) ListPage(ctx context.Context, dir string, o ListOptions) (protocol.ListResponse, error) {
	var out protocol.ListResponse
	params := protocol.FsListParams{Path: dir}
	if o.Depth != 0 {
		params.Depth = &o.Depth
	}
	if o.Limit != 0 {
		params.Limit = &o.Limit
	}
	if o.Cursor != "" {
		params.Cursor = &o.Cursor
	}
	resp, err := s.send(ctx, call{op: protocol.OpFsList, file: true, path: dir,
		build: func(server string) (*http.Request, error) { return protocol.NewFsListRequest(server, &params) }})
	if err != nil {
		return out, err
	}
	return out, decodeRecord(protocol.OpFsList, resp, &out)
}

// List calls visit for every entry of dir to o.Depth levels, page by page,
// until the listing ends, visit returns an error, or ctx ends. Past
// taxonomy.MaxListEntries entries, or MaxListBytes of their text, it fails
// with a TooLarge error naming the bound: a daemon that pages without end
// cannot keep it going for ever, nor grow a caller gathering the entries.
func (s *Session) List(ctx context.Context, dir string, o ListOptions, visit func(protocol.FileInfo) error) error {
	seen, text := 0, 0
	for {
		page, err := s.ListPage(ctx, dir, o)
		if err != nil {
			return err
		}
		for _, e := range page.Entries {
			seen++
			text += len(e.Path) + len(e.Name) + len(e.Mode)
			if e.SymlinkTarget != nil {
				text += len(*e.SymlinkTarget)
			}
			switch {
			case seen > listMaxEntries:
				return OverBound(protocol.OpFsList, "MAX_LIST_ENTRIES", int64(listMaxEntries), "the listing of "+dir, "list a part of it (a deeper directory, or a smaller depth)")
			case text > listMaxBytes:
				return OverBound(protocol.OpFsList, "MAX_LIST_BYTES", int64(listMaxBytes), "the listing of "+dir, "list a part of it (a deeper directory, or a smaller depth)")
			}
			if err := visit(e); err != nil {
				return err
			}
		}
		if page.NextCursor == nil || len(page.Entries) == 0 {
			return nil
		}
		o.Cursor = *page.NextCursor
	}
}

// listMaxEntries and listMaxBytes are List's bounds; variables only so a
// test can make them small.
var listMaxEntries, listMaxBytes = taxonomy.MaxListEntries, taxonomy.MaxListBytes

// Mkdir creates dir and its missing parents, reporting whether it created
// dir (false: a directory was already there). A zero mode means 0755.
func (s *Session) Mkdir(ctx context.Context, dir string, mode fs.FileMode) (bool, error) {
	params := protocol.FsMkdirParams{Path: dir}
	if mode != 0 {
		m := strconv.FormatUint(uint64(mode.Perm()), 8)
		params.Mode = &m
	}
	resp, err := s.send(ctx, call{op: protocol.OpFsMkdir,
		build: func(server string) (*http.Request, error) { return protocol.NewFsMkdirRequest(server, &params) }})
	if err != nil {
		return false, err
	}
	var out protocol.MkdirResponse
	return out.Created, decodeJSON(protocol.OpFsMkdir, resp, &out)
}

// Move renames from to to on the guest's filesystem. Without replace an
// entry already at to is refused (path_exists, a Conflict) and left alone.
func (s *Session) Move(ctx context.Context, from, to string, replace bool) error {
	params := protocol.FsMoveParams{From: from, To: to}
	if replace {
		params.Replace = &replace
	}
	resp, err := s.send(ctx, call{op: protocol.OpFsMove, file: true, path: from,
		build: func(server string) (*http.Request, error) { return protocol.NewFsMoveRequest(server, &params) }})
	if err != nil {
		return err
	}
	var out protocol.MoveResponse
	return decodeJSON(protocol.OpFsMove, resp, &out)
}

// Remove removes path: a file, symlink or empty directory, or with recursive
// a whole tree. It reports how many entries went.
func (s *Session) Remove(ctx context.Context, path string, recursive bool) (uint64, error) {
	params := protocol.FsRemoveParams{Path: path}
	if recursive {
		params.Recursive = &recursive
	}
	resp, err := s.send(ctx, call{op: protocol.OpFsRemove, file: true, path: path,
		build: func(server string) (*http.Request, error) { return protocol.NewFsRemoveRequest(server, &params) }})
	if err != nil {
		return 0, err
	}
	var out protocol.RemoveResponse
	return out.Removed, decodeJSON(protocol.OpFsRemove, resp, &out)
}
