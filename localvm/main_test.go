package localvm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/microvms/microvms/gen/taxonomy"
	"github.com/microvms/microvms/internal/testvm"
)

// agentdBin is the real daemon every guest of these tests runs.
var agentdBin string

func TestMain(m *testing.M) {
	Init() // this test binary is also every guest's init
	testvm.Main(m, &agentdBin)
}

// loopback is the transport to a guest without Dial.
var loopback = &http.Transport{Proxy: nil, DisableCompression: true}

// postRunHook delivers the run hook as the control plane does (over
// loopback, addressed to localhost) and returns "" or why it failed.
func postRunHook(ctx context.Context, rt http.RoundTripper, addr string, body []byte, timeout time.Duration) string {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+taxonomy.HookPrefix+"/run", bytes.NewReader(body))
	if err != nil {
		return err.Error()
	}
	req.Header.Set("Content-Type", "application/json")
	req.Host = "localhost"
	req.Close = true
	resp, err := (&http.Client{Transport: rt}).Do(req)
	if err != nil {
		return err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Sprintf("the run hook answered %d", resp.StatusCode)
	}
	return ""
}
