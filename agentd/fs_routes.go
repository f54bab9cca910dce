package agentd

// The file routes that hand over to fs.go's implementations: the generated
// interface's methods, kept apart from the server's set-up.

import (
	"context"
	"net/http"

	"github.com/microvms/microvms/gen/protocol"
)

// FsReadFile delegates to FS.
// A read ends with shutdown too, so an endless device being read does not
// hold the graceful shutdown for its whole grace.
func (s *Server) FsReadFile(w http.ResponseWriter, r *http.Request, p protocol.FsReadFileParams) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() {
		select {
		case <-s.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	s.fs.ReadFile(w, r.WithContext(ctx), p)
}

// FsWriteFile delegates to FS.
func (s *Server) FsWriteFile(w http.ResponseWriter, r *http.Request, p protocol.FsWriteFileParams) {
	s.fs.WriteFile(w, r, p)
}

// FsReadTar delegates to FS.
func (s *Server) FsReadTar(w http.ResponseWriter, r *http.Request, p protocol.FsReadTarParams) {
	s.fs.ReadTar(w, r, p.Path, false)
}

// FsReadTarExact delegates to FS.
func (s *Server) FsReadTarExact(w http.ResponseWriter, r *http.Request, p protocol.FsReadTarExactParams) {
	s.fs.ReadTar(w, r, p.Path, true)
}

// FsWriteTar delegates to FS.
func (s *Server) FsWriteTar(w http.ResponseWriter, r *http.Request, p protocol.FsWriteTarParams) {
	s.fs.WriteTar(w, r, p.Path, false)
}

// FsWriteTarExact delegates to FS.
func (s *Server) FsWriteTarExact(w http.ResponseWriter, r *http.Request, p protocol.FsWriteTarExactParams) {
	s.fs.WriteTar(w, r, p.Path, true)
}
