package build

import (
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Base is a base image as two names that must agree — the managed image the
// create call's baseImageArn selects and the docker reference a Dockerfile's
// FROM names — plus the WORKDIR it declares. They travel together so that
// selecting one selects the other.
type Base struct {
	// Image is the managed base image id, e.g. "al2023-1".
	Image string
	// DockerRef is the FROM that pairs with Image.
	DockerRef string
	// Workdir is the base's own WorkingDir; "" when it declares none, which
	// is what the managed base and most public ARM64 bases do.
	Workdir string
}

// ManagedBase is the managed al2023 base, paired with the registry reference
// the platform measurements were built from. It declares no WORKDIR.
func ManagedBase() Base {
	return Base{Image: taxonomy.ManagedBaseImage, DockerRef: taxonomy.ManagedBaseDockerRef}
}

// DaemonPath is where the stanza puts agentd, and the CMD that runs it.
const DaemonPath = "/agentd"

// DockerfileOptions shape the generated stanza.
type DockerfileOptions struct {
	// Base defaults to ManagedBase.
	Base Base
	// Port is the agent port; zero means taxonomy.DefaultAgentPort. It must be
	// the port the create call sends as hooks.port.
	Port int
	// Workdir is created and set when non-empty. With a base that declares
	// none, leaving it empty makes every relative path resolve against "/".
	Workdir string
}

// Dockerfile is the stanza that wraps a base image with agentd. A caller adds
// layers between the chmod and the ENV lines; the FROM, the port and the
// ENTRYPOINT/CMD pair must survive those edits, and Preflight checks that they
// did.
func Dockerfile(o DockerfileOptions) (string, error) {
	if o.Base == (Base{}) {
		o.Base = ManagedBase()
	}
	if o.Port == 0 {
		o.Port = taxonomy.DefaultAgentPort
	}
	if o.Port < 1 || o.Port > 65535 {
		return "", client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingAgentPortAgreement, "agent port %d is not a TCP port", o.Port)
	}
	if o.Workdir != "" && (!path.IsAbs(o.Workdir) || strings.ContainsAny(o.Workdir, " \t\r\n\"'$\\")) {
		// Refused rather than quoted: a WORKDIR the generated RUN would have to
		// shell-quote is one a caller's own layers will mis-quote too.
		return "", client.Errorf(taxonomy.KindInvalidArg, taxonomy.FindingBaseImagesLackWorkdir, "workdir %q must be an absolute path without spaces, quotes, '$' or '\\'", o.Workdir)
	}
	var b strings.Builder
	// The FROM comes from Base so it cannot disagree with baseImageArn.
	fmt.Fprintf(&b, "FROM %s\n", o.Base.DockerRef)
	fmt.Fprintf(&b, "COPY agentd %s\n", DaemonPath)
	fmt.Fprintf(&b, "RUN chmod 0755 %s\n", DaemonPath)
	if o.Workdir != "" {
		fmt.Fprintf(&b, "RUN mkdir -p %s\n", o.Workdir)
		fmt.Fprintf(&b, "WORKDIR %s\n", o.Workdir)
	}
	port := strconv.Itoa(o.Port)
	b.WriteString("ENV AGENTD_PORT=" + port + "\n")
	b.WriteString("ENV AGENTD_LOG=info\n")
	// The image's word that it is a MicroVM guest: agentd repairs the
	// machine identity only when told so, because nothing it can observe
	// tells a guest from a developer's machine.
	fmt.Fprintf(&b, "ENV %s=1\n", protocol.EnvRepairIdentity)
	b.WriteString("EXPOSE " + port + "\n")
	// An empty ENTRYPOINT makes the CMD the process itself, so agentd starts
	// before any workload can, and its cwd is the WORKDIR an exec without a
	// cwd inherits.
	b.WriteString("ENTRYPOINT []\n")
	fmt.Fprintf(&b, "CMD [%q]\n", DaemonPath)
	return b.String(), nil
}
