package engine

import (
	"context"
	"errors"
	"io"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/taxonomy"
)

// The read op's modes other than the sink (sink.go): a host file
// (localPath) and the bytes in the answer (dataBase64), each under its own
// bound or the caller's lower maxBytes.

// readTo streams a whole file into a host file: any size, and the bytes
// never cross the engine's pipe.
func readTo(ctx context.Context, sb *sandbox.Sandbox, path, local string, maxBytes int64) (int64, error) {
	sess, err := session(sb)
	if err != nil {
		return 0, err
	}
	// Download bounds what a hostile guest can send (DEFAULT_MAX_DOWNLOAD_BYTES,
	// or the caller's lower maxBytes, and the free space of local's
	// filesystem) and leaves nothing at local when it fails.
	limit := readBound(maxBytes, taxonomy.DefaultMaxDownloadBytes)
	n, err := sess.Download(ctx, path, local, client.DownloadOptions{MaxBytes: limit})
	var be *client.BoundError
	if errors.As(err, &be) && be.Key == client.DownloadMaxBytesKey && limit < taxonomy.DefaultMaxDownloadBytes {
		// The bound is the engine caller's, so the failure names it as
		// they set it, not as cp spells it.
		return n, overMaxBytes(path, limit)
	}
	return n, err
}

// readBound is the read op's bound: the caller's maxBytes where it is set
// and under the mode's own, else the mode's own.
func readBound(maxBytes, own int64) int64 {
	if maxBytes > 0 && maxBytes < own {
		return maxBytes
	}
	return own
}

// readWhole is the read op's answer in dataBase64: sandbox.ReadFile (at most
// MAX_READ_FILE_BYTES, refused past it as InvalidArg), or, under a lower
// maxBytes, at most that many, failing TooLarge past it as a sink or a
// localPath does.
func readWhole(ctx context.Context, sb *sandbox.Sandbox, path string, maxBytes int64) ([]byte, error) {
	if readBound(maxBytes, sandbox.MaxReadFileBytes) == sandbox.MaxReadFileBytes {
		return sb.ReadFile(ctx, path)
	}
	sess, err := session(sb)
	if err != nil {
		return nil, err
	}
	rc, err := sess.OpenFile(ctx, path, client.LineRange{})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, maxBytes+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > maxBytes {
		return nil, overMaxBytes(path, maxBytes)
	}
	return data, nil
}

// overMaxBytes is the read op's failure past the caller's maxBytes:
// InvalidArg, as sandbox.ReadFile's past MAX_READ_FILE_BYTES is (the read
// the caller bounded is refused, whether the file is large or the guest
// hostile), with the bound in its chain.
func overMaxBytes(path string, maxBytes int64) error {
	return client.Errorf(taxonomy.KindInvalidArg, "", "engine: reading %s: the file is over the read's maxBytes (%d); nothing past the bound was handed over; raise maxBytes if the file is meant to be that large", path, maxBytes).
		WithCause(&client.BoundError{Key: "maxBytes", Limit: maxBytes, What: path})
}
