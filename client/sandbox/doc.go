// Package sandbox is one MicroVM used as a sandbox: launched from an image
// with a locally minted agent token (or reattached to by id and token), talked
// to through a session, suspended, resumed and torn down, while holding the
// specification's state model (lifecycle, token_installed, image_exists,
// was_terminated, bootstrap_count) and refusing every transition the model
// refuses before any call is sent.
//
// # A sandbox in a few lines
//
// On this machine, with the local emulator (package emulator/embedded, the
// same code `microvm run --local` runs; it needs root for the guests'
// namespaces and finds agentd as the CLI does):
//
//	emu, err := embedded.Start(ctx, embedded.Options{})
//	defer emu.Close()
//	sb, err := emu.Launch(ctx, sandbox.Options{})
//	defer sb.Terminate(ctx, sandbox.TeardownOptions{})
//	res, err := sb.Run(ctx, []string{"echo", "hi"}, client.RunOptions{})
//	fmt.Print(res.Stdout, res.ExitStatus)
//
// Against AWS, the same Sandbox comes from Launch with a lambdamicrovms.Client
// (cplane.New configures one from the environment) and
// an image ARN (client/build builds one). Run, the file helpers (ReadFile,
// WriteFile, UploadDir, DownloadDir), Suspend, Resume, Terminate and Cost
// are the same calls in both places.
//
// # A port inside the MicroVM
//
// Sandbox.URL (MintURL, by id) is how to reach a server the guest runs: the
// endpoint URL, the headers that name the port and carry a token minted for
// that port alone, the expiry, and the same credentials as WebSocket
// subprotocols for a browser. A Forwarder (NewForwarder, served by Forward on
// a listener the caller chose) puts the port on a local one, adding the
// headers and renewing the token, for clients that cannot add headers.
//
// # Keeping a busy sandbox awake
//
// The platform suspends a VM after its idle policy's maxIdleDurationSeconds
// without an inbound endpoint request, however busy the guest (finding
// idle-policy). A launched or attached sandbox with an idle policy sends
// GET /v1/health through the endpoint every quarter of that window while a
// Run, an exec stream or a file transfer of its session is in flight, and
// nothing otherwise (Options.NoKeepAwake turns it off, KeepAwakeEvery sets
// the interval). KeepAwake (HoldAwake, by session) holds a VM awake for work
// nobody waits on, such as a detached command. MaxIdle and Deadline say
// when the platform's clocks apply; Options.Warn hears of a Run timeout
// past the Deadline.
//
// A stream open when the sandbox is suspended (by Suspend, by another
// process, or by the idle policy) is not dropped: its session reads the
// VM's state through GetMicrovm when a reattach fails, waits while the VM
// is suspended, reattaches at its cursor once it runs again, and agentd
// holds the bytes it had not sent, so nothing is lost or repeated, over SSE
// or binary frames. A VM terminated meanwhile ends the stream as Platform.
//
// # A terminal in the MicroVM
//
// Sandbox.Shell (OpenShell, by id) is an interactive terminal: the
// platform's shell endpoint for a MicroVM launched with a SHELL_INGRESS
// connector (a WebSocket authorized by CreateMicrovmShellAuthToken), else the
// guest's shell on a PTY through agentd. Read, Write, Resize and Close work
// the same on both; Via says which it is. This package never asks for
// SHELL_INGRESS at launch.
//
// # Many sandboxes
//
// RunMany launches a fleet (FleetOptions.Count sandboxes, at most Parallel
// alive at once), runs a Task in each (Command, or any function), and
// returns every sandbox's Outcome with its teardown; one Cost report prices
// the fleet. A Pool keeps Size sandboxes launched and suspended, so Acquire
// is a resume instead of a launch (BenchmarkPoolAcquire measures both);
// Release terminates, never recycles, and Close returns one report for the
// pool's life. Both take a Launcher (LaunchOn(client), or emu.Launch), refuse
// bounds outside api/errors.yaml's MaxFleetCount, MaxPoolSize and
// MaxFleetParallel before launching anything, and launch again after a
// throttled RunMicrovm with the SDK retryer's backoff.
//
// # Coming from E2B or the reference library
//
// E2B's SDK and the reference implementation's Rust library
// (docs/reference/public-api.md there) name the same steps differently:
//
//	E2B                      reference (microvms-core)       here
//	Sandbox.create()         Sandbox::run(RunRequest)        Launch(ctx, cp, Options) · embedded: emu.Launch
//	Sandbox.connect(id)      RunRequest.agent_token          Open(cp, id).Attach(ctx, token, Options) · Options.AgentToken
//	sandbox.commands.run()   Session::run + ExecHandle       Sandbox.Run (waits) · Session().Start / Spawn (does not)
//	  on_stdout callback       ExecHandle stream               RunOptions.Stdout / Stderr (io.Writer, live)
//	  —                        StartRequest.timeout_sec        StartOptions.DaemonTimeout (agentd kills the child)
//	  —                        —                               RunOptions.ClientTimeout (stop waiting, child lives)
//	  result.exit_code         ExecResult.outcome              Result.ExitStatus (int) · ExitCode / Signal (pointers)
//	sandbox.files.write()    Session fs routes               Sandbox.WriteFile (bytes) · UploadDir (tree, tar)
//	sandbox.files.read()     Session fs routes               Sandbox.ReadFile (bytes) · DownloadDir · Session().OpenFile (stream)
//	sandbox.kill()           Sandbox::terminate              Sandbox.Terminate → TeardownReport (never an error)
//	sandbox.getHost(port)    Session::connect_headers(port)  Sandbox.URL(ctx, port, URLOptions) → PortURL (a token for that port alone)
//	sandbox.pause()/resume   —                               Sandbox.Suspend / Resume
//	—                        Sandbox::build_image            build.Build (client/build)
//	—                        Lifecycle                       Lifecycle (Sandbox.Lifecycle)
//	—                        TeardownOpts / TeardownReport   TeardownOptions / TeardownReport
//	—                        cost::run_report                Sandbox.Cost(ctx, cost.Pinned(region)) · Sandbox.Usage
//	—                        ControlPlane                    lambdamicrovms.Client (cplane.New; emulator: emu.Client)
//
// A MicroVM another process launched is reached by its id: Open(cp, id)
// is a Handle for the lifecycle (Status, Suspend, Resume, Terminate, Await,
// Cost; List pages every MicroVM), each call refusing unsent what the state
// model refuses. Unlike E2B, the id alone does not run commands: the agent
// token is the credential the VM's agentd checks, so keep it
// (Sandbox.AgentToken) next to the id, as a secret, and Handle.Attach with
// it (the CLI remembers it for `run --keep`, in client/kept).
//
// # Errors
//
// Every error is a *client.Error; its Kind decides the CLI exit code and its
// message says what to do. A missing file is errors.Is(err, fs.ErrNotExist)
// and quotes the path; a wrong agent token is ERR_CREDENTIALS naming the
// token; a command that cannot be started quotes the command.
//
// What it must never do: log, print or persist the agent token; deliver a
// runHookPayload more than once per VM (a resume re-delivers nothing); send a
// suspend to anything but a RUNNING VM or a resume to anything but a SUSPENDED
// one; bring a terminated VM back; or fail a teardown — Terminate reports what
// it could not delete by identifier instead of returning an error, because a
// leak nobody can name cannot be cleaned up.
package sandbox
