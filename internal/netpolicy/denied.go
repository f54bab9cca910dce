package netpolicy

import (
	"sync"
	"time"

	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Why a connection was refused: the deniedConnection.why enum of
// api/cli.yaml.
const (
	whyHost     = "host-not-allowed"
	whyAddr     = "address-not-allowed"
	whyPort     = "port-not-allowed"
	whyProto    = "protocol-not-allowed"
	whyQuery    = "query-type-not-allowed"
	whyFronting = "host-header-mismatch"
	whyChanged  = "policy-changed"
)

// maxDeniedHost is the longest host kept in the list: a DNS name's
// longest.
const maxDeniedHost = 253

// deniedLog counts refusals and keeps the last taxonomy.NetworkDeniedListed.
type deniedLog struct {
	mu    sync.Mutex
	count int64
	ring  []cliapi.DeniedConnection
	next  int
	now   func() time.Time
}

func (d *deniedLog) add(host string, port uint16, proto, why string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.count++
	if len(host) > maxDeniedHost {
		host = host[:maxDeniedHost] // the guest chose it; the list stays small
	}
	e := cliapi.DeniedConnection{Host: host, Port: int64(port), Proto: proto, Why: why,
		At: d.now().UTC().Format(time.RFC3339Nano)}
	if len(d.ring) < taxonomy.NetworkDeniedListed {
		d.ring = append(d.ring, e)
		return
	}
	d.ring[d.next] = e
	d.next = (d.next + 1) % len(d.ring)
}

// snapshot answers the count and the kept refusals, oldest first.
func (d *deniedLog) snapshot() (int64, []cliapi.DeniedConnection) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]cliapi.DeniedConnection, 0, len(d.ring))
	out = append(out, d.ring[d.next:]...)
	out = append(out, d.ring[:d.next]...)
	return d.count, out
}
