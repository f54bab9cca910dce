// Package emulator is an in-memory AWS Lambda MicroVMs control plane speaking
// the service's REST-JSON wire format, built on the server interface generated
// from api/lambda-microvms.yaml. It keeps real state (images with versions and
// per-chipset builds, MicroVMs with their lifecycle, tags, clientTokens ever
// seen) and replays the platform's measured traps on demand: the clientToken
// replay wedge, a launch that dies before RUNNING, the null-message 403 of an
// unsupported region, the slash-form image ARN's misleading 403, filtering
// after paging, the 400 for an unencoded '=' in a cursor, throttling and a
// gateway's 5xx HTML page.
//
// With Options.VMs set (a localvm.Launcher; AgentdLauncher runs a real
// agentd), a MicroVM is also
// a guest: RunMicrovm starts it and posts the wrapped runHookPayload to its
// run hook before the MicroVM can report RUNNING (a non-200 answer kills the
// launch with the platform's stateReason); its endpoint is a bare
// 127.0.0.1:PORT host served as plain HTTP by a proxy that demands an
// unexpired X-aws-proxy-auth token minted for that MicroVM and an
// X-aws-proxy-port inside the token's scope (403 otherwise, 502 for a scoped
// port with nothing listening), or the same two as a WebSocket's offered
// subprotocols, and strips both forms before forwarding, so any port the
// guest listens on is reachable with a token scoped to it and no other.
// Suspend freezes the guest's processes (SIGSTOP), resume continues them,
// terminate kills them and deletes the guest's writes; Close stops every
// guest.
//
// Every control-plane request is validated against its operation's input
// in the spec gen/controlplane embeds (wire.go): each enum, length,
// pattern and range of every path, query and body member, and each union's
// one key, so no handler can forget one. Every answer is held to the
// errors its operation lists; one it does not list becomes that
// operation's listed 500 naming the slip. Model defaults apply: an image
// that says nothing of microvmHooks.run gets no run hook (DISABLED).
// SuspendMicrovm and ResumeMicrovm are idempotent, as the model marks
// them: repeating one on a MicroVM already in (or moving to) that state
// answers 200 and changes nothing.
//
// By default state advances when it is observed (each read of a resource is
// one step), never by the wall clock, so a test driving it is deterministic.
// With Options.WallClock it moves with time instead, for people: a launch
// is RUNNING as soon as its run hook answered, a build finishes at its first
// observation. In both modes a SUSPENDED MicroVM whose idlePolicy window has
// passed by Options.Now is terminated, as the platform terminates it.
//
// One listener is one local AWS endpoint, as LocalStack's is: requests are
// told apart by the service their SigV4 credential scope names, and each
// service answers in its own wire protocol and error shape. "lambda" is
// the control plane (restJson1); "s3" is the slice of S3 the build path
// uses (buckets, objects, multipart uploads; restXml, s3.go) and the bucket
// settings `microvm setup` makes (s3_config.go); "logs" is CloudWatch Logs'
// reads of a build log (DescribeLogGroups, DescribeLogStreams,
// GetLogEvents, FilterLogEvents) and DeleteLogGroup (awsJson1.1, logs.go);
// "sts" is GetCallerIdentity (awsQuery, sts.go); "iam" is the roles, inline
// policies and policy simulation of `setup` and `doctor` (awsQuery,
// iam.go). An operation outside a slice is refused in that service's words
// (S3's 501 NotImplemented, CloudWatch Logs' UnknownOperationException,
// STS's and IAM's InvalidAction), never answered as if served.
//
// A build whose codeArtifact.uri is a file:// URL (the local artifact store
// client/build.DirUploader writes), or an s3:// URL naming a bucket of the
// emulator's own S3 slice, is unpacked into Options.StateDir: that image's
// guests run the agentd the artifact carries. With a base image for its
// FROM (Options.BaseImage, or Options.PullBase and a reachable registry)
// the Dockerfile is run step by step (package imagebuild, through
// Options.Build: RUN in a build guest confined as a MicroVM is, COPY/ADD
// from the artifact, each step's result a content-addressed snapshot under
// Options.BuildCache) and the guests run
// on the root it made; without one they run on the host's system
// directories with the Dockerfile's ENV and WORKDIR, and UnperformedSteps
// names the steps not carried out. A missing object fails the build, as on the platform; an
// s3:// bucket the emulator does not hold leaves the guests on the
// launcher's own agentd. The build's log lines go to the CloudWatch Logs
// slice, so aws-sdk-go-v2's client reads them. The embedded sub-package
// runs all of this in-process with one call.
//
// The guests themselves are package localvm's (the guest runtime: its
// namespaces, seccomp filter, cgroup limits, egress) and the Dockerfile
// executor is package imagebuild's; this package drives them through the
// Launcher seam and Options.Build, and forwards the names its callers use
// (runtime.go). It never re-executes its binary itself: a program that
// launches local guests calls localvm.Init first thing in main.
//
// It must never listen on anything but the address its caller gives it (tests
// use loopback) and, with a VM backend, fresh 127.0.0.1 ports for the
// MicroVM endpoints; never call AWS; and never invent wire fields: every
// control-plane body it reads or writes is a type from gen/controlplane,
// and every S3, CloudWatch Logs, STS and IAM body carries only members of
// that service's model.
package emulator
