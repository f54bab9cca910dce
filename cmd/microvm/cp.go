package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// CpCmd copies a file or a tar between here and the VM.
type CpCmd struct {
	AttachFlags
	Src     string `arg:"" help:"Source: vm:/path reads from the VM, anything else is a local path."`
	Dst     string `arg:"" help:"Destination: vm:/path writes to the VM, anything else is a local path."`
	Tar     bool   `help:"Move a directory tree as an uncompressed tar: the vm: side is a directory, the local side a .tar file." xor:"tar-mode,tar-parents,tar-sync"`
	Mode    string `help:"Octal permissions for an uploaded file; a tar carries its members' own." placeholder:"OCTAL" xor:"tar-mode"`
	Parents bool   `help:"Create the uploaded file's missing parent directories on the VM; without it a missing parent is refused." xor:"tar-parents"`
	Sync    bool   `help:"Return only once the uploaded file is on the VM's disk (fsync of the file and its directory); without it the copy ends once the file is whole under its name in the VM's page cache." xor:"tar-sync"`
	// The guest decides how many bytes a download sends; this decides how
	// many are written here.
	MaxBytes int64 `name:"max-bytes" help:"Most bytes a download writes locally (a file, or a --tar archive); past it the copy fails, naming the bound, and leaves nothing at DST. Unset, ${max_download} (DEFAULT_MAX_DOWNLOAD_BYTES). Zero blocks are written as holes, and a download also stops before the free space of DST's filesystem runs out." placeholder:"BYTES"`
}

const vmPrefix = "vm:"

