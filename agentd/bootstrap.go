package agentd

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// bootstrap is the one-shot token slot and the launch env beside it. The token
// and the env are separate fields set by one call with separate arguments, so
// no code path can move a byte of the token into a child's environment.
type bootstrap struct {
	mu        sync.RWMutex
	token     []byte // nil until the run hook installs one
	launchEnv map[string]string
}

type bootstrapOutcome int

const (
	installed bootstrapOutcome = iota
	identicalReplay
	conflict
)

// install is decided under one lock, so concurrent run hooks have exactly one
// winner, and the winner's env is in place before any caller can see a token.
// Only the first install sets the env: a replay (even with another env) or a
// conflicting token changes nothing.
func (b *bootstrap) install(token []byte, env map[string]string) bootstrapOutcome {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.token == nil {
		b.token = bytes.Clone(token)
		b.launchEnv = env
		return installed
	}
	if subtle.ConstantTimeCompare(b.token, token) == 1 {
		return identicalReplay
	}
	return conflict
}

func (b *bootstrap) bootstrapped() bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.token != nil
}

// env returns the installed launch env. The map is never mutated after
// install, so sharing it read-only is safe.
func (b *bootstrap) env() map[string]string {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.launchEnv
}

// authorize returns 0 when the Authorization header carries the installed
// token, 503 before bootstrap, and 401 otherwise. The header is compared as
// raw bytes in constant time: a non-ASCII value is just bytes that do not
// match, never a decoding error that drops the connection.
func (b *bootstrap) authorize(header string) int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.token == nil {
		return http.StatusServiceUnavailable
	}
	scheme, presented, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return http.StatusUnauthorized
	}
	if subtle.ConstantTimeCompare(b.token, []byte(presented)) != 1 {
		return http.StatusUnauthorized
	}
	return 0
}

// runHookBodyLimit caps the unauthenticated run hook's body. The platform caps
// the payload string at 4096 bytes; JSON escaping can grow it a few times.
const runHookBodyLimit = 64 << 10

// runHookError names a key or a shape and never a value: the payload carries
// the agent token, and a message that quoted a value would put it in a log
// line and a response body.
type runHookError struct{ msg string }

func (e *runHookError) Error() string { return e.msg }

var (
	errEnvelopeNotJSON   = &runHookError{"the run hook body is not a JSON object like {\"runHookPayload\": \"<json string>\"}"}
	errEnvelopeNoPayload = &runHookError{"the run hook body has no runHookPayload string"}
	errPayloadNotObject  = &runHookError{"runHookPayload is not a JSON object; the platform wraps the string given at launch, so the payload is one parse deeper than the body: {\"runHookPayload\": \"{\\\"agent_token\\\": \\\"...\\\"}\"}"}
	errTokenMissing      = &runHookError{"runHookPayload has no agent_token string"}
	errTokenEmpty        = &runHookError{"agent_token is empty"}
	errEnvNotObject      = &runHookError{"env must be a JSON object of string keys to string values, and it is not an object"}
)

func errEnvValue(key string) error {
	return &runHookError{"env[" + strconv.Quote(key) + "] is not a string; every launch-environment value must be a JSON string"}
}

func errEnvKey(index int) error {
	return &runHookError{"env has a key that is empty or contains '=' or NUL (key #" + strconv.Itoa(index+1) + " in sorted order), which no environment can hold"}
}

// parseRunHookEnvelope reads the platform's envelope and returns the payload
// string inside it.
func parseRunHookEnvelope(body []byte) (string, error) {
	var envelope map[string]json.RawMessage
	if err := json.Unmarshal(body, &envelope); err != nil || envelope == nil {
		return "", errEnvelopeNotJSON
	}
	raw, ok := envelope["runHookPayload"]
	if !ok || !isJSONString(raw) {
		return "", errEnvelopeNoPayload
	}
	var payload string
	if err := json.Unmarshal(raw, &payload); err != nil {
		return "", errEnvelopeNoPayload
	}
	return payload, nil
}

