package agentd

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// ExecStart starts a command under the caller's exec_id, once.
func (s *Server) ExecStart(w http.ResponseWriter, r *http.Request) {
	id, phase, ok := s.startFromBody(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, protocol.StartResponse{ExecID: id, Phase: phase})
}

// ExecRun starts a command as ExecStart does and answers with its stream
// from offset 0, releasing the exec as an ack would once the exit event is
// written: one exchange per exec instead of start, stream and ack. A
// connection lost before the exit leaves the exec unacked for the stream,
// poll and ack routes.
func (s *Server) ExecRun(w http.ResponseWriter, r *http.Request) {
	id, _, ok := s.startFromBody(w, r)
	if !ok {
		return
	}
	e := s.execs.get(id)
	if e == nil {
		// Collected between the start and here: only an acked exec is
		// collected, so its output is gone, as a stream would say.
		s.unknownExec(w, id)
		return
	}
	if s.follow(w, r, e, 0, true) {
		stdout, stderr, _, _ := e.log.outcome()
		if s.release(e) {
			s.execs.reclaim.released(stdout.n + stderr.n)
		}
	}
}

// startFromBody reads a start request and starts (or finds) its exec,
// answering the refusal itself when it cannot.
func (s *Server) startFromBody(w http.ResponseWriter, r *http.Request) (string, protocol.Phase, bool) {
	// limits.max_start_body_bytes: argv and env are all a start carries (the
	// kernel refuses an exec whose strings exceed a quarter of the stack limit
	// anyway), so a start never holds up to max_body_bytes in memory to decode.
	limit := min(s.cfg.MaxStartBodyBytes, s.cfg.MaxBodyBytes)
	tooLarge := startBodyTooLargeText(limit)
	if limit == s.cfg.MaxBodyBytes {
		tooLarge = bodyTooLargeText(limit)
	}
	if r.ContentLength > limit {
		// Declared over the cap: refused before reading, like the gate does.
		s.refuse(w, r, http.StatusRequestEntityTooLarge, tooLarge)
		return "", "", false
	}
	var req protocol.StartRequest
	if !readJSON(w, r, &req, limit, "", tooLarge) {
		return "", "", false
	}
	if max := s.cfg.MaxExecIDBytes; max > 0 && int64(len(req.ExecID)) > max {
		// Before anything holds or logs it: an id lives as long as its exec.
		writeError(w, taxonomy.SlugMalformedRequest,
			fmt.Sprintf("exec_id is %d bytes, longer than limits.max_exec_id_bytes (%d)", len(req.ExecID), max))
		return "", "", false
	}
	sp, serr := buildSpec(&req, s.boot.env())
	if serr != nil {
		writeError(w, serr.slug, serr.detail)
		return "", "", false
	}
	phase, serr := s.execs.start(req.ExecID, sp)
	if serr != nil {
		writeError(w, serr.slug, serr.detail)
		return "", "", false
	}
	return req.ExecID, phase, true
}

// The poll/ack body once the child has exited is the outcome JSON below, written
// by writeOutcome as it goes. Not the generated PollResponse: that omits a
// nil exit_code, and the contract is that a signal-killed child reports
// exit_code null, while a running poll carries no outcome fields at all.

func (s *Server) unknownExec(w http.ResponseWriter, id string) {
	if max := s.cfg.MaxExecIDBytes; max > 0 && int64(len(id)) > max {
		// Never echoed: no exec can have it, and the caller already has it.
		writeError(w, taxonomy.SlugUnknownExec, fmt.Sprintf("no exec is registered under this %d-byte exec_id (longer than limits.max_exec_id_bytes)", len(id)))
		return
	}
	writeError(w, taxonomy.SlugUnknownExec, "no exec is registered under exec_id "+fmt.Sprintf("%q", id))
}

// ExecPoll reports an exec's phase and, once exited, its outcome. Read-only.
func (s *Server) ExecPoll(w http.ResponseWriter, r *http.Request, id protocol.ExecID) {
	e := s.execs.get(id)
	if e == nil {
		s.unknownExec(w, id)
		return
	}
	phase := s.execs.phase(e)
	if phase == protocol.PhaseRunning && s.cfg.PollHold > 0 {
		// A running answer says nothing but the phase, so it can wait a
		// little for the exit: a short command's first poll then carries
		// the outcome, where the poller would otherwise back off and ask
		// again (on the shared ruler, /bin/true polled with 100 us..5 ms
		// backoff took 2.9x os/exec's time).
		hold := time.NewTimer(s.cfg.PollHold)
		select {
		case <-e.finished:
		case <-hold.C:
		case <-r.Context().Done():
		case <-s.stopping:
		}
		hold.Stop()
		phase = s.execs.phase(e)
	}
	if phase != protocol.PhaseExited {
		// Running: nothing to report yet. Acked: the output was released, and
		// reporting it again would contradict the phase.
		writeJSON(w, http.StatusOK, protocol.PollResponse{ExecID: id, Phase: phase})
		return
	}
	stdout, stderr, st, _ := e.log.outcome()
	writeOutcome(w, id, phase, stdout, stderr, st)
}

