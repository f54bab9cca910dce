package netpolicy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// maxDNSQuery is the largest query read: a UDP DNS message without EDNS is
// at most 512 bytes, and a guest that sends more gets no answer.
const maxDNSQuery = 512

// dnsTTL is the TTL of every answer, short so a policy change is not
// outlived by a cache in the guest for long (the flow check does not depend
// on it: a synthetic address is checked against the policy in force).
const dnsTTL = 30

// answerDNS builds the reply to one query, or nil for bytes that are not a
// query worth answering. It never returns an error to the guest's bytes
// beyond a DNS rcode.
func (n *Net) answerDNS(ctx context.Context, q []byte) []byte {
	if len(q) > maxDNSQuery {
		return nil
	}
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil || h.Response {
		return nil
	}
	qs, err := p.AllQuestions()
	if err != nil {
		return nil
	}
	reply := func(rc dnsmessage.RCode, answers ...dnsmessage.Resource) []byte {
		m := dnsmessage.Message{
			Header: dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode,
				RecursionDesired: h.RecursionDesired, RecursionAvailable: true, RCode: rc},
			Questions: qs,
			Answers:   answers,
		}
		b, err := m.Pack()
		if err != nil {
			return nil
		}
		return b
	}
	if h.OpCode != 0 || len(qs) != 1 {
		return reply(dnsmessage.RCodeRefused)
	}
	q0 := qs[0]
	name := strings.ToLower(strings.TrimSuffix(q0.Name.String(), "."))
	if q0.Class != dnsmessage.ClassINET {
		n.denied.add(name, 0, "dns", whyQuery)
		return reply(dnsmessage.RCodeRefused)
	}
	pol := n.policy.Load()
	switch q0.Type {
	case dnsmessage.TypeA, dnsmessage.TypeAAAA:
	default:
		// TXT, MX, ANY, ...: nothing a guest needs for a TCP connection, and
		// the way data is carried out in lookups.
		n.denied.add(name, 0, "dns", whyQuery)
		return reply(dnsmessage.RCodeRefused)
	}
	if !validName(name) || !pol.nameAllowed(name) {
		n.denied.add(name, 0, "dns", whyHost)
		return reply(dnsmessage.RCodeNameError)
	}
	if q0.Type == dnsmessage.TypeAAAA {
		// An allowed name has no IPv6 here: NOERROR with no answer, so a
		// resolver asking for both goes on with the A answer.
		return reply(dnsmessage.RCodeSuccess)
	}
	// The name must exist upstream; the guest still gets the synthetic
	// address, the one that stands for this name alone.
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := n.resolver.LookupNetIP(lctx, "ip4", name)
	if err != nil || len(addrs) == 0 {
		var de *net.DNSError
		if errors.As(err, &de) && de.IsNotFound || err == nil {
			return reply(dnsmessage.RCodeNameError)
		}
		return reply(dnsmessage.RCodeServerFailure)
	}
	a, ok := n.synth.addrFor(name)
	if !ok {
		return reply(dnsmessage.RCodeServerFailure)
	}
	return reply(dnsmessage.RCodeSuccess, dnsmessage.Resource{
		Header: dnsmessage.ResourceHeader{Name: q0.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: dnsTTL},
		Body:   &dnsmessage.AResource{A: a.As4()},
	})
}

// synthetic hands out one address of SyntheticNet per name, for good.
type synthetic struct {
	mu     sync.Mutex
	byName map[string]netip.Addr
	byAddr map[netip.Addr]string
	next   netip.Addr
}

func newSynthetic() *synthetic {
	return &synthetic{byName: map[string]netip.Addr{}, byAddr: map[netip.Addr]string{},
		next: SyntheticNet.Addr().Next()}
}

func (s *synthetic) addrFor(name string) (netip.Addr, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if a, ok := s.byName[name]; ok {
		return a, true
	}
	if !SyntheticNet.Contains(s.next) {
		return netip.Addr{}, false // the range is spent: 131070 names
	}
	a := s.next
	s.next = a.Next()
	s.byName[name], s.byAddr[a] = a, name
	return a, true
}

func (s *synthetic) nameOf(a netip.Addr) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.byAddr[a]
	return n, ok
}
