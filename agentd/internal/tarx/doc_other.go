//go:build !linux

package tarx

// Extraction is confined with openat2(RESOLVE_BENEATH) and writes members
// through O_TMPFILE, both Linux system calls (extract_linux.go). Building it
// elsewhere stops here with this name in the error.
var _ = tarxExtractsOnlyOnLinux
