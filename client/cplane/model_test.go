package cplane

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
