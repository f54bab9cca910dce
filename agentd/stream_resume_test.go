package agentd

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// binaryStream opens GET /v1/exec/{id}/stream on a running binary with a raw
// query and Last-Event-ID, and returns the status and the parsed events.
func binaryStream(t *testing.T, p *process, token, id, query, lastEventID string) (int, []sseEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, p.base+"/v1/exec/"+id+"/stream"+query, nil)
	req.Header.Set("Authorization", "Bearer "+token)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	return resp.StatusCode, readSSE(t, resp.Body)
}

// Catches: events without id lines, ids naming where an event starts rather
// than where a reconnect resumes (an EventSource would replay the last
// chunk), Last-Event-ID ignored (a reconnect replays everything from 0),
// Last-Event-ID preferred over an explicit offset query, and a gap event's id
// not moving the resume point past the lost range.
func TestBinaryStreamIDsAndLastEventID(t *testing.T) {
	// A 64-byte replay window, so a read from 0 after the exec has printed
	// 500 bytes starts with a gap.
	p := startBinary(t, "AGENTD_STREAM_BUFFER_BYTES=64")
	ctx := context.Background()
	token := "resume-token"
	payload := `{"agent_token":"` + token + `"}`
	if r, _ := p.client.HookRunWithResponse(ctx, protocol.RunHookEnvelope{RunHookPayload: &payload}); r.StatusCode() != 200 {
		t.Fatalf("run hook: %d", r.StatusCode())
	}
	start, _ := p.client.ExecStartWithResponse(ctx, protocol.StartRequest{ExecID: "r", Command: []string{"printf '%0500d' 0"}, Shell: true}, auth(token))
	if start.StatusCode() != 200 {
		t.Fatalf("start: %d %s", start.StatusCode(), start.Body)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		poll, _ := p.client.ExecPollWithResponse(ctx, "r", auth(token))
		if poll.JSON200 != nil && poll.JSON200.Phase != protocol.PhaseRunning {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("exec never exited")
		}
		time.Sleep(5 * time.Millisecond)
	}

	_, all := binaryStream(t, p, token, "r", "", "")
	out, gaps, exit := collect(t, all, 0) // collect checks every id
	if len(gaps) != 1 || gaps[0].To != 500-uint64(len(out)) || exit.Offset != 500 || strings.Trim(string(out), "0") != "" {
		t.Fatalf("from 0: %d bytes, gaps %+v, exit %+v", len(out), gaps, exit)
	}

	// An EventSource reconnecting after the gap sends the gap's id.
	_, resumed := binaryStream(t, p, token, "r", "", all[0].id)
	rout, rgaps, _ := collect(t, resumed, gaps[0].To)
	if len(rgaps) != 0 || string(rout) != string(out) {
		t.Fatalf("resumed at Last-Event-ID %s: %d bytes, gaps %+v", all[0].id, len(rout), rgaps)
	}
	// Past the last output: only the exit event, nothing replayed.
	_, tail := binaryStream(t, p, token, "r", "", "500")
	if tout, tgaps, _ := collect(t, tail, 500); len(tout) != 0 || len(tgaps) != 0 {
		t.Fatalf("resumed at the end: %d bytes, %d gaps", len(tout), len(tgaps))
	}
	// The offset query wins over the header.
	_, both := binaryStream(t, p, token, "r", "?offset=490", "470")
	if bout, _, _ := collect(t, both, 490); len(bout) != 10 {
		t.Fatalf("offset=490 with Last-Event-ID 470: %d bytes, want 10", len(bout))
	}
	if code, _ := binaryStream(t, p, token, "r", "", "not-an-offset"); code != http.StatusBadRequest {
		t.Fatalf("a malformed Last-Event-ID: %d, want 400", code)
	}
}
