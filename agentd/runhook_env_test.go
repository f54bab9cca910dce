package agentd

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/microvms/microvms/gen/protocol"
)

// Catches: the refusal of a bad env key naming the wrong key (`index-1` for
// `index+1`): keys are reported 1-based in sorted order, so "B=C" after "A"
// is key #2. Sent through the real run hook, which answers 400 and installs
// nothing.
func TestRunHookNamesTheBadEnvKeyByPosition(t *testing.T) {
	d := startDaemon(t, nil)
	s := `{"agent_token":"tok","env":{"A":"1","B=C":"2"}}`
	resp, err := d.client.HookRunWithResponse(context.Background(), protocol.RunHookEnvelope{RunHookPayload: &s})
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode() != http.StatusBadRequest || !strings.Contains(string(resp.Body), "(key #2 in sorted order)") {
		t.Fatalf("%d %s", resp.StatusCode(), resp.Body)
	}
	if d.srv.boot.bootstrapped() {
		t.Fatal("a refused payload installed a token")
	}
}
