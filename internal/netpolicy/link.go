package netpolicy

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/nested"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

const nicID = 1

// maxFlows bounds the connections one guest holds open through the host
// side at once; past it a new one is reset.
const maxFlows = 4096

// ServeLink is Serve over any link endpoint carrying bare IP packets.
func (n *Net) ServeLink(ctx context.Context, link stack.LinkEndpoint) error {
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	defer func() {
		s.Close()
		s.Wait()
	}()
	f := &filter{n: n}
	f.Init(link, f)
	if err := s.CreateNIC(nicID, f); err != nil {
		return fmt.Errorf("the guest's link: %s", err)
	}
	// Every destination the guest writes to is answered here: the
	// synthetic addresses, the CIDR rules' addresses, the gateway.
	if err := s.SetPromiscuousMode(nicID, true); err != nil {
		return fmt.Errorf("the guest's link: %s", err)
	}
	if err := s.SetSpoofing(nicID, true); err != nil {
		return fmt.Errorf("the guest's link: %s", err)
	}
	gw := tcpip.AddrFrom4(GatewayAddr.As4())
	if err := s.AddProtocolAddress(nicID, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: gw.WithPrefix()}, stack.AddressProperties{}); err != nil {
		return fmt.Errorf("the gateway's address: %s", err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: nicID}})

	fwd := tcp.NewForwarder(s, 0, 1024, func(r *tcp.ForwarderRequest) {
		id := r.ID()
		dst := netip.AddrFrom4(id.LocalAddress.As4())
		fl, why, label := n.decide(dst, id.LocalPort)
		if fl == nil {
			n.denied.add(label, id.LocalPort, "tcp", why)
			r.Complete(true)
			return
		}
		if n.open() >= maxFlows {
			r.Complete(true) // not a policy refusal: the guest holds too many
			return
		}
		var wq waiter.Queue
		ep, terr := r.CreateEndpoint(&wq)
		if terr != nil {
			r.Complete(true)
			return
		}
		r.Complete(false)
		fl.ctx, fl.cancel = context.WithCancel(ctx)
		n.track(fl)
		// The policy may have changed between decide and track; a flow
		// SetPolicy missed is checked once more here.
		if !fl.allowedBy(n.policy.Load()) {
			n.denied.add(fl.label(), fl.port, "tcp", whyChanged)
			ep.Close()
			n.untrack(fl)
			return
		}
		go n.serveFlow(fl, gonet.NewTCPConn(&wq, ep))
	})
	s.SetTransportProtocolHandler(tcp.ProtocolNumber, fwd.HandlePacket)

	dns, err := gonet.DialUDP(s, &tcpip.FullAddress{NIC: nicID, Addr: gw, Port: 53}, nil, ipv4.ProtocolNumber)
	if err != nil {
		return fmt.Errorf("the guest's DNS: %v", err)
	}
	go func() {
		buf := make([]byte, maxDNSQuery+1)
		for {
			k, from, err := dns.ReadFrom(buf)
			if err != nil {
				return
			}
			if out := n.answerDNS(ctx, buf[:k]); out != nil {
				_, _ = dns.WriteTo(out, from)
			}
		}
	}()
	<-ctx.Done()
	dns.Close()
	n.mu.Lock()
	var all []*flow
	for fl := range n.flows {
		all = append(all, fl)
	}
	n.mu.Unlock()
	for _, fl := range all {
		fl.close()
	}
	return nil
}

// filter drops, before the stack sees it, every packet that is not IPv4
// TCP or a UDP datagram to the gateway's DNS, and counts the ones a guest
// program sent on purpose (not its kernel's multicast chatter).
type filter struct {
	nested.Endpoint
	n *Net
}

func (f *filter) DeliverNetworkPacket(proto tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	if f.allow(pkt) {
		f.Endpoint.DeliverNetworkPacket(proto, pkt)
	}
}

func (f *filter) allow(pkt *stack.PacketBuffer) bool {
	v := pkt.ToView()
	defer v.Release()
	b := v.AsSlice()
	if len(b) < 1 {
		return false
	}
	switch b[0] >> 4 {
	case 4:
	case 6:
		if len(b) >= header.IPv6MinimumSize {
			h := header.IPv6(b)
			dst := h.DestinationAddress()
			if !dst.Unspecified() && !header.IsV6MulticastAddress(dst) && !header.IsV6LinkLocalUnicastAddress(dst) {
				a := netip.AddrFrom16(dst.As16())
				f.n.denied.add(a.String(), v6Port(h), "ipv6", whyProto)
			}
		}
		return false
	default:
		return false
	}
	if len(b) < header.IPv4MinimumSize {
		return false
	}
	h := header.IPv4(b)
	if !h.IsValid(len(b)) {
		return false
	}
	dst := netip.AddrFrom4(h.DestinationAddress().As4())
	if dst.IsMulticast() || dst == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || dst == lastAddr(guestNet) {
		return false
	}
	switch h.TransportProtocol() {
	case header.TCPProtocolNumber:
		return true
	case header.UDPProtocolNumber:
		payload := b[h.HeaderLength():]
		port := uint16(0)
		if len(payload) >= 4 {
			port = binary.BigEndian.Uint16(payload[2:4])
		}
		if dst == GatewayAddr && port == 53 && h.FragmentOffset() == 0 {
			return true
		}
		f.n.denied.add(dst.String(), port, "udp", whyProto)
	case header.ICMPv4ProtocolNumber:
		f.n.denied.add(dst.String(), 0, "icmp", whyProto)
	default:
		f.n.denied.add(dst.String(), 0, "other", whyProto)
	}
	return false
}

func v6Port(h header.IPv6) uint16 {
	p := h.Payload()
	if (h.TransportProtocol() == header.TCPProtocolNumber || h.TransportProtocol() == header.UDPProtocolNumber) && len(p) >= 4 {
		return binary.BigEndian.Uint16(p[2:4])
	}
	return 0
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Addr().As4()
	v := binary.BigEndian.Uint32(a[:]) | (1<<(32-p.Bits()) - 1)
	binary.BigEndian.PutUint32(a[:], v)
	return netip.AddrFrom4(a)
}
