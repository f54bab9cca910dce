package agentd

import (
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// signalsByName is the closed set POST /v1/exec/{id}/signal accepts, keyed by
// protocol.SignalName. Signals that only make sense from the kernel (SEGV,
// BUS, ...) are not in it: sending one would only fake a crash.
var signalsByName = map[protocol.SignalName]unix.Signal{
	"HUP": unix.SIGHUP, "INT": unix.SIGINT, "QUIT": unix.SIGQUIT, "KILL": unix.SIGKILL,
	"USR1": unix.SIGUSR1, "USR2": unix.SIGUSR2, "PIPE": unix.SIGPIPE, "ALRM": unix.SIGALRM,
	"TERM": unix.SIGTERM, "CONT": unix.SIGCONT, "STOP": unix.SIGSTOP, "TSTP": unix.SIGTSTP,
	"WINCH": unix.SIGWINCH,
}

// parseSignal maps a name, with or without the SIG prefix, to its signal.
// Exact upper case only: a lenient spelling would make two clients' "same"
// request mean different things once the set grows.
func parseSignal(raw string) (protocol.SignalName, unix.Signal, bool) {
	name := protocol.SignalName(strings.TrimPrefix(raw, "SIG"))
	sig, ok := signalsByName[name]
	if !ok || !name.Valid() {
		return "", 0, false
	}
	return name, sig, true
}

// ExecSignal sends one signal to the exec's process group, through the same
// ownership checks as kill, and without kill's escalation.
func (s *Server) ExecSignal(w http.ResponseWriter, _ *http.Request, id protocol.ExecID, p protocol.ExecSignalParams) {
	name, sig, ok := parseSignal(p.Signal)
	if !ok {
		writeError(w, taxonomy.SlugUnknownSignal,
			"signal must be one of HUP INT QUIT KILL USR1 USR2 PIPE ALRM TERM CONT STOP TSTP WINCH, with or without SIG")
		return
	}
	e := s.execs.get(id)
	if e == nil {
		s.unknownExec(w, id)
		return
	}
	delivered, err := e.signalGroup(sig)
	if err != nil {
		s.log.Warn("signal failed", "exec_id", id, "signal", string(name), "err", err)
	}
	s.log.Info("signal sent", "exec_id", id, "pgid", e.pgid, "signal", string(name), "delivered", delivered)
	writeJSON(w, http.StatusOK, protocol.SignalResponse{ExecID: id, Signal: name, Delivered: delivered})
}

// ExecList answers GET /v1/execs: every registered exec, oldest first.
func (s *Server) ExecList(w http.ResponseWriter, _ *http.Request) {
	entries := s.execs.all()
	slices.SortFunc(entries, func(a, b *execEntry) int {
		if c := a.started.Compare(b.started); c != 0 {
			return c
		}
		return strings.Compare(a.id, b.id)
	})
	out := protocol.ExecListResponse{Execs: make([]protocol.ExecSummary, 0, len(entries))}
	for _, e := range entries {
		sum := protocol.ExecSummary{
			ExecID:    e.id,
			Phase:     s.execs.phase(e),
			StartedAt: e.started.UTC().Truncate(time.Microsecond),
			Command:   e.argv,
			Pid:       int32(e.pgid),
		}
		if sum.Phase != protocol.PhaseRunning {
			// Finished (exited or acked): the usage stays with the exec until
			// it is collected, also after the ack released its output.
			st := e.log.exitStatus()
			sum.Usage, sum.OomKilled = st.usage, oomField(st)
		}
		out.Execs = append(out.Execs, sum)
	}
	writeJSON(w, http.StatusOK, out)
}
