package agentd

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/microvms/microvms/docs"
	"github.com/microvms/microvms/gen/protocol"
)

// Health reports liveness for an orchestrator outside the VM. Open, because
// the platform counts only inbound traffic through its proxy, so an outside
// poll is both the keepalive and the decision; busy says whether to keep it.
func (s *Server) Health(w http.ResponseWriter, r *http.Request) {
	busy, count := s.execs.activity()
	id := s.identityReport()
	writeJSON(w, http.StatusOK, protocol.Health{
		Version:          Version,
		Bootstrapped:     s.boot.bootstrapped(),
		Disk:             s.fs.DiskHealth(), // nil when unmeasurable, which is not "full"
		IdentityDegraded: id.Degraded,
		IdentityRepaired: id.Repaired,
		Busy:             busy,
		Execs:            uint(count),
	})
}

// Schema serves docs/schema.json with its limits taken from the running
// configuration. Open: a client needs the contract before it holds a token.
func (s *Server) Schema(w http.ResponseWriter, r *http.Request) {
	doc, err := s.schema()
	if err != nil {
		// Only a broken build gets here: the embedded document is checked
		// by the tests, and the limits re-encoded are plain numbers.
		s.log.Error("cannot build /v1/schema", "err", err.Error())
		http.Error(w, "the schema document could not be built", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(doc)
}

// Capabilities serves the few members of the protocol document a client
// needs before its first exec (api/openapi.yaml), built from the generated
// route table and the running limits, never from the 124 KB document: the
// first exchange of every session waits for it.
func (s *Server) Capabilities(w http.ResponseWriter, r *http.Request) {
	doc, err := s.capabilities()
	if err != nil {
		s.log.Error("cannot build /v1/capabilities", "err", err.Error())
		http.Error(w, "the capabilities could not be built", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(doc)
}

// capabilitiesDocument is /v1/capabilities's body for cfg.
func capabilitiesDocument(cfg *Config) ([]byte, error) {
	limits, _ := runningLimits(cfg)
	doc := protocol.Capabilities{
		ProtocolVersion: protocol.ProtocolVersion,
		DaemonVersion:   Version,
		Routes:          make([]protocol.CapabilityRoute, 0, len(protocol.Operations)),
		Frames:          protocol.CapabilityFrames{MediaType: protocol.FramesMediaType},
		Limits:          limits,
	}
	for _, op := range protocol.Operations {
		doc.Routes = append(doc.Routes, protocol.CapabilityRoute{Method: op.Method, Path: op.Pattern})
	}
	return json.Marshal(doc)
}

// runningLimits is every declared limit at the value this daemon runs with,
// and whether any differs from its default.
func runningLimits(cfg *Config) (map[string]float64, bool) {
	limits := make(map[string]float64, len(protocol.Limits))
	changed := false
	for _, l := range protocol.Limits {
		v := l.Default
		if got, ok := cfg.LimitValue(l.Name); ok && l.Env != "" {
			v = got
		}
		if v != l.Default {
			changed = true
		}
		limits[l.Name] = v
	}
	return limits, changed
}

// schemaDocument is docs.SchemaJSON byte for byte when every limit is at its
// default and the build kept the declared version, and otherwise the same
// document with its limits object rewritten to the values this daemon is
// actually running with and daemon_version set to Version, so the document
// never disagrees with the header and /v1/health.
func schemaDocument(cfg *Config) ([]byte, error) {
	limits, changed := runningLimits(cfg)
	if !changed && Version == protocol.DaemonVersion {
		return docs.SchemaJSON, nil
	}
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(docs.SchemaJSON, &doc); err != nil {
		return nil, fmt.Errorf("agentd: embedded schema.json is not a JSON object: %w", err)
	}
	raw, err := json.Marshal(limits)
	if err != nil {
		return nil, err
	}
	doc["limits"] = raw
	if doc["daemon_version"], err = json.Marshal(Version); err != nil {
		return nil, err
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, out, "", "  "); err != nil {
		return nil, err
	}
	pretty.WriteByte('\n')
	return pretty.Bytes(), nil
}
