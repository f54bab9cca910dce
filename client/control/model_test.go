package control

import (
	"encoding/json"
	"testing"

	"github.com/microvms/microvms/api"
)

// loadModel reads the pinned Smithy model, api/lambda-microvms.json (embedded,
// so the cross-check never skips); unchecked says what a failure leaves
// unchecked.
func loadModel(t *testing.T, unchecked string) map[string]json.RawMessage {
	t.Helper()
	raw := api.SmithyModel
	if len(raw) == 0 {
		t.Fatalf("api/lambda-microvms.json is empty: not checking %s", unchecked)
	}
	var doc struct {
		Shapes map[string]json.RawMessage `json:"shapes"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Shapes
}

// Catches: a wrong DNS suffix, a FIPS or dual-stack host spelt differently
// from the model's rules, or a custom endpoint accepted beside FIPS.
func TestEndpointRulesReplayTheModelsTestCases(t *testing.T) {
	shapes := loadModel(t, "the endpoint rule set's test cases")
	var svc struct {
		Traits struct {
			Tests struct {
				TestCases []struct {
					Documentation string `json:"documentation"`
					Params        struct {
						Region       string `json:"Region"`
						UseFIPS      bool   `json:"UseFIPS"`
						UseDualStack bool   `json:"UseDualStack"`
						Endpoint     string `json:"Endpoint"`
					} `json:"params"`
					Expect struct {
						Endpoint *struct {
							URL string `json:"url"`
						} `json:"endpoint"`
						Error string `json:"error"`
					} `json:"expect"`
				} `json:"testCases"`
			} `json:"smithy.rules#endpointTests"`
		} `json:"traits"`
	}
	if err := json.Unmarshal(shapes["com.amazonaws.lambdamicrovms#LambdaMicrovms"], &svc); err != nil {
		t.Fatal(err)
	}
	cases := svc.Traits.Tests.TestCases
	if len(cases) == 0 {
		t.Fatal("the model carries no endpoint test cases")
	}
	for _, tc := range cases {
		p := tc.Params
		got, err := ResolveEndpoint(p.Region, p.UseFIPS, p.UseDualStack, p.Endpoint)
		switch {
		case tc.Expect.Endpoint != nil && (err != nil || got != tc.Expect.Endpoint.URL):
			t.Errorf("%s: got %q, %v; want %q", tc.Documentation, got, err, tc.Expect.Endpoint.URL)
		case tc.Expect.Error != "" && (err == nil || err.Error() != tc.Expect.Error):
			t.Errorf("%s: got %q, %v; want error %q", tc.Documentation, got, err, tc.Expect.Error)
		}
	}
}

// Catches: the endpoint override order (option, then the service-specific
// variable, then the global one) or ignoring the opt-out.
func TestEndpointOverrideOrder(t *testing.T) {
	env := map[string]string{"AWS_ENDPOINT_URL_LAMBDA": "http://lambda.local", "AWS_ENDPOINT_URL": "http://global.local"}
	get := func(k string) string { return env[k] }
	if got := endpointOverride("http://opt", get); got != "http://opt" {
		t.Errorf("option: %s", got)
	}
	if got := endpointOverride("", get); got != "http://lambda.local" {
		t.Errorf("service variable: %s", got)
	}
	delete(env, "AWS_ENDPOINT_URL_LAMBDA")
	if got := endpointOverride("", get); got != "http://global.local" {
		t.Errorf("global variable: %s", got)
	}
	env["AWS_IGNORE_CONFIGURED_ENDPOINT_URLS"] = "true"
	if got := endpointOverride("", get); got != "" {
		t.Errorf("opt-out ignored: %s", got)
	}
}
