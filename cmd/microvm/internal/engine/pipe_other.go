//go:build !linux

package engine

import "os"

// widenPipe does nothing where a pipe's buffer cannot be set (F_SETPIPE_SZ
// is Linux's).
func widenPipe(*os.File) {}
