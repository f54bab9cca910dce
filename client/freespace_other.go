//go:build !unix

package client

// freeBytes is unknown here: only the download's own bound applies.
func freeBytes(string) (int64, bool) { return 0, false }
