package main_test

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/microvms/microvms/emulator"
	"github.com/microvms/microvms/gen/taxonomy"
)

// Catches: a request sent to another service's endpoint: `logs` and
// teardown sending CloudWatch Logs to the control plane's endpoint, a build
// uploading its artifact to AWS's S3 (or to the control plane) while S3 has
// an endpoint of its own, doctor asking STS anywhere but STS's endpoint,
// Lambda's AWS_ENDPOINT_URL_LAMBDA or the general AWS_ENDPOINT_URL winning
// over a service's own variable. One emulator serves four listeners, one
// per service variable; every request the CLI sends is recorded with the
// listener it reached and the service its SigV4 scope names.
func TestEveryRequestReachesItsOwnServiceEndpoint(t *testing.T) {
	env, _ := lifecycleEnv(t)
	emu := emulator.New(emulator.Options{VMs: emulator.AgentdLauncher(agentdBin(t), nil), WallClock: true, StateDir: t.TempDir()})
	t.Cleanup(emu.Close)
	emu.CreateBucket("artifacts")
	scopeAt := map[string]string{} // listener address -> the only scope it may see
	url := map[string]string{}
	for _, svc := range []struct{ env, scope string }{
		{"AWS_ENDPOINT_URL_LAMBDA_MICROVMS", "lambda"},
		{"AWS_ENDPOINT_URL_S3", "s3"},
		{"AWS_ENDPOINT_URL_CLOUDWATCH_LOGS", "logs"},
		{"AWS_ENDPOINT_URL_STS", "sts"},
	} {
		srv := httptest.NewServer(emu.Handler())
		t.Cleanup(srv.Close)
		scopeAt[srv.Listener.Addr().String()] = svc.scope
		url[svc.scope] = srv.URL
		env = append(env, svc.env+"="+srv.URL)
	}
	dead := closedPort(t)
	env = append(env, "AWS_ENDPOINT_URL="+dead, "AWS_ENDPOINT_URL_LAMBDA="+dead, "MICROVM_BUCKET=artifacts")
	run := func(args ...string) map[string]any {
		t.Helper()
		inv := cli(t, env, "", append([]string{"--json"}, args...)...)
		m := envelope(t, inv)
		if inv.code != 0 {
			t.Fatalf("microvm %v: exit %d\n%s\n%s", args, inv.code, inv.stdout, inv.stderr)
		}
		return data(m)
	}
	built := run("build", "--name", "routed")
	name := built["imageName"].(string)
	if lines := run("logs", name)["lines"].([]any); len(lines) == 0 {
		t.Fatal("logs read no lines")
	}
	run("run", "--exec", "true") // builds, launches, tears down (the log group too)
	kept := run("run", "--keep", "--image", name)
	td := run("terminate", kept["microvmId"].(string), "--delete-image", "--wait")
	if g := td["undeletedLogGroups"]; g != nil && len(g.([]any)) != 0 {
		t.Fatalf("teardown left log groups: %v", td)
	}
	doc := run("doctor")
	if !strings.Contains(strings.ToLower(strings.Join(checkDetails(doc), "\n")), "arn:aws:iam::123456789012:user/emulator") {
		t.Fatalf("doctor did not ask the STS endpoint: %v", doc)
	}

	seen := map[string]int{}
	for _, r := range emu.Requests() {
		want, ok := scopeAt[r.Local]
		if !ok {
			t.Fatalf("a request reached an unknown listener %s", r.Local)
		}
		if r.Service != want {
			t.Errorf("%s %s signed for %q reached the %s endpoint", r.Method, r.Path, r.Service, want)
		}
		seen[want]++
	}
	for _, scope := range []string{"lambda", "s3", "logs", "sts"} {
		if seen[scope] == 0 {
			t.Errorf("no request reached the %s endpoint %s: %v", scope, url[scope], seen)
		}
	}
}

// Catches: a control plane on this machine with S3 or CloudWatch Logs left
// on AWS followed anyway: the artifact uploaded where the emulator can
// never read it (the build then runs the emulator's own agentd), the build
// logs read from, or deleted in, someone else's AWS group of that name.
func TestLocalControlPlaneWithAWSServicesIsRefused(t *testing.T) {
	env, _ := lifecycleEnv(t)
	emu, url := testEmulator(t, emulator.Options{})
	env = append(env, "AWS_ENDPOINT_URL_LAMBDA_MICROVMS="+url, "MICROVM_BUCKET=artifacts", "AWS_EC2_METADATA_DISABLED=true")
	m := wantFailure(t, cli(t, env, "", "--json", "build", "--name", "nos3"), taxonomy.KindPrecondition, "")
	if !strings.Contains(m["error"].(string), "AWS_ENDPOINT_URL_S3") {
		t.Fatalf("%v", m["error"])
	}
	wantFailure(t, cli(t, env, "", "--json", "logs", "whatever"), taxonomy.KindPrecondition, taxonomy.FindingBuildLogsLocation)
	for _, r := range emu.Requests() {
		if r.Service != "lambda" {
			t.Errorf("%s %s signed for %q reached the control plane", r.Method, r.Path, r.Service)
		}
	}
}

func checkDetails(doctor map[string]any) []string {
	var out []string
	for _, c := range doctor["checks"].([]any) {
		out = append(out, c.(map[string]any)["detail"].(string))
	}
	return out
}
