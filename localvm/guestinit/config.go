package guestinit

// hostSystemDirs are the host directories a guest without an image root
// sees, read-only under a copy-on-write overlay; a symlink among them (a
// merged /usr) is recreated as the same symlink.
var hostSystemDirs = []string{"usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"}

// etcAllowed are the host /etc entries a guest without an image root gets a
// copy of: what name resolution, the dynamic loader, TLS and a shell need.
// Everything else stays behind: shadow files, ssh host keys, sudoers, the
// host's machine-id and hostname, package-manager credentials, /etc/ssl/private.
var etcAllowed = []string{
	"passwd", "group", "hosts", "resolv.conf", "nsswitch.conf", "host.conf", "gai.conf",
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "os-release", "debian_version", "system-release",
	"localtime", "timezone", "alternatives", "ssl/certs", "ssl/openssl.cnf", "ca-certificates.conf",
	"pki/tls/certs", "pki/ca-trust", "profile", "bash.bashrc", "inputrc", "shells", "login.defs",
	"protocols", "services", "networks", "mime.types",
}

// Config is what the launcher tells the guest's init, as JSON on fd 3.
type Config struct {
	State         string   // the MicroVM's state directory: the writable layer is mounted over it
	WritableBytes int64    // the writable layer's size
	ImageRoot     string   // the image's root filesystem as the guest reaches it; "" means the host's system directories
	Env           []string // the daemon's whole environment
	Hostname      string   // the name before identity repair renames it
	Workdir       string   // the image's WORKDIR inside the guest root; "" is /
	Inherited     []int    // descriptors the init inherited from the emulator's parent, to close
	// Step, for a build step's guest, is the command the init runs instead
	// of agentd; its upper layer is on the writable layer, and the init
	// reports the step's status and holds the layer for the emulator
	// (stepEnded) instead of exiting.
	Step *StepCommand `json:",omitempty"`
	// Network, for a guest under a network policy, is what its init sets
	// up before the daemon starts (isolate_netpolicy_linux.go).
	Network *NetConfig `json:",omitempty"`
	// Filter is the syscall filter the second stage installs before it
	// executes the guest's program; the launcher assembles it.
	Filter []FilterInstruction
}

// StepCommand is one build step's process: its argv, environment, working
// directory and the image user it runs as.
type StepCommand struct {
	Argv     []string
	Env      []string
	Dir      string
	UID, GID uint32
	Groups   []uint32
}

// FDNet is the init's end of the socket pair the tun's descriptor leaves
// by; present only for a guest under a policy.
const FDNet = 7

// NetConfig is what the init needs to set a policy's network up.
type NetConfig struct {
	CAPEM []byte // the sandbox CA's certificate, for the guest's trust store
}

// CABundlePath is where a guest under a network policy finds its whole
// trust store (localvm.CABundlePath says what it holds).
const CABundlePath = "/etc/microvms/ca-bundle.pem"

// TunName is the guest's one link besides the loopback under a policy.
const TunName = "tun0"
