package main

import (
	"strconv"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/microvms/microvms/gen/setupapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Globals parse on either side of the subcommand because kong lets a child
// command accept its ancestors' flags.
type Globals struct {
	JSON    bool             `name:"json" help:"Write exactly one JSON envelope on stdout instead of human output."`
	Dense   bool             `help:"Token-lean one-line output."`
	Quiet   bool             `help:"Silence progress on stderr; warnings still print."`
	Version kong.VersionFlag `help:"Print the version and exit."`
}

// RegionFlags names the AWS region of the control plane. The closed set of
// --region is the parser's: an off-table region fails before any handler
// runs, because the service's answer to one is indistinguishable from an IAM
// denial. AWS_REGION and AWS_DEFAULT_REGION are not the parser's: a shell
// exports them for every AWS tool, so they are read (and held to the same
// set) only when a control plane is called, and never conflict with
// --unlisted-region. Region is a pointer so that "not given" is nil: kong
// allows an enum without a default only there.
type RegionFlags struct {
	Region         *string `help:"AWS region; one of the regions measured to carry MicroVMs. Unset, a command that calls the control plane reads AWS_REGION, then AWS_DEFAULT_REGION, then uses ${default_region}." enum:"${regions}" xor:"region" placeholder:"REGION"`
	UnlistedRegion string  `help:"Use a region this client has not seen carry MicroVMs. Its refusals look like IAM denials (AccessDeniedException with a null message)." xor:"region" placeholder:"NAME"`
}

// AttachFlags address a VM this invocation did not launch. Each has an
// environment default so a shell session sets them once; a MicroVM this user
// kept (`run --keep`) needs only --microvm-id, the rest being remembered.
type AttachFlags struct {
	Endpoint   string `help:"The VM's endpoint as GetMicrovm returns it (a bare host: https:// is added, http:// for a loopback host such as the emulator's), or the daemon's URL with --direct. Needed: this or MICROVM_ENDPOINT, unless --microvm-id names a kept MicroVM." env:"MICROVM_ENDPOINT"`
	AgentToken string `help:"The agent token delivered to the VM at launch. Needed: this or MICROVM_AGENT_TOKEN, unless --microvm-id names a kept MicroVM." env:"MICROVM_AGENT_TOKEN"`
	MicrovmID  string `name:"microvm-id" help:"The MicroVM id, needed to mint the endpoint proxy token; not needed with --direct." env:"MICROVM_ID"`
	Port       int    `help:"The daemon's port inside the guest." default:"${default_port}" env:"MICROVM_PORT"`
	Direct     bool   `help:"Talk to a daemon reached directly (a local agentd, tests): no proxy token is minted." env:"MICROVM_DIRECT"`
	// The control plane mints the proxy token; tests and the emulator point
	// it elsewhere. The SDK rule applies too: AWS_ENDPOINT_URL_LAMBDA_MICROVMS, then AWS_ENDPOINT_URL.
	ControlEndpoint string `name:"control-endpoint" help:"Control-plane URL for minting the proxy token (the emulator, a proxy); unset, AWS_ENDPOINT_URL_LAMBDA_MICROVMS then AWS_ENDPOINT_URL apply. Not used with --direct." env:"MICROVM_CONTROL_ENDPOINT" placeholder:"URL"`
	StateDir        string `name:"state-dir" help:"Where the kept MicroVMs are remembered (kept/ under the run ledger's directory); defaults to $MICROVM_STATE_DIR or the user's state directory." env:"MICROVM_STATE_DIR" placeholder:"DIR" type:"path"`
	RegionFlags
}

// vars feeds every closed domain and default from the generated taxonomy,
// so the parser's sets are the taxonomy's and nothing is typed twice.
func vars(version string) kong.Vars {
	var mem []string
	for _, row := range taxonomy.SizeClasses {
		mem = append(mem, strconv.Itoa(row.BaselineMiB))
	}
	return kong.Vars{
		"version":        version,
		"regions":        strings.Join(taxonomy.Regions, ","),
		"default_region": taxonomy.Regions[0],
		"memory":         strings.Join(mem, ","),
		"default_memory": strconv.Itoa(taxonomy.DefaultBaselineMiB),
		"default_port":   strconv.Itoa(taxonomy.DefaultAgentPort),
		"default_from":   taxonomy.ManagedBaseDockerRef,
		"max_download":   strconv.Itoa(taxonomy.DefaultMaxDownloadBytes),
		"setup_prefix":   setupapi.DefaultPrefix,
	}
}

// flagFindings names the finding behind each closed domain, so the parser's
// refusal of an off-table value names the measurement as every local refusal
// must.
var flagFindings = map[string]taxonomy.FindingID{
	"--memory":          taxonomy.SizeClassFinding,
	"--region":          taxonomy.RegionFinding,
	"--unlisted-region": taxonomy.RegionFinding,
}
