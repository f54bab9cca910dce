package main_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/microvms/microvms/emulator/embedded"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches, across separate processes against one `microvm emulator`: a
// checkpoint command that saves nothing or the wrong paths, a default of
// "/" answered with the library's option name instead of --path, ls that
// misses a checkpoint, a `run --from --count 2` whose forks do not see
// the files (or share one copy: each fork writes its own marker), a
// corrupted object laid instead of refused with exit 14 naming the
// finding, a baked image launched without the files, and rm that leaves
// the checkpoint listed.
func TestCheckpointAcrossProcesses(t *testing.T) {
	env, _ := lifecycleEnv(t)
	emu := startEmulator(t, env)
	env = append(env, "AWS_ENDPOINT_URL="+emu.url)
	run := func(args ...string) map[string]any {
		t.Helper()
		inv := cli(t, env, "", append([]string{"--json"}, args...)...)
		m := envelope(t, inv)
		if inv.code != 0 {
			t.Fatalf("microvm %v: exit %d\n%s\n%s", args, inv.code, inv.stdout, inv.stderr)
		}
		return data(m)
	}
	build := run("build", "--reuse", "--name", "ckpt")
	kept := run("run", "--keep", "--image", build["imageName"].(string))
	id := kept["microvmId"].(string)
	defer cli(t, env, "", "terminate", id)

	dir := "/workspace/proj" // under the WORKDIR, so the default checkpoint carries it too
	run("exec", "--microvm-id", id, fmt.Sprintf("mkdir -p %[1]s/src && printf 'one\\n' > %[1]s/src/a.txt && ln -s src/a.txt %[1]s/link && chmod 0750 %[1]s/src", dir))

	// Unnamed, a checkpoint saves the guest's working directory (the
	// built image's WORKDIR): catches a default of "/" or of nothing.
	def := run("checkpoint", id)
	if dm := def["checkpoint"].(map[string]any); fmt.Sprint(dm["paths"]) != "[/workspace]" || dm["name"] != "" {
		t.Fatalf("the default checkpoint: %v", def)
	}
	run("checkpoint", "rm", def["checkpoint"].(map[string]any)["digest"].(string))

	saved := run("checkpoint", id, "--path", dir, "--name", "base", "--label", "team=a")
	man := saved["checkpoint"].(map[string]any)
	if saved["action"] != "save" || man["name"] != "base" || man["writersPaused"] != true || fmt.Sprint(man["paths"]) != "["+dir+"]" || man["files"].(float64) < 4 {
		t.Fatalf("checkpoint: %v", saved)
	}
	ls := run("checkpoint", "ls")
	if cps := ls["checkpoints"].([]any); len(cps) != 1 || cps[0].(map[string]any)["digest"] != man["digest"] {
		t.Fatalf("ls: %v", ls)
	}

	// A fork of two: each sees the files, and writes a marker the other
	// must not see.
	inv := cli(t, env, "", "--json", "run", "--from", "base", "--count", "2", "--exec",
		fmt.Sprintf("cat %[1]s/link; stat -c %%a %[1]s/src; ls %[1]s; touch %[1]s/mine-$(hostname)", dir))
	fm := envelope(t, inv)
	if inv.code != 0 || fm["type"] != cliapi.TypeRunFleet {
		t.Fatalf("run --from: exit %d\n%s\n%s", inv.code, inv.stdout, inv.stderr)
	}
	runs := data(fm)["runs"].([]any)
	if len(runs) != 2 {
		t.Fatalf("%v", runs)
	}
	for _, r := range runs {
		out := r.(map[string]any)["stdout"].(string)
		if !strings.HasPrefix(out, "one\n750\n") || strings.Contains(out, "mine-") {
			t.Fatalf("a fork's view of the checkpoint: %q", out)
		}
	}
	if lk := data(fm)["leaked"].([]any); len(lk) != 0 {
		t.Fatalf("leaked: %v", lk)
	}

	// Baked into an image: the bake is an ADD of the checkpoint's files on
	// the source's artifact. This emulator has no base image for FROM, so
	// it performs no Dockerfile step: the bake is refused (row 12, naming
	// --base-image) and the image that would start without the files is
	// removed. That a bake on a base starts with them is
	// TestBakedImageLaunchesWithTheFiles (client/checkpoint).
	bm := wantFailure(t, cli(t, env, "", "--json", "checkpoint", "image", "base", "--name", "ckpt-baked"), taxonomy.KindPrecondition, taxonomy.FindingNoUserSnapshot)
	if msg, _ := bm["error"].(string); !strings.Contains(msg, "--base-image") {
		t.Fatalf("the refused bake does not say what it needs: %v", bm)
	}
	if inv := cli(t, env, "", "--json", "run", "--image", "ckpt-baked", "--exec", "true"); inv.code == 0 {
		t.Fatal("the image baked without its files was left to launch")
	}

	// Corrupt the stored object: run --from refuses it with row 14 before
	// anything is launched.
	digest := strings.TrimPrefix(man["digest"].(string), "sha256:")
	s3c := s3.New(s3.Options{Region: "us-east-1", BaseEndpoint: aws.String(emu.url), UsePathStyle: true, Credentials: embedded.Credentials()})
	if _, err := s3c.PutObject(context.Background(), &s3.PutObjectInput{Bucket: aws.String("microvm-checkpoints"),
		Key: aws.String("checkpoints/objects/sha256-" + digest + ".tar.zst"), Body: bytes.NewReader([]byte("not the checkpoint"))}); err != nil {
		t.Fatal(err)
	}
	m := wantFailure(t, cli(t, env, "", "--json", "run", "--from", "base", "--exec", "true"), taxonomy.KindCheckpointRefused, taxonomy.FindingNoUserSnapshot)
	if !strings.Contains(m["error"].(string), "base") && !strings.Contains(m["error"].(string), digest[:12]) {
		t.Fatalf("the refusal names neither the checkpoint nor its digest: %v", m["error"])
	}

	rm := run("checkpoint", "rm", "base")
	if rm["action"] != "rm" || len(rm["removed"].([]any)) != 2 {
		t.Fatalf("rm: %v", rm)
	}
	if ls := run("checkpoint", "ls"); len(ls["checkpoints"].([]any)) != 0 {
		t.Fatalf("ls after rm: %v", ls)
	}
}
