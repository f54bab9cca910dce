// Package control is the AWS Lambda MicroVMs control plane: the generated
// REST-JSON client (gen/controlplane) driven through a SigV4-signing,
// retrying transport, plus the typed closures, paginators and waiters that own
// every trap docs/PLATFORM.md measured on this API.
//
// What it is for: building images, launching, suspending, resuming and
// terminating MicroVMs, and minting endpoint tokens, with each refusal made
// locally and named after its finding, and each AWS failure classified into
// the client.Error taxonomy.
//
// What it must never do: send a request a finding says will fail (an
// unsupported region, a slash-form image ARN, an over-ceiling runHookPayload,
// a bare connector name, a caller-chosen clientToken, a token longer than 60
// minutes); retry past a 4xx other than throttling; call
// CreateMicrovmShellAuthToken or request SHELL_INGRESS; or treat an empty
// page as the end of a listing.
package control
