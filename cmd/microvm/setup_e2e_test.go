package main_test

import (
	"context"
	"net/http"
	neturl "net/url"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/iam"

	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/setupapi"
	"github.com/microvms/microvms/gen/taxonomy"
)

// The first AWS run in one command, against the real emulator over the
// services' own wire protocols (IAM's awsQuery, S3's restXml, CloudWatch
// Logs' awsJson1.1): setup, doctor, a build and a run with what setup
// printed, gc, setup --destroy, doctor again.
//
// Catches: a dry run that sends a mutating call or makes anything; a setup
// that is not idempotent (a second run that changes something); env lines
// that do not lead a build to the bucket and role setup made; a doctor that
// passes a missing or denied piece or fails a present one; an ls --all
// that does not show what gc would delete; a gc that misses
// the image or log group left on purpose, lists anything else (or anything
// younger than --older-than), or leaves
// them after deleting; a destroy that leaves a role or the bucket.
func TestSetupDoctorGcDestroy(t *testing.T) {
	emu, url := testEmulator(t, emulator.Options{})
	env, stateDir := lifecycleEnv(t)
	env = append(env, "AWS_ENDPOINT_URL="+url, "AWS_REGION=us-east-1")
	call := func(env []string, args ...string) (map[string]any, invocation) {
		t.Helper()
		inv := cli(t, env, "", append([]string{"--json"}, args...)...)
		return envelope(t, inv), inv
	}
	ok := func(env []string, args ...string) map[string]any {
		t.Helper()
		m, inv := call(env, args...)
		if inv.code != 0 {
			t.Fatalf("microvm %v: exit %d\n%s\n%s", args, inv.code, inv.stdout, inv.stderr)
		}
		return data(m)
	}
	mutatingSent := func(since int) []string {
		var out []string
		for _, r := range emu.Requests()[since:] {
			body := string(r.Body)
			switch {
			case r.Service == "iam" && !strings.Contains(body, "Action=Get") && !strings.Contains(body, "Action=List") && !strings.Contains(body, "Action=Simulate"):
				out = append(out, "iam "+body)
			case r.Service == "s3" && r.Method != "GET" && r.Method != "HEAD":
				out = append(out, "s3 "+r.Method+" "+r.Path+"?"+r.RawQuery)
			}
		}
		return out
	}

	// --dry-run: every call printed, none that changes anything sent.
	before := len(emu.Requests())
	dry := ok(env, "setup", "--dry-run")
	if sent := mutatingSent(before); len(sent) > 0 {
		t.Fatalf("setup --dry-run sent mutating calls: %v", sent)
	}
	if dry["changed"].(float64) == 0 || dry["envFile"] != nil {
		t.Fatalf("a dry run against an empty account plans changes and writes no file: %v", dry)
	}
	var planned []string
	for _, c := range dry["calls"].([]any) {
		c := c.(map[string]any)
		if c["mutating"] == true {
			if c["sent"] != false {
				t.Fatalf("dry run marked a mutating call sent: %v", c)
			}
			planned = append(planned, c["op"].(string))
		}
	}
	for _, want := range []string{"CreateBucket", "PutBucketTagging", "PutBucketEncryption", "PutPublicAccessBlock", "PutBucketLifecycleConfiguration", "CreateRole", "PutRolePolicy"} {
		if !slices.Contains(planned, want) {
			t.Fatalf("the dry run does not print %s: %v", want, planned)
		}
	}
	if exists, _ := emu.Role("microvm-build"); exists {
		t.Fatal("the dry run made a role")
	}

	// setup, then setup again: the second is a no-op.
	made := ok(env, "setup")
	if made["changed"].(float64) == 0 || made["envFile"] == nil {
		t.Fatalf("%v", made)
	}
	setupEnv := []string{}
	for _, e := range made["env"].([]any) {
		setupEnv = append(setupEnv, e.(string))
	}
	if exists, policies := emu.Role("microvm-build"); !exists || !slices.Equal(policies, []string{"microvm-build"}) {
		t.Fatalf("the build role: %v %v", exists, policies)
	}
	before = len(emu.Requests())
	again := ok(env, "setup")
	if again["changed"].(float64) != 0 || len(mutatingSent(before)) > 0 {
		t.Fatalf("a second setup changed something: %v %v", again["changed"], mutatingSent(before))
	}

	// doctor with what setup printed: every account check passes.
	withSetup := append(slices.Clone(env), setupEnv...)
	doc, inv := call(withSetup, "doctor")
	checks := map[string]map[string]any{}
	for _, c := range data(doc)["checks"].([]any) {
		c := c.(map[string]any)
		checks[c["name"].(string)] = c
	}
	account := []string{"bucket-exists", "bucket-encryption", "bucket-public-access-block", "bucket-lifecycle",
		"build-role-exists", "build-role-trust", "build-role-permissions",
		"execution-role-exists", "execution-role-trust", "execution-role-permissions"}
	for _, name := range account {
		if c := checks[name]; c == nil || c["ok"] != true {
			t.Fatalf("doctor check %s: %v\n%s", name, c, inv.stderr)
		}
	}
	if inv.code != 0 || data(doc)["ok"] != true {
		t.Fatalf("doctor after setup is not all ok: exit %d\n%s", inv.code, inv.stdout)
	}

	// Without the lines in the environment, doctor reads them from the
	// state directory's setup.env.
	fromFile := ok(env, "doctor")
	found := false
	for _, c := range fromFile["checks"].([]any) {
		c := c.(map[string]any)
		found = found || (c["name"] == "build-role-permissions" && c["ok"] == true)
	}
	if file, err := os.ReadFile(made["envFile"].(string)); err != nil || !strings.Contains(string(file), "#endpoint="+url+"\n") {
		t.Fatalf("setup.env does not name the endpoint it applies to: %q %v", file, err)
	}
	if !found || !strings.HasPrefix(made["envFile"].(string), stateDir) {
		t.Fatalf("doctor did not read setup.env (%v): %v", made["envFile"], fromFile["checks"])
	}

	// A build and a run with what setup printed: the artifact goes to the
	// bucket setup made, the image is built as the role setup made.
	built := ok(withSetup, "build", "--name", "left-on-purpose")
	name := built["imageName"].(string)
	arn := built["imageIdentifier"].(string)
	if keys := emu.BucketKeys(strings.TrimPrefix(setupEnv[0], "MICROVM_BUCKET=")); len(keys) == 0 {
		t.Fatalf("the build uploaded nothing to the setup bucket")
	}
	ran := cli(t, withSetup, "", "run", "--image", name, "--exec", "echo ran")
	if ran.code != 0 || ran.stdout != "ran\n" {
		t.Fatalf("run: exit %d %q\n%s", ran.code, ran.stdout, ran.stderr)
	}

	// A checkpoint in setup's bucket: ls lists it, and gc names it a
	// checkpoint, not an artifact (issue 47). Catches a checkpoint that
	// bills unseen, or one gc deletes as a build artifact.
	keptRun := ok(withSetup, "run", "--keep", "--image", name)
	ok(withSetup, "checkpoint", keptRun["microvmId"].(string), "--path", "/workspace", "--name", "g")
	ok(withSetup, "terminate", keptRun["microvmId"].(string), "--wait")
	if cps, _ := ok(withSetup, "ls")["checkpoints"].([]any); len(cps) != 1 || cps[0].(map[string]any)["name"] != "g" {
		t.Fatalf("ls does not list the checkpoint: %v", cps)
	}

	// gc --dry-run lists exactly what was left on purpose: the image, its
	// version, its build log group, the artifact in setup's bucket, the
	// checkpoint's manifest and object.
	kinds := func(d map[string]any, key string) []string {
		var out []string
		for _, l := range d[key].([]any) {
			l := l.(map[string]any)
			id := l["id"].(string)
			if l["kind"] == "artifact" {
				id = "s3://…"
			}
			if l["kind"] == "checkpoint" {
				id = "s3://…/" + path.Base(path.Dir(id))
			}
			out = append(out, l["kind"].(string)+" "+id)
		}
		sort.Strings(out)
		return out
	}
	want := []string{"artifact s3://…", "checkpoint s3://…/manifests", "checkpoint s3://…/objects", "image " + arn, "image-version " + arn + "@1.0", "log-group " + taxonomy.BuildLogGroupPrefix + name}
	before = len(emu.Requests())
	listed := ok(withSetup, "gc", "--dry-run")
	if got := kinds(listed, "leftovers"); !slices.Equal(got, want) || len(kinds(listed, "removed")) != 0 {
		t.Fatalf("gc --dry-run listed %v, want %v", got, want)
	}
	for _, r := range emu.Requests()[before:] {
		if r.Method == "DELETE" || strings.Contains(r.Path, "delete") || strings.Contains(string(r.Body), "DeleteLogGroup") {
			t.Fatalf("gc --dry-run deleted: %s %s", r.Method, r.Path)
		}
	}
	if young := ok(withSetup, "gc", "--dry-run", "--older-than", "1000h"); len(kinds(young, "leftovers")) != 0 {
		t.Fatalf("gc --older-than 1000h listed what was made seconds ago: %v", young["leftovers"])
	}
	// ls --all shows the same leftovers; plain ls does not look.
	if got := kinds(ok(withSetup, "ls", "--all"), "leftovers"); !slices.Equal(got, want) {
		t.Fatalf("ls --all listed %v, want %v", got, want)
	}
	if plain := ok(withSetup, "ls"); plain["leftovers"] != nil {
		t.Fatalf("ls without --all listed leftovers: %v", plain["leftovers"])
	}
	removed := ok(withSetup, "gc")
	if got := kinds(removed, "removed"); !slices.Equal(got, want) {
		t.Fatalf("gc removed %v, want %v", got, want)
	}
	if len(emu.LogLines(taxonomy.BuildLogGroupPrefix+name)) != 0 {
		t.Fatal("gc left the build log group")
	}
	if left := ok(withSetup, "gc", "--dry-run"); len(kinds(left, "leftovers")) != 0 {
		t.Fatalf("gc left: %v", left)
	}

	// --destroy removes it all; doctor then names each missing piece.
	ok(env, "setup", "--destroy")
	for _, role := range []string{"microvm-build", "microvm-execution"} {
		if exists, _ := emu.Role(role); exists {
			t.Fatalf("destroy left %s", role)
		}
	}
	doc, inv = call(withSetup, "doctor")
	if inv.code == 0 || doc["status"] != "error" {
		t.Fatalf("doctor passed after destroy:\n%s", inv.stdout)
	}
	checks = map[string]map[string]any{}
	for _, c := range data(doc)["checks"].([]any) {
		c := c.(map[string]any)
		checks[c["name"].(string)] = c
	}
	for _, name := range []string{"bucket-exists", "build-role-exists", "execution-role-exists"} {
		c := checks[name]
		if c == nil || c["ok"] != false || !strings.Contains(c["remedy"].(string), "microvm setup") {
			t.Fatalf("doctor after destroy, %s: %v", name, c)
		}
	}
}

