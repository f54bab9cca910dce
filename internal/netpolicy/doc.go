// Package netpolicy serves a local guest's network under a policy the task
// controls, from outside the guest, and injects credentials the guest never
// holds (issue 48).
//
// The guest's only interface is a tun device whose file descriptor the host
// side holds (Serve). A user-space TCP/IP stack (gVisor's netstack) ends
// every packet the guest sends: nothing the guest writes is routed by the
// host's kernel. What the guest can do:
//
//   - DNS, over UDP to the gateway (GatewayAddr port 53), for A records
//     only. A name the policy allows is resolved upstream (Config.Resolver)
//     and answered with a synthetic address from SyntheticNet that stands
//     for that name alone; any other name gets NXDOMAIN, and other query
//     types (TXT, AAAA's data aside, ...) REFUSED, so lookups carry nothing
//     out. Synthetic addresses are the point: a TCP flow names the host it
//     is for by its destination, so two names sharing a CDN address cannot
//     be confused, and the host side dials the name itself (Config.Dial),
//     never an address the guest picked.
//   - TCP to a synthetic address on a port the name's rule allows, or to an
//     address inside an allowed CIDR on an allowed port. Everything else is
//     reset and counted.
//   - Nothing else: IPv6, ICMP, UDP other than that DNS, and any other IP
//     protocol are dropped at the link and counted.
//
// Domain fronting. Every TLS flow to a name (first bytes a ClientHello) is
// terminated here with a leaf for that name signed by the sandbox's own CA
// (CACertPEM; the key never leaves this process), and every HTTP request in
// it must carry the SNI's name as its Host, which must be the name the flow
// was resolved for; plain HTTP on a name flow is held to the same Host rule.
// We terminate for every allowed name rather than only for hosts with a
// bound secret because a Host header is only visible inside the TLS, and an
// allowlist a fronted request can walk around is not one. The cost, said
// plainly: a guest program that pins certificates or speaks a non-HTTP
// protocol over TLS to an allowed name fails; TLS to a CIDR rule's address
// is passed through untouched (it has no name to check). Upstream the
// request is re-encrypted against the real trust store (Config.RootCAs for
// tests) and sent over HTTP/1.1 or HTTP/2 as the server offers; the guest
// side speaks HTTP/1.1. CONNECT is refused: a flow's destination is fixed
// by its address, not by what the guest asks a proxy for.
//
// Secrets. A binding (name, hosts, value) gives the guest a placeholder,
// random per sandbox, in place of the value. In a request to a bound host
// every header value has the placeholder replaced by the value; to any other
// host the placeholder goes out as itself. The value is held in a type whose
// String, GoString and JSON forms are redacted, and no error or log line
// carries it.
//
// Policy changes (SetPolicy) apply to new connections at once and close the
// open connections the new policy does not allow.
//
// This package must never: dial an address the guest chose without a
// policy check, resolve a name for the guest that the policy does not
// allow, write a secret's value anywhere but into a request to its bound
// host, or touch the host's own network configuration (it opens no host
// interface; the runtime hands it the guest's tun).
package netpolicy