func (c *CpCmd) run(ctx context.Context, a *app) (*render.Result, error) {
	srcVM, dstVM := strings.HasPrefix(c.Src, vmPrefix), strings.HasPrefix(c.Dst, vmPrefix)
	if srcVM == dstVM {
		return nil, render.InvalidArg("", "exactly one of SRC and DST must be vm:/path (got %q and %q)", c.Src, c.Dst)
	}
	remote := strings.TrimPrefix(c.Src, vmPrefix)
	if dstVM {
		remote = strings.TrimPrefix(c.Dst, vmPrefix)
	}
	if !strings.HasPrefix(remote, "/") {
		// agentd would resolve it against its own working directory, which
		// is nothing the caller chose.
		return nil, render.InvalidArg("", "vm:%s is relative: a vm: path is absolute in the guest, e.g. vm:/%s", remote, strings.TrimPrefix(remote, "./"))
	}
	if dstVM {
		st, err := os.Stat(c.Src)
		switch {
		case err != nil:
			return nil, render.InvalidArg("", "%v", err)
		case st.IsDir() && !c.Tar:
			return nil, render.InvalidArg("", "%s is a directory: copy a tree with --tar, from a .tar of it (tar -cf tree.tar -C %s .)", c.Src, shellQuote(c.Src))
		case st.IsDir():
			return nil, render.InvalidArg("", "%s is a directory: with --tar the local side is a .tar archive (tar -cf tree.tar -C %s .)", c.Src, shellQuote(c.Src))
		case !st.Mode().IsRegular():
			return nil, render.InvalidArg("", "%s is not a regular file", c.Src)
		}
	}
	var mode os.FileMode
	if c.Mode != "" {
		if !srcVM {
			m, err := strconv.ParseUint(c.Mode, 8, 32)
			if err != nil || m > 0o7777 {
				return nil, render.InvalidArg("", "--mode %q is not octal permission bits", c.Mode)
			}
			mode = os.FileMode(m)
		} else {
			return nil, render.InvalidArg("", "--mode applies to an upload only")
		}
	}
	if c.Sync && srcVM {
		return nil, render.InvalidArg("", "--sync applies to an upload only")
	}
	switch {
	case c.MaxBytes < 0:
		return nil, render.InvalidArg("", "--max-bytes %d is not a positive number of bytes", c.MaxBytes)
	case c.MaxBytes != 0 && dstVM:
		return nil, render.InvalidArg("", "--max-bytes applies to a download only (vm:SRC)")
	}
	s, err := c.session(ctx, a)
	if err != nil {
		return nil, err
	}
	d := cliapi.CopyData{Tar: c.Tar}
	if dstVM {
		d.Direction, d.Local, d.Remote = "upload", c.Src, strings.TrimPrefix(c.Dst, vmPrefix)
		f, err := os.Open(d.Local)
		if err != nil {
			return nil, render.InvalidArg("", "opening %s: %v", d.Local, err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil {
			d.Bytes = st.Size()
		}
		if !c.Tar && !c.Parents {
			// The daemon creates missing parents; a typo in a directory
			// name would then make a new tree instead of failing.
			if err := c.parentExists(ctx, s, d.Remote); err != nil {
				return nil, err
			}
		}
		sent, done := a.TransferBar("upload " + c.Src)
		// Counted only when a bar is drawn: the file itself keeps the
		// client's fast path (its size as Content-Length, sendfile).
		var body io.Reader = f
		if a.BarOn() {
			body = &render.CountingReader{R: f, Total: d.Bytes, Sent: sent}
		}
		if c.Tar {
			err = s.WriteTar(ctx, d.Remote, body)
		} else if c.Sync {
			err = s.WriteFileDurable(ctx, d.Remote, body, mode)
		} else {
			err = s.WriteFile(ctx, d.Remote, body, mode)
		}
		sent(d.Bytes, d.Bytes)
		done(err == nil)
		if err != nil {
			return nil, err
		}
	} else {
		d.Direction, d.Local, d.Remote = "download", c.Dst, strings.TrimPrefix(c.Src, vmPrefix)
		// Session.Download writes a temporary sibling and renames it, so a
		// failed download never leaves a half file under the name asked for.
		sent, done := a.TransferBar("download " + c.Src)
		n, err := s.Download(ctx, d.Remote, d.Local, client.DownloadOptions{Tar: c.Tar, MaxBytes: c.MaxBytes,
			Progress: func(n int64) { sent(n, -1) }})
		done(err == nil)
		if err != nil {
			return nil, err
		}
		d.Bytes = n
	}
	return &render.Result{Type: cliapi.TypeCopy, Data: d, Human: func(w io.Writer) error {
		arrow := map[string]string{"upload": "->", "download": "<-"}[d.Direction]
		_, err := fmt.Fprintf(w, "%s %s vm:%s  %s\n", d.Local, arrow, d.Remote, render.HumanBytes(d.Bytes))
		return err
	}}, nil
}

// parentExists refuses an upload whose parent directory is missing on the
// VM, through Session.Stat (which follows no symlink: a symlinked parent is
// left to the daemon). A daemon without /v1/fs/stat (the reference's)
// answers its 404 without the path_not_found slug; only then is the parent
// probed the old way, by reading it as a file: a directory answers 400, a
// missing path 404.
func (c *CpCmd) parentExists(ctx context.Context, s *client.Session, remote string) error {
	parent := dirOf(remote)
	if parent == "/" {
		return nil
	}
	missing := client.Errorf(taxonomy.KindPrecondition, "", "vm:%s does not exist, so vm:%s has nowhere to go; pass --parents to create it", parent, remote)
	fi, err := s.Stat(ctx, parent)
	var ce *client.Error
	switch {
	case err == nil && fi.Type == protocol.FileTypeDirectory, err == nil && fi.Type == protocol.FileTypeSymlink:
		return nil
	case err == nil:
		return render.InvalidArg("", "vm:%s is a %s, not a directory", parent, fi.Type)
	case errors.As(err, &ce) && ce.Slug() == "path_not_found":
		return missing
	case !errors.Is(err, client.WireKindError(taxonomy.WireNotFound)):
		return err
	}
	_, err = s.ReadFile(ctx, parent, io.Discard, client.LineRange{Start: 1, End: 1})
	switch {
	case err == nil:
		return render.InvalidArg("", "vm:%s is a file, not a directory", parent)
	case errors.Is(err, client.WireKindError(taxonomy.WireProtocolError)):
		return nil // a directory
	case errors.Is(err, client.WireKindError(taxonomy.WireNotFound)):
		return missing
	}
	return err
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		if i == 0 {
			return "/"
		}
		return path[:i]
	}
	return "."
}