// Catches: setup, --destroy or gc touching what this tool did not make: a
// role of the same name without the tag must be refused before anything
// changes (no bucket made first) and left as it was, and an image without the tag (and unnamed by the ledger) must not be
// listed by gc.
func TestSetupAndGcLeaveWhatIsNotTheirs(t *testing.T) {
	emu, url := testEmulator(t, emulator.Options{})
	env, _ := lifecycleEnv(t)
	env = append(env, "AWS_ENDPOINT_URL="+url, "AWS_REGION=us-east-1")
	ctx := context.Background()
	ic := iam.New(iam.Options{Region: "us-east-1", BaseEndpoint: aws.String(url), Credentials: credentials.NewStaticCredentialsProvider("a", "b", "")})
	trust := `{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Service":"ec2.amazonaws.com"},"Action":"sts:AssumeRole"}]}`
	if _, err := ic.CreateRole(ctx, &iam.CreateRoleInput{RoleName: aws.String("theirs-build"), AssumeRolePolicyDocument: aws.String(trust)}); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"setup", "--prefix", "theirs"}, {"setup", "--prefix", "theirs", "--destroy"}} {
		before := len(emu.Requests())
		inv := cli(t, env, "", append([]string{"--json"}, args...)...)
		for _, r := range emu.Requests()[before:] {
			if (r.Service == "s3" && r.Method != http.MethodGet && r.Method != http.MethodHead) ||
				(r.Service == "iam" && !strings.Contains(string(r.Body), "Action=Get") && !strings.Contains(string(r.Body), "Action=List")) {
				t.Fatalf("microvm %v changed something before refusing: %s %s %s", args, r.Method, r.Path, r.Body)
			}
		}
		if inv.code == 0 || !strings.Contains(inv.stdout, "not this tool's") {
			t.Fatalf("microvm %v over a role it did not make: exit %d\n%s", args, inv.code, inv.stdout)
		}
		got, err := ic.GetRole(ctx, &iam.GetRoleInput{RoleName: aws.String("theirs-build")})
		if err != nil || !strings.Contains(aws.ToString(got.Role.AssumeRolePolicyDocument), "ec2.amazonaws.com") {
			t.Fatalf("microvm %v changed or removed the foreign role: %v", args, err)
		}
		if _, policies := emu.Role("theirs-build"); len(policies) != 0 {
			t.Fatalf("microvm %v attached %v to the foreign role", args, policies)
		}
	}

	inv := cli(t, env, "", "--json", "build", "--name", "untagged")
	if inv.code != 0 {
		t.Fatalf("build: %d\n%s", inv.code, inv.stderr)
	}
	arn := data(envelope(t, inv))["imageIdentifier"].(string)
	req, _ := http.NewRequest(http.MethodDelete, url+"/2017-03-31/tags/"+neturl.PathEscape(arn)+"?tagKeys="+neturl.QueryEscape(setupapi.TagKey), nil)
	req.Header.Set("Authorization", "AWS4-HMAC-SHA256 Credential=a/20260101/us-east-1/lambda/aws4_request, SignedHeaders=host, Signature=x")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("untag: %d", resp.StatusCode)
	}
	listed := cli(t, env, "", "--json", "gc", "--dry-run")
	if listed.code != 0 || strings.Contains(listed.stdout, "untagged") {
		t.Fatalf("gc listed an image without the tag: exit %d\n%s", listed.code, listed.stdout)
	}
}
