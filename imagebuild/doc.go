// Package imagebuild runs a local image build: it unpacks a code artifact
// (artifact.go: the Dockerfile and the agentd it carries, the build
// context) and executes its Dockerfile step by step over a base image
// (dockerbuild*.go): RUN in a build-step guest of the local runtime
// (localvm.RunStep, confined as a MicroVM is), COPY and ADD from the
// artifact, each step's result a content-addressed snapshot in a cache,
// the base image read from an OCI layout, a `docker save` tarball or its
// registry and verified blob by blob (oci*.go).
//
// The emulator calls it through one seam (emulator.Options.Build, by
// default BuildDockerfile) and the artifact helpers; it imports the
// runtime but never the emulator, the library or the daemon's code
// (internal/layering holds this). It must never run a step on the host,
// or extract a layer through a path the layer planted (os.Root).
package imagebuild
