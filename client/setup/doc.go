// Package setup makes, checks and cleans what a first run on AWS needs in
// an account: the artifact bucket and the build and execution roles
// declared in api/setup.yaml (gen/setupapi), and the leftovers a run can
// leave (images, their versions, build log groups, artifacts).
//
// Apply makes what is missing and repairs what differs, so a second Apply
// is a no-op; Destroy removes exactly what Apply made; Check says, per
// resource, what is wrong and how to fix it; FindLeftovers and Remove are
// `microvm gc`. Every call each makes is reported through Options.Log
// before it is sent; with DryRun no call that changes anything is sent.
//
// What it must never do: touch a bucket, role, image or log group that
// does not carry this tool's tag (gen/setupapi.TagKey) or that the run
// ledger does not name; delete an inline policy it did not write; or send a
// mutating call in a dry run.
package setup
