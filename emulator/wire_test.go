package emulator

import (
	"encoding/json"
	"strings"
	"testing"

	cp "github.com/microvms/microvms/gen/controlplane"
)

// Catches: an input member's enum, length, pattern or range checked in no
// handler (X86_64 accepted and echoed by CreateMicrovmImage, silently
// ignored as ListMicrovmImageBuilds' architecture), an error an operation
// does not list (CreateMicrovmAuthToken's 409 on a terminated MicroVM, a
// tagging call answering ValidationException), and a non-idempotent
// repeated suspend or resume.
func TestEveryInputIsValidatedAndEveryErrorListed(t *testing.T) {
	s := New(Options{})
	base, stop, err := s.ServeLoopback()
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	arn := s.AddImage("img")
	create := func(arch string) string {
		return `{"name":"x86","baseImageArn":"arn:aws:lambda:us-east-1:aws:microvm-image:al2023-1","buildRoleArn":"arn:aws:iam::123456789012:role/b","codeArtifact":{"uri":"s3://b/k.zip"},"cpuConfigurations":[{"architecture":"` + arch + `"}]}`
	}
	body, _ := json.Marshal(cp.RunMicrovmRequest{ImageIdentifier: arn})
	_, _, out := do(t, base, "POST", "/2025-09-09/microvms", string(body), auth)
	var vm cp.RunMicrovmResponse
	_ = json.Unmarshal([]byte(out), &vm)
	cases := []struct {
		name, method, path, body string
		status                   int
		errType, bodyHas         string
	}{
		{"architecture enum in a body", "POST", "/2025-09-09/microvm-images", create("X86_64"), 400, "ValidationException", "enum value set: [ARM_64]"},
		{"architecture enum in a query", "GET", "/2025-09-09/microvm-images/img/versions/1.0/builds?architecture=X86_64", "", 400, "ValidationException", "enum value set: [ARM_64]"},
		{"name pattern", "POST", "/2025-09-09/microvm-images", strings.Replace(create("ARM_64"), `"x86"`, `"bad name!"`, 1), 400, "ValidationException", "regular expression pattern"},
		{"maxResults range", "GET", "/2025-09-09/microvms?maxResults=51", "", 400, "ValidationException", "less than or equal to 50"},
		{"a member of no shape", "POST", "/2025-09-09/microvms/" + vm.MicrovmId + "/auth-token", `{"expirationInMinutes":5,"allowedPorts":[{"port":0}]}`, 400, "ValidationException", "greater than or equal to 1"},
		{"unknown route", "GET", "/2025-09-09/nothing-here", "", 404, "UnknownOperationException", ""},
		{"tagging speaks Lambda's errors", "POST", "/2017-03-31/tags/" + arn, `{"Tags":`, 400, "InvalidParameterValueException", ""},
		{"ARM_64 passes", "GET", "/2025-09-09/microvm-images/img/versions/1.0/builds?architecture=ARM_64", "", 200, "", `"ARM_64"`},
	}
	for _, tc := range cases {
		status, typ, body := do(t, base, tc.method, tc.path, tc.body, auth)
		if status != tc.status || typ != tc.errType || !strings.Contains(body, tc.bodyHas) {
			t.Errorf("%s: %d %q %s; want %d %q containing %q", tc.name, status, typ, body, tc.status, tc.errType, tc.bodyHas)
		}
	}

	vmPath := "/2025-09-09/microvms/" + vm.MicrovmId
	do(t, base, "GET", vmPath, "", auth) // PENDING -> RUNNING
	for i := range 2 {
		if status, typ, out := do(t, base, "POST", vmPath+"/suspend", "", auth); status != 200 {
			t.Fatalf("suspend #%d: %d %s %s", i+1, status, typ, out)
		}
	}
	do(t, base, "GET", vmPath, "", auth) // SUSPENDING -> SUSPENDED
	for i := range 2 {
		if status, typ, out := do(t, base, "POST", vmPath+"/resume", "", auth); status != 200 {
			t.Fatalf("resume #%d (the second while resuming): %d %s %s", i+1, status, typ, out)
		}
	}
	do(t, base, "DELETE", vmPath, "", auth)
	do(t, base, "GET", vmPath, "", auth)
	status, typ, out := do(t, base, "POST", vmPath+"/auth-token", `{"expirationInMinutes":5,"allowedPorts":[{"port":9000}]}`, auth)
	if status != 400 || typ != "ValidationException" || !Listed("CreateMicrovmAuthToken", typ) {
		t.Fatalf("a token for a terminated MicroVM: %d %s %s", status, typ, out)
	}
	if status, typ, _ := do(t, base, "POST", vmPath+"/resume", "", auth); status != 409 || typ != "ConflictException" {
		t.Fatalf("resume of a terminated MicroVM: %d %s", status, typ)
	}
}

// Catches: an image that says nothing of its hooks getting a run hook: the
// model's default for microvmHooks.run is DISABLED.
func TestHooksAbsentMeansNoRunHook(t *testing.T) {
	if runHookEnabled(cp.UpdateMicrovmImageRequest{}) || runHookEnabled(cp.UpdateMicrovmImageRequest{Hooks: &cp.Hooks{MicrovmHooks: &cp.MicrovmHooks{}}}) {
		t.Fatal("the run hook is on by default")
	}
	if !runHookEnabled(cp.UpdateMicrovmImageRequest{Hooks: &cp.Hooks{MicrovmHooks: &cp.MicrovmHooks{Run: ptr(cp.ENABLED)}}}) {
		t.Fatal("an enabled run hook is off")
	}
}
