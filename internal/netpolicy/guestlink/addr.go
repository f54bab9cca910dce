// Package guestlink is the guest's side of a policy network's link
// (internal/netpolicy serves the other): the addresses, the tun device and
// the rtnetlink requests that give it the guest's address and route. It is
// what a guest's init links (localvm/guestinit), so it imports nothing but
// the standard library and x/sys: no network stack.
package guestlink

import "net/netip"

// The guest's side of the link: the guest's tun gets GuestAddr/GuestPrefix,
// a default route through GatewayAddr, and GatewayAddr as its only name
// server.
var (
	GatewayAddr = netip.MustParseAddr("10.0.2.2")
	GuestAddr   = netip.MustParseAddr("10.0.2.15")
	GuestPrefix = 24
)
