package sandbox

// The session plane's gate: a RUNNING sandbox's session, or the refusal
// that says why there is none, which Run and the file calls (files.go)
// share.

import (
	"context"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// runningSession is the session of a RUNNING sandbox, or the refusal that says why
// there is none (the same one Run gives).
func (s *Sandbox) runningSession() (*client.Session, error) {
	s.mu.Lock()
	st, sess, dead := s.m.lifecycle, s.session, s.m.wasTerminated
	s.mu.Unlock()
	if st == Running && sess != nil {
		return sess, nil
	}
	if dead {
		return nil, client.Errorf(taxonomy.KindInvalidArg, "",
			"MicroVM %s was terminated (it is %s) and a terminated MicroVM never runs again; launch a new sandbox", s.id, st)
	}
	if st == Suspended || st == Suspending {
		return nil, refuse(taxonomy.FindingSuspendIsFreeze, "MicroVM %s is %s and a suspended VM answers nothing; Resume it first", s.id, st)
	}
	return nil, client.Errorf(taxonomy.KindInvalidArg, "", "MicroVM %s is %s; commands and files are served only once Launch or Attach returned a RUNNING sandbox", s.id, st)
}

// Run runs command in the VM through its session and returns its record;
// a non-zero exit is not an error here (Result.Err classifies it, and
// Result.ExitStatus is the plain int). Only a RUNNING VM is asked: a
// suspended one would not answer, and a terminated one never will.
func (s *Sandbox) Run(ctx context.Context, command []string, o client.RunOptions) (client.Result, error) {
	sess, err := s.runningSession()
	if err != nil {
		return client.Result{}, err
	}
	s.warnDeadline(command, o)
	return sess.Run(ctx, command, o)
}
