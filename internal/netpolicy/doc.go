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
//     only (AAAA for an allowed name is answered empty). A name the policy
//     allows is resolved upstream (Config.Resolver)
//     and answered with a synthetic address from SyntheticNet that stands
//     for that name alone; any other name gets NXDOMAIN, and other query
//     types (TXT, MX, ANY, ...) REFUSED, so lookups carry nothing
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
// it must carry as its Host the name the flow was resolved for, which the
// SNI must name too; plain HTTP on a name flow is held to the same Host
// rule. We terminate for every allowed name rather than only for hosts with
// a bound secret because a Host header is only visible inside the TLS, and
// an allowlist a fronted request can walk around is not one. The cost, said
// plainly: a guest program that pins certificates, or speaks a protocol
// other than HTTP/1.1 over TLS to an allowed name, fails (the guest side is
// offered http/1.1 only; upstream may be HTTP/2). TLS to a CIDR rule's
// address is passed through untouched: it has no name to check. A name flow
// whose first bytes are neither TLS nor HTTP is carried as it is to that
// name, and so is one whose server speaks first (SSH) once the guest has
// been silent for serverFirstWait; a TLS or HTTP server never speaks
// first, so waiting buys no unterminated TLS. CONNECT is refused: a flow's
// destination is fixed by its address, not by what the guest asks a proxy
// for. An upgrade (101, a WebSocket) is carried as it is after its request
// was checked. A request's headers are bounded (maxHeaderBytes).
//
// Secrets. A binding (name, hosts, value) gives the guest a placeholder,
// random per sandbox, in place of the value (GuestEnv). In a request over
// TLS to a bound host every header value has the placeholder replaced by
// the value (inside a Basic credential's base64 too), and the answer's
// headers have the value put back to the placeholder; to any other host,
// and in clear-text HTTP to any host, the placeholder goes out as itself.
// The value is held in a type whose String, GoString and JSON forms are
// redacted, and no error carries it; this package logs nothing. What it
// cannot stop: a bound host that echoes a request's credential in an
// answer's body hands the guest the value.
//
// Policy changes (SetPolicy) apply to new connections at once and close the
// open connections the new policy does not allow before SetPolicy returns.
// Every refusal is counted, and the last taxonomy.NetworkDeniedListed are
// kept (State, the "network show" answer).
//
// The seam: the runtime, on a locked thread inside the guest's network
// namespace (the init's, or the emulator joined to it), calls OpenTun and
// ConfigureGuestLink, writes GatewayAddr into the guest's resolv.conf and
// CACertPEM into its trust store, puts GuestEnv into the guest's
// environment, and runs Serve with the tun until the guest ends. The
// guest's own processes live in a user namespace nested in the init's and
// hold no network capability there (TestGuestHoldsNoNetworkCapability), so
// guest root cannot add a route, a raw socket or a tun around Serve.
//
// This package must never: dial an address the guest chose without a
// policy check, resolve a name for the guest that the policy does not
// allow, write a secret's value anywhere but into a request to its bound
// host, or touch the host's own network configuration (it opens no host
// interface; the runtime hands it the guest's tun).
package netpolicy
