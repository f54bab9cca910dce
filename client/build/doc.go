// Package build turns a daemon binary and a Dockerfile into a MicroVM image:
// it writes the Dockerfile stanza that wraps the managed base with agentd,
// preflights a caller's own Dockerfile with moby/buildkit's parser, checks that
// the daemon is an aarch64 ELF, zips the two deterministically (a local
// build adds the files its COPY and ADD name from the Dockerfile's
// directory, its build context; an AWS artifact stays the two), names the image
// after a hash of the inputs so an identical build is reused, uploads the zip
// with the S3 transfer manager, and drives CreateMicrovmImage and its waiter
// through client/lambdamicrovms.
//
// What it must never do: spend a billable call on a build a measured finding
// says will fail (a FROM that disagrees with the base, no WORKDIR to inherit,
// an AGENTD_PORT the hooks will not be dialled on, an ENTRYPOINT that keeps the
// daemon from starting, a non-aarch64 binary); put a secret into the artifact,
// which becomes a snapshot every VM shares; or choose a clientToken itself —
// client/lambdamicrovms mints one per call from crypto/rand.
package build
