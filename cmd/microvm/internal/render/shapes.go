package render

import (
	"errors"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// FileEntry is a guest file as every answer shows it (stat, dir, and the
// engine's and the MCP tools' listings): the daemon's record, its time in
// RFC 3339 UTC.
func FileEntry(fi protocol.FileInfo) cliapi.FileEntry {
	return cliapi.FileEntry{Path: fi.Path, Name: fi.Name, Type: string(fi.Type), Size: int64(fi.Size), Mode: fi.Mode,
		UID: int64(fi.UID), GID: int64(fi.GID), Mtime: fi.Mtime.UTC().Format(time.RFC3339Nano), SymlinkTarget: fi.SymlinkTarget}
}

// AsClientError classifies any error into the client's one error type.
func AsClientError(err error) *client.Error {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce
	}
	return client.Errorf(client.KindOf(err), "", "%s", err.Error()).WithCause(err)
}

// InvalidArg is a local refusal: the request never left this process, so it
// carries no wire kind and the envelope no data.kind.
func InvalidArg(finding taxonomy.FindingID, format string, args ...any) error {
	return client.Errorf(taxonomy.KindInvalidArg, finding, format, args...)
}