// ExecAck hands the output over once and starts the TTL clock.
func (s *Server) ExecAck(w http.ResponseWriter, r *http.Request, id protocol.ExecID) {
	e := s.execs.get(id)
	if e == nil {
		s.unknownExec(w, id)
		return
	}
	if !e.isFinished() {
		// Acking now would drop output that is still arriving.
		writeError(w, taxonomy.SlugStillRunning, "the exec has not exited; its output is still being written")
		return
	}
	// The snapshot keeps the heads alive only while this body is written.
	stdout, stderr, st, _ := e.log.outcome()
	if !s.release(e) {
		// An empty 200 would read as a command that printed nothing.
		writeError(w, taxonomy.SlugAlreadyAcked, "an earlier ack already released this exec's output")
		return
	}
	writeOutcome(w, id, protocol.PhaseAcked, stdout, stderr, st)
	s.execs.reclaim.released(stdout.n + stderr.n)
}

// release marks a finished exec acked and lets its output go, once; false
// when an earlier ack (or run) already did. The caller that holds a
// snapshot of the heads reports them to the reclaimer after it is done.
func (s *Server) release(e *execEntry) bool {
	if !s.execs.markAcked(e, time.Now()) {
		return false
	}
	e.log.release()
	s.log.Info("exec acked; output released", "exec_id", e.id)
	return true
}

// ExecKill signals the exec's whole process group: a shell that backgrounded a
// server leaves the interesting process outside the child's pid.
func (s *Server) ExecKill(w http.ResponseWriter, r *http.Request, id protocol.ExecID) {
	e := s.execs.get(id)
	if e == nil {
		s.unknownExec(w, id)
		return
	}
	killed := s.execs.escalate(e)
	s.log.Info("kill requested", "exec_id", id, "pgid", e.pgid, "signalled", killed)
	writeJSON(w, http.StatusOK, protocol.KillResponse{ExecID: id, Killed: killed})
}

// ExecStdin writes to an exec's stdin and/or closes it.
func (s *Server) ExecStdin(w http.ResponseWriter, r *http.Request, id protocol.ExecID) {
	// The body is the base64 of at most max_stdin_write_bytes plus JSON framing;
	// holding a max_body_bytes body in memory for it would be a way to OOM.
	limit := base64.StdEncoding.EncodedLen(int(s.cfg.MaxStdinWriteBytes)) + 4096
	var req protocol.StdinRequest
	if !readJSON(w, r, &req, int64(limit), taxonomy.SlugStdinWriteTooLarge, "") {
		return
	}
	e := s.execs.get(id)
	if e == nil {
		s.unknownExec(w, id)
		return
	}
	if !e.stdinRequested {
		writeError(w, taxonomy.SlugStdinNotRequested, "this exec was started without stdin: true, so its stdin is /dev/null")
		return
	}
	eof := false
	if req.Signal != nil {
		if *req.Signal != "eof" {
			writeError(w, taxonomy.SlugMalformedRequest, `signal must be "eof"; no other stdin signal is defined`)
			return
		}
		eof = true
	}
	var data []byte
	if req.DataB64 != nil {
		var err error
		if data, err = base64.StdEncoding.DecodeString(*req.DataB64); err != nil {
			writeError(w, taxonomy.SlugMalformedRequest, "data_b64 is not valid standard base64")
			return
		}
	}
	if int64(len(data)) > s.cfg.MaxStdinWriteBytes {
		writeError(w, taxonomy.SlugStdinWriteTooLarge,
			fmt.Sprintf("%d bytes exceeds the %d-byte stdin write limit; split the write", len(data), s.cfg.MaxStdinWriteBytes))
		return
	}
	e.stdinMu.Lock()
	defer e.stdinMu.Unlock()
	if e.stdin == nil {
		writeError(w, taxonomy.SlugStdinClosed, "stdin was already closed by eof, or the child has exited")
		return
	}
	written := 0
	if len(data) > 0 {
		// Bounded: a child that stops reading fills the pipe, and an unbounded
		// write would pin this request and its connection forever.
		_ = e.stdin.SetWriteDeadline(time.Now().Add(s.cfg.StdinWriteTimeout))
		n, err := e.stdin.Write(data)
		written = n
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			// The pipe stays: the child may drain it, so a retry can succeed.
			writeError(w, taxonomy.SlugStdinWriteTimeout,
				fmt.Sprintf("the child did not read stdin within the write timeout; %d of %d bytes were written", n, len(data)))
			return
		case errors.Is(err, syscall.EPIPE):
			e.stdin.Close()
			e.stdin = nil
			writeError(w, taxonomy.SlugStdinClosed, "the child is no longer reading stdin")
			return
		default:
			writeError(w, taxonomy.SlugStdinWriteFailed, err.Error())
			return
		}
	}
	if eof {
		// Closing our end is the only way the child sees EOF.
		e.stdin.Close()
		e.stdin = nil
	}
	writeJSON(w, http.StatusOK, protocol.StdinResponse{ExecID: id, Written: uint(written), EOF: eof})
}
