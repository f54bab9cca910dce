//go:build linux

package netpolicy

import (
	"context"
	"fmt"
	"os"

	"github.com/microvms/microvms/internal/netpolicy/guestlink"
	"gvisor.dev/gvisor/pkg/tcpip/link/fdbased"
)

// Serve serves the guest's network on tun, the host side's descriptor of
// the guest's tun device (IFF_TUN|IFF_NO_PI), until ctx ends. The caller
// keeps tun open while Serve runs and closes it afterwards.
func (n *Net) Serve(ctx context.Context, tun *os.File) error {
	ep, err := fdbased.New(&fdbased.Options{FDs: []int{int(tun.Fd())}, MTU: n.cfg.MTU})
	if err != nil {
		return fmt.Errorf("serving the guest's tun: %v", err)
	}
	return n.ServeLink(ctx, ep)
}

// OpenTun, AttachTun and ConfigureGuestLink are the guest's side of the
// link, kept in internal/netpolicy/guestlink so a guest's init links no
// network stack.
var (
	OpenTun            = guestlink.OpenTun
	AttachTun          = guestlink.AttachTun
	ConfigureGuestLink = guestlink.ConfigureGuestLink
)
