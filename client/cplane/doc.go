// Package cplane is what client/sandbox, client/build, cmd/microvm and the
// embedded emulator share over the generated control-plane SDK
// (client/lambdamicrovms): a client configured from the environment the way
// this project's CLI configures it (New), its errors classified into the
// client.Error taxonomy (SDKError), waits that report their polls
// (WaitOptions, Progress), and the launch vocabulary the SDK's wire types do
// not carry: image references, the run-hook payload, the idle policy and
// network intents, and the URL of a VM's bare-host endpoint.
//
// What it must never do: send a request itself (every call goes through
// client/lambdamicrovms, which mints clientTokens from crypto/rand and
// refuses the measured traps); accept a slash-form image ARN or an
// over-ceiling runHookPayload; or print the payload's agent token.
package cplane
