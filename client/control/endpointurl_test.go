package control

import "testing"

// Catches: an https:// prefix on the emulator's loopback endpoint (nothing
// there speaks TLS), http:// on a platform endpoint (the request carries two
// credentials), a host that merely starts with 127.0.0.1 taken for loopback,
// and a caller's explicit scheme rewritten.
func TestEndpointURLSchemes(t *testing.T) {
	for in, want := range map[string]string{
		"30d00336-db07.lambda-microvm.us-east-1.on.aws": "https://30d00336-db07.lambda-microvm.us-east-1.on.aws",
		"127.0.0.1:41234":            "http://127.0.0.1:41234",
		"127.0.0.1":                  "http://127.0.0.1",
		"127.9.9.9:80":               "http://127.9.9.9:80",
		"[::1]:41234":                "http://[::1]:41234",
		"localhost:9000":             "http://localhost:9000",
		"127.0.0.1.attacker.example": "https://127.0.0.1.attacker.example",
		"10.0.0.1:9000":              "https://10.0.0.1:9000",
		"https://127.0.0.1:1":        "https://127.0.0.1:1",
		"http://vm.example":          "http://vm.example",
	} {
		if got := EndpointURL(in); got != want {
			t.Errorf("EndpointURL(%q) = %q, want %q", in, got, want)
		}
	}
}
