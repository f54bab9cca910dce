// Package iam is the local emulator's IAM slice, a service of its own as
// LocalStack's are: the roles and inline policies `microvm setup` makes,
// `doctor` checks and `setup --destroy` removes, in IAM's awsQuery protocol,
// with its own store and lock. The emulator (package emulator) routes
// requests signed for "iam" to Service.Serve after checking their
// signature.
//
// It must never reach into the rest of the emulator (the control plane,
// S3, Logs, the guests): it is handed the account, the clock, the request
// ids and the fault hook it needs, and imports only the standard library.
package iam
