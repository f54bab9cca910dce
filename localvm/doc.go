// Package localvm runs a MicroVM's guest on this machine: a real agentd
// confined as the platform confines one, built from Linux namespaces. The
// name says what it is, a local VM: not a VM in the hardware sense (that is
// the Firecracker backend docs/local-backends.md plans) but the guest
// runtime a local control plane starts, suspends and ends.
//
// AgentdLauncher confines each guest in its own user, mount, PID, UTS, IPC,
// network and cgroup namespaces, under a seccomp filter after Docker's
// default profile and its size class's cgroup limits, as root or not
// (isolate_*_linux.go): the guest init and its second stage
// (localvm/guestinit), id mappings (isolate_idmap_linux.go,
// isolate_userns_linux.go), the socket broker the caller reaches guest
// ports through (isolate_broker_linux.go), limits
// (isolate_limits_linux.go) and egress through slirp4netns in the guest's
// own network namespace (isolate_egress_linux.go). RunStep runs one
// Dockerfile RUN as a guest of the same init, for package imagebuild.
// UnsafeUnisolatedAgentdLauncher is the old plain-process mode, by name only.
//
// The seam is Launcher, GuestSpec and Guest (guest.go): a caller asks for a
// guest and gets its ports, dialer, freeze/thaw and stop. A later backend
// (the Firecracker microVM of docs/local-backends.md) belongs beside this
// one, as localvm/firecracker implementing the same Launcher, so the
// emulator picks a backend and changes nothing else.
//
// A guest's init and its second stage are localvm/guestinit, which
// cmd/microvm-guest-init links alone: the launcher runs them from the
// sealed copy of the one beside its own configured agentd (never one beside
// an image's agentd) when it holds this build's guest ABI (about a
// millisecond to start against the emulator's tens), and otherwise
// re-executes its own binary, as it does for the isolation probe
// and a user-namespace holder; all are told apart by argv[0]. That dispatch is Init, which each binary calls first
// thing in main (and each test binary in TestMain), as runc's callers call
// libcontainer's Init; no init() of this package re-executes anything, and
// a launch in a process that never called Init panics rather than run the
// program's own main as a guest.
//
// It must never start a guest unconfined on a host that cannot confine
// it, but refuse with an *IsolationError; never give a guest host root;
// never share the host's network namespace with one; and never import the
// control plane (emulator), the library (client) or the daemon's code: it
// runs agentd as a process (internal/layering holds this).
package localvm
