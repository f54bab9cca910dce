package main_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// stdioMCP is `microvm mcp --local` over stdio for one test, connected,
// with a context bounded at bound: a server that stops answering fails the
// test instead of hanging it.
func stdioMCP(t *testing.T, bound time.Duration) (context.Context, *mcp.ClientSession) {
	t.Helper()
	agentdBin(t)
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	t.Cleanup(cancel)
	_, stdin, stdout, _ := startMCP(t, false)
	cs, _ := connectMCP(t, ctx, &mcp.IOTransport{Reader: stdout, Writer: stdin})
	return ctx, cs
}
