package planes

import (
	"strings"
	"testing"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// TestEnvRegionReadsTheSDKsOrderAndRefusesUnmeasured catches the region
// rule drifting between the commands and the engine (both call this): the
// variables read in another order than the AWS SDKs', an unmeasured region
// accepted from a variable, or no default.
func TestEnvRegionReadsTheSDKsOrderAndRefusesUnmeasured(t *testing.T) {
	env := func(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }
	r, err := EnvRegion(env(map[string]string{"AWS_REGION": taxonomy.Regions[1], "AWS_DEFAULT_REGION": taxonomy.Regions[2]}))
	if err != nil || r.String() != taxonomy.Regions[1] {
		t.Errorf("AWS_REGION first: got %v, %v", r, err)
	}
	if r, err = EnvRegion(env(map[string]string{"AWS_DEFAULT_REGION": taxonomy.Regions[2]})); err != nil || r.String() != taxonomy.Regions[2] {
		t.Errorf("AWS_DEFAULT_REGION: got %v, %v", r, err)
	}
	if r, err = EnvRegion(env(nil)); err != nil || r.String() != taxonomy.Regions[0] {
		t.Errorf("default: got %v, %v", r, err)
	}
	_, err = EnvRegion(env(map[string]string{"AWS_REGION": "mars-north-1"}))
	if client.KindOf(err) != taxonomy.KindInvalidArg || !strings.Contains(err.Error(), "AWS_REGION=mars-north-1") || !strings.Contains(err.Error(), "--unlisted-region mars-north-1") {
		t.Errorf("unmeasured region: %v", err)
	}
	if got := ShellQuote("it's"); got != `'it'\''s'` {
		t.Errorf("ShellQuote = %s", got)
	}
}
