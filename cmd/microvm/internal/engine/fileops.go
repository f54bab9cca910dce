package engine

import (
	"context"
	"encoding/base64"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/cmd/microvm/internal/render"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/engineapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// fileOp answers the file ops (write, read, list, the directory copies, stat, mkdir, move, remove, watch) of the bound sandbox sb.
func (e *engine) fileOp(ctx context.Context, sb *sandbox.Sandbox, req engineapi.Request) (string, any, error) {
	switch req.Op {
	case engineapi.OpWrite:
		var args engineapi.WriteArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		mode, err := fileMode(args.Mode)
		if err != nil {
			return "", nil, err
		}
		if args.LocalPath != "" {
			if args.DataBase64 != "" {
				return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: write takes dataBase64 or localPath, not both")
			}
			n, err := writeFrom(ctx, sb, args.Path, args.LocalPath, args.Size, mode)
			if err != nil {
				return "", nil, err
			}
			return cliapi.TypeCopy, cliapi.CopyData{Direction: "upload", Bytes: n, Local: args.LocalPath, Remote: args.Path}, nil
		}
		if args.Size != 0 {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: size is for a socket localPath")
		}
		data, err := base64.StdEncoding.DecodeString(args.DataBase64)
		if err != nil {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: dataBase64: %v", err)
		}
		if err := sb.WriteFile(ctx, args.Path, data, mode); err != nil {
			return "", nil, err
		}
		return cliapi.TypeCopy, cliapi.CopyData{Direction: "upload", Bytes: int64(len(data)), Local: "", Remote: args.Path}, nil
	case engineapi.OpRead:
		var args engineapi.ReadArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		if args.MaxBytes < 0 {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: maxBytes %d is negative; leave it out for the mode's own bound", args.MaxBytes)
		}
		if args.Sink != "" {
			n, err := readToSink(ctx, sb, args.Path, args.Sink, args.MaxBytes)
			if err != nil {
				return "", nil, err
			}
			return engineapi.TypeFile, engineapi.FileData{Path: args.Path, Bytes: n}, nil
		}
		if args.LocalPath != "" {
			n, err := readTo(ctx, sb, args.Path, args.LocalPath, args.MaxBytes)
			if err != nil {
				return "", nil, err
			}
			return engineapi.TypeFile, engineapi.FileData{Path: args.Path, Bytes: n}, nil
		}
		data, err := readWhole(ctx, sb, args.Path, args.MaxBytes)
		if err != nil {
			return "", nil, err
		}
		return engineapi.TypeFile, engineapi.FileData{Path: args.Path, Bytes: int64(len(data)), DataBase64: base64.StdEncoding.EncodeToString(data)}, nil
	case engineapi.OpList:
		var args engineapi.ListArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		if args.Depth < 0 || args.Depth > 1<<16 {
			return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: depth %d is out of range", args.Depth)
		}
		d := cliapi.DirData{Path: args.Path, Entries: []cliapi.FileEntry{}}
		err := sb.Session().List(ctx, args.Path, client.ListOptions{Depth: uint32(args.Depth)}, func(fi protocol.FileInfo) error {
			d.Entries = append(d.Entries, render.FileEntry(fi))
			return nil
		})
		if err != nil {
			return "", nil, err
		}
		return cliapi.TypeDir, d, nil
	case engineapi.OpUploadDir:
		var args engineapi.UploadDirArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		if err := sb.UploadDir(ctx, args.Local, args.Remote); err != nil {
			return "", nil, err
		}
		return cliapi.TypeCopy, cliapi.CopyData{Direction: "upload", Bytes: treeBytes(args.Local), Local: args.Local, Remote: args.Remote, Tar: true}, nil
	case engineapi.OpDownloadDir:
		var args engineapi.DownloadDirArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		if err := sb.DownloadDir(ctx, args.Remote, args.Local); err != nil {
			return "", nil, err
		}
		return cliapi.TypeCopy, cliapi.CopyData{Direction: "download", Bytes: treeBytes(args.Local), Local: args.Local, Remote: args.Remote, Tar: true}, nil
	case engineapi.OpStat:
		var args engineapi.StatArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.stat(ctx, sb, args)
	case engineapi.OpMkdir:
		var args engineapi.MkdirArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.mkdir(ctx, sb, args)
	case engineapi.OpMove:
		var args engineapi.MoveArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.move(ctx, sb, args)
	case engineapi.OpRemove:
		var args engineapi.RemoveArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.remove(ctx, sb, args)
	case engineapi.OpWatch:
		var args engineapi.WatchArgs
		if err := decodeArgs(req.Args, &args); err != nil {
			return "", nil, err
		}
		return e.watch(ctx, sb, req.ID, args)
	}
	return "", nil, client.Errorf(taxonomy.KindInvalidArg, "", "engine: unknown op %q", req.Op)
}