// parseRunHookPayload reads the caller's payload: agent_token (non-empty
// string) and env (absent, null, or an object of strings). Unknown keys are
// ignored, because a 400 here makes the platform terminate the VM, and a newer
// client's extra field must not be a dead launch.
func parseRunHookPayload(raw string) (token []byte, env map[string]string, err error) {
	var object map[string]json.RawMessage
	if err := json.Unmarshal([]byte(raw), &object); err != nil || object == nil {
		return nil, nil, errPayloadNotObject
	}
	rawToken, ok := object["agent_token"]
	if !ok || !isJSONString(rawToken) {
		return nil, nil, errTokenMissing
	}
	var tok string
	if err := json.Unmarshal(rawToken, &tok); err != nil {
		return nil, nil, errTokenMissing
	}
	if tok == "" {
		return nil, nil, errTokenEmpty
	}
	env = map[string]string{}
	if rawEnv, ok := object["env"]; ok && !isJSONNull(rawEnv) {
		var entries map[string]json.RawMessage
		if err := json.Unmarshal(rawEnv, &entries); err != nil || entries == nil {
			return nil, nil, errEnvNotObject
		}
		keys := sortedKeys(entries)
		for i, key := range keys {
			v := entries[key]
			if !isJSONString(v) {
				return nil, nil, errEnvValue(key)
			}
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return nil, nil, errEnvValue(key)
			}
			if !validEnvKey(key) {
				return nil, nil, errEnvKey(i)
			}
			env[key] = s
		}
	}
	return []byte(tok), env, nil
}

// sortedKeys makes the first reported fault the same on every run.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

func validEnvKey(k string) bool {
	return k != "" && !strings.ContainsAny(k, "=\x00")
}

func isJSONString(raw json.RawMessage) bool {
	raw = bytes.TrimLeft(raw, " \t\r\n")
	return len(raw) > 0 && raw[0] == '"'
}

func isJSONNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

// HookRun installs the bearer token and launch env, once.
func (s *Server) HookRun(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, runHookBodyLimit))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			s.hookRefusal(w, &runHookError{"the run hook body is larger than " + strconv.Itoa(runHookBodyLimit) + " bytes"})
			return
		}
		s.hookRefusal(w, &runHookError{"the run hook body could not be read"})
		return
	}
	payload, err := parseRunHookEnvelope(body)
	if err != nil {
		s.hookRefusal(w, err)
		return
	}
	token, env, err := parseRunHookPayload(payload)
	if err != nil {
		s.hookRefusal(w, err)
		return
	}
	switch s.boot.install(token, env) {
	case installed:
		// The count, never the values: a launch env is where callers put credentials.
		s.log.Info("agent token installed", "launch_env_vars", len(env))
		// Before the 200, so the first exec after it sees the repaired
		// identity (it was repaired in the background, after the answer).
		s.repairIdentityAtBootstrap()
		w.WriteHeader(http.StatusOK)
	case identicalReplay:
		s.log.Info("identical run hook replay accepted")
		// A replay racing the first hook answers no sooner than its repair
		// is done (Once.Do waits for it); a finished repair is not rerun.
		s.repairIdentityAtBootstrap()
		w.WriteHeader(http.StatusOK)
	default:
		s.log.Warn("run hook refused: a different token is already installed")
		w.WriteHeader(http.StatusConflict)
	}
}

// hookRefusal is the run hook's 400. The body names the fault because this
// failure is invisible from outside: the platform terminates the VM with only
// "Run lifecycle hook returned HTTP status 400".
func (s *Server) hookRefusal(w http.ResponseWriter, err error) {
	s.log.Warn("run hook payload refused", "reason", err.Error())
	http.Error(w, err.Error(), http.StatusBadRequest)
}

// HookReady answers the image build's readiness probe; it asks whether the
// daemon started, not whether it is bootstrapped.
func (s *Server) HookReady(w http.ResponseWriter, r *http.Request) {
	s.log.Info("ready hook")
	w.WriteHeader(http.StatusOK)
}

// HookValidate answers the image build's validation probe, like ready.
func (s *Server) HookValidate(w http.ResponseWriter, r *http.Request) {
	s.log.Info("validate hook")
	w.WriteHeader(http.StatusOK)
}

// HookSuspend is acknowledged: a suspend is a freeze, and state survives it.
func (s *Server) HookSuspend(w http.ResponseWriter, r *http.Request) {
	s.log.Info("suspend hook")
	w.WriteHeader(http.StatusOK)
}

// HookResume is acknowledged. Guest wall-clock jumps across a suspend, so any
// running timeout may fire at once; a resume without a token is a cold start
// in disguise and is worth a warning.
func (s *Server) HookResume(w http.ResponseWriter, r *http.Request) {
	if s.boot.bootstrapped() {
		s.log.Info("resume hook; bootstrap state intact")
	} else {
		s.log.Warn("resume hook without an installed token; the control API stays closed until a run hook arrives")
	}
	w.WriteHeader(http.StatusOK)
}

// HookTerminate answers 200 and then begins a graceful shutdown.
func (s *Server) HookTerminate(w http.ResponseWriter, r *http.Request) {
	s.log.Info("terminate hook; beginning graceful shutdown")
	w.WriteHeader(http.StatusOK)
	s.terminateOnce.Do(func() { close(s.terminate) })
}
