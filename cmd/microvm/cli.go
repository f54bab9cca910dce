package main

// CLI is the whole command tree; the tests require every command
// api/cli.yaml marks ready, and no other, to be here.
type CLI struct {
	Globals

	Run       RunCmd       `cmd:"" help:"Build (or name) an image, launch a MicroVM, run one command in it, report the cost and tear everything down; --local does it all on this machine."`
	Build     BuildCmd     `cmd:"" help:"Build a MicroVM image and wait until it can launch; --reuse keys it to its inputs."`
	Suspend   SuspendCmd   `cmd:"" help:"Freeze a RUNNING MicroVM: memory, files, token and endpoint survive."`
	Resume    ResumeCmd    `cmd:"" help:"Thaw a SUSPENDED MicroVM and report its endpoint."`
	Terminate TerminateCmd `cmd:"" help:"Tear down a MicroVM and, with --delete-image, its image and build log group; anything left is named."`
	Logs      LogsCmd      `cmd:"" help:"Read an image's build log group through CloudWatch Logs (the emulator serves its own)."`
	Doctor    DoctorCmd    `cmd:"" help:"Check every prerequisite, one per line: region, credentials, infra values, managed bases, the daemon's architecture; with --local, guest isolation, limits and egress."`
	Emulator  EmulatorCmd  `cmd:"" help:"Serve the local emulator of the control plane in the foreground until Ctrl-C; each guest is an agentd confined in namespaces of its own (no root needed)."`
	Kill      KillCmd      `cmd:"" help:"Stop a running exec: SIGTERM to its process group, then SIGKILL; --signal sends one named signal instead."`

	// guest.go: the daemon's filesystem operations, exec listing and metrics.
	Stat    StatCmd    `cmd:"" help:"Describe a guest path: type, size, mode, owner, mtime, symlink target."`
	Dir     DirCmd     `cmd:"" help:"List a guest directory, --depth levels deep, page by page."`
	Mkdir   MkdirCmd   `cmd:"" help:"Create a guest directory and its parents; one already there is success."`
	Mv      MvCmd      `cmd:"" help:"Move a guest entry; an existing destination is refused unless --replace."`
	Rm      RmCmd      `cmd:"" help:"Remove a guest entry; a non-empty directory only with --recursive."`
	Ps      PsCmd      `cmd:"" help:"List every exec the daemon holds: phase, start time, pid, command."`
	Metrics MetricsCmd `cmd:"" help:"Sample the guest's CPU use, memory, disk and load average."`
	Watch   WatchCmd   `cmd:"" help:"Follow a guest directory's changes (create, write, remove, rename) for --count changes or --for a while."`

	// url.go, forward.go: a port inside the MicroVM, from outside.
	URL     URLCmd     `cmd:"" name:"url" help:"Print the endpoint URL and the headers that reach one guest port, with a token minted for that port alone."`
	Forward ForwardCmd `cmd:"" help:"Serve a guest port on a loopback port until Ctrl-C: HTTP and WebSocket, the proxy headers added, the token renewed before it expires."`
	// keepalive.go: the idle policy counts only inbound requests.
	// volume.go: named chains of checkpoint generations (run --volume).
	Volume    VolumeCmd    `cmd:"" help:"Volumes, named chains of checkpoints of one directory that run --volume attaches: ls, rm NAME, sync ID (save a generation of what a kept MicroVM holds)."`
	Keepalive KeepaliveCmd `cmd:"" help:"Hold a MicroVM awake until Ctrl-C (or --for): a GET /v1/health through its endpoint at a fraction of its idle window, for a detached command nothing else waits on."`
	Network   NetworkCmd   `cmd:"" help:"Show or replace a MicroVM's network policy (network show|set ID): what it allows, its secrets' bindings (never their values), every refusal; set closes open connections the new policy no longer allows. A local emulator's guests only."`
	Shell     ShellCmd     `cmd:"" help:"An interactive terminal in a MicroVM: the platform's shell endpoint when it has a SHELL_INGRESS connector, else a PTY through agentd. Resize and Ctrl-C pass through; exit or Ctrl-D ends it."`

	Exec   ExecCmd   `cmd:"" help:"Run one command in a running MicroVM: wait for it, --stream it, --detach it, or --poll an existing exec."`
	Health HealthCmd `cmd:"" help:"Ask a MicroVM's daemon whether it is up, busy, and how its identity repair and disk are."`
	Ack    AckCmd    `cmd:"" help:"Release a finished exec's buffered output; a second ack is a conflict."`
	Stdin  StdinCmd  `cmd:"" help:"Write to an exec's stdin (started with exec --stdin) and optionally close it."`
	Cp     CpCmd     `cmd:"" help:"Copy a file or a tar archive between here and a MicroVM; vm:/path names the guest side."`

	// setup.go: the account resources an AWS run needs, and gc of leftovers.
	Setup      SetupCmd      `cmd:"" help:"Make the artifact bucket and the build and execution roles an AWS run needs (tagged, idempotent), print the env lines and write them to the state directory; --destroy removes them."`
	Gc         GcCmd         `cmd:"" help:"List and delete this tool's leftovers (images, their versions, build log groups, artifacts), known by its tag or the run ledger; --dry-run only lists."`
	Checkpoint CheckpointCmd `cmd:"" help:"Save a running MicroVM's files as a checkpoint (checkpoint ID --path P), list them (checkpoint ls), remove one (checkpoint rm NAME|DIGEST) or bake one into a new image (checkpoint image NAME|DIGEST); run --from restores one."`

	Ls         LsCmd         `cmd:"" help:"List what is alive (state, age, cost so far) and the ledger's open runs; --all adds the closed ones."`
	Cost       CostCmd       `cmd:"" help:"Estimate what a run cost or a plan will cost, every line labelled."`
	Manifest   ManifestCmd   `cmd:"" help:"Emit the command surface, exit table and envelope schema, generated from the parser."`
	Constants  ConstantsCmd  `cmd:"" help:"Emit every service constant this client enforces."`
	Dockerfile DockerfileCmd `cmd:"" help:"Print the Dockerfile stanza that wraps a base image with agentd."`

	// The meta commands print text, never an envelope, and are left out of
	// the manifest (manifest:"-"), which describes the commands that answer
	// in JSON.
	Help       HelpCmd       `cmd:"" manifest:"-" help:"Show help for microvm or for one command: microvm help exec."`
	Version    VersionCmd    `cmd:"" manifest:"-" help:"Print the version."`
	Completion CompletionCmd `cmd:"" manifest:"-" help:"Print a shell completion script: eval \"$(microvm completion bash)\", or source it from your shell's startup file."`
	// engine.go: the line protocol of api/engine.yaml, which
	// the Python and TypeScript packages speak; frames, never an envelope.
	Engine EngineCmd `cmd:"" manifest:"-" hidden:"" help:"Serve one sandbox over the line protocol of api/engine.yaml on stdin/stdout, for the Python and TypeScript packages; ends, tearing down what it launched, when stdin ends."`
	// mcp.go: sandboxes as MCP tools (api/mcp.yaml); speaks MCP, never an envelope.
	Mcp McpCmd `cmd:"" manifest:"-" help:"Serve sandboxes as Model Context Protocol tools (api/mcp.yaml) over stdio, or streamable HTTP with --http; every sandbox a session created is terminated when it ends."`
}
