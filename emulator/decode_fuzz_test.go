package emulator

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	cp "github.com/microvms/microvms/gen/controlplane"
)

// decodeTargets are the request bodies the emulator decodes from the
// network, one per operation with a JSON body.
var decodeTargets = []func() any{
	func() any { return new(cp.CreateMicrovmImageRequest) },
	func() any { return new(cp.UpdateMicrovmImageRequest) },
	func() any { return new(cp.UpdateMicrovmImageVersionRequest) },
	func() any { return new(cp.TagResourceRequest) },
	func() any { return new(cp.RunMicrovmRequest) },
	func() any { return new(cp.CreateMicrovmAuthTokenRequest) },
	func() any { return new(cp.CreateMicrovmShellAuthTokenRequest) },
}

// FuzzDecode feeds arbitrary request bodies through decode, the strict JSON
// reader every body-carrying operation goes through, for each request type.
//
// Invariants, each with the wrong edit it catches:
//   - no panic (a custom UnmarshalJSON on a generated union that indexes an
//     empty discriminator);
//   - a refusal is a 400 ValidationException in the restJson1 shape, with
//     X-Amzn-ErrorType and a JSON body whose message is a non-empty string
//     (an error path that writes a bare text body, which the client would
//     read as an HTML gateway page and retry);
//   - an acceptance writes nothing, so the handler can still answer (a
//     decode that writes a status on success);
//   - what was accepted survives the emulator's own encoding: marshalling
//     the decoded value and decoding it strictly again succeeds and is a
//     fixed point (a member whose JSON name differs between Marshal and
//     Unmarshal, which DisallowUnknownFields would then refuse).
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		`{}`,
		`{"name":"img","baseImageIdentifier":"arn:aws:lambda:us-east-1::microvm-image:al2023","baseImageVersion":"1"}`,
		`{"imageIdentifier":"arn:aws:lambda:us-east-1:123456789012:microvm-image:x","runHookPayload":"{\"agent_token\":\"t\"}"}`,
		`{"imageIdentifier":"x","clientToken":"c","minimumMemoryInMiB":2048,"tags":{"a":"b"}}`,
		`{"microvmIdentifier":"m","ports":[9000],"expirationInMinutes":60}`,
		`{"tags":{"k":"v"}}`,
		`{"unknownMember":1}`,
		`{"name":null}`,
		`{"tags":{"k":null}}`,
		`{"ports":[-1, 1e400]}`,
		`{"runHookPayload":"\ud800"}`,
		`{"name":"a"} trailing`,
		`{"name":"a","name":"b"}`,
		`[]`,
		`null`,
		``,
		`{`,
		"\xff\xfe{}",
	} {
		for i := range decodeTargets {
			f.Add(uint8(i), []byte(s))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		mk := decodeTargets[int(which)%len(decodeTargets)]
		v := mk()
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(body))
		ok := decode(rec, req, v)
		if !ok {
			if rec.Code != http.StatusBadRequest || rec.Header().Get("X-Amzn-ErrorType") != "ValidationException" {
				t.Fatalf("refusal: HTTP %d type %q", rec.Code, rec.Header().Get("X-Amzn-ErrorType"))
			}
			var env struct {
				Message *string `json:"message"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &env); err != nil || env.Message == nil || strings.TrimSpace(*env.Message) == "" {
				t.Fatalf("refusal body %q is not a restJson1 error with a message (%v)", rec.Body.Bytes(), err)
			}
			return
		}
		if rec.Body.Len() != 0 || len(rec.Header()) != 0 {
			t.Fatalf("an accepted body wrote %d bytes and headers %v", rec.Body.Len(), rec.Header())
		}
		enc, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", body, err)
		}
		again := mk()
		rec2 := httptest.NewRecorder()
		if !decode(rec2, httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(enc)), again) {
			t.Fatalf("accepted %q, re-encoded as %s, then refused: %s", body, enc, rec2.Body.Bytes())
		}
		enc2, err := json.Marshal(again)
		if err != nil || !bytes.Equal(enc, enc2) {
			t.Fatalf("not a fixed point: %s then %s (%v)", enc, enc2, err)
		}
	})
}

// FuzzPaginate feeds arbitrary nextToken and maxResults values, both from
// the query string, through the emulator's pager.
//
// Invariants: no panic (a cursor decoding to an offset past the end, or a
// negative one, slicing out of range); a refusal is a 400
// ValidationException; an accepted page is within bounds and no larger than
// maxResults; and a next token it hands out is itself accepted and resumes
// exactly after the page (a cursor that re-encodes differently from how it
// parses would skip or repeat items).
func FuzzPaginate(f *testing.F) {
	f.Add(uint8(10), 0, false, "", false)
	f.Add(uint8(120), 50, true, "b2Zmc2V0OjUw", true)
	f.Add(uint8(3), 1, true, "b2Zmc2V0OjE=", true)
	f.Add(uint8(3), 1, true, "b2Zmc2V0OjE", true)
	f.Add(uint8(3), 51, true, "b2Zmc2V0Oi0x", true)
	f.Add(uint8(0), 0, true, "!!!", true)
	f.Fuzz(func(t *testing.T, n uint8, max int, hasMax bool, token string, hasToken bool) {
		items := make([]int, n)
		for i := range items {
			items[i] = i
		}
		var maxp *int
		if hasMax {
			maxp = &max
		}
		var tokp *string
		if hasToken {
			tokp = &token
		}
		rec := httptest.NewRecorder()
		page, next, ok := paginate(rec, items, maxp, tokp)
		if !ok {
			if rec.Code != http.StatusBadRequest || rec.Header().Get("X-Amzn-ErrorType") != "ValidationException" {
				t.Fatalf("refusal: HTTP %d type %q", rec.Code, rec.Header().Get("X-Amzn-ErrorType"))
			}
			return
		}
		if rec.Body.Len() != 0 {
			t.Fatalf("an accepted page wrote %q", rec.Body.Bytes())
		}
		size := 50
		if maxp != nil {
			size = *maxp
		}
		if len(page) > size {
			t.Fatalf("page of %d over maxResults %d", len(page), size)
		}
		if next == nil {
			if len(page) > 0 && page[len(page)-1] != len(items)-1 {
				t.Fatalf("no next token, but the page %v ends before item %d", page, len(items)-1)
			}
			return
		}
		if len(page) == 0 {
			t.Fatal("a next token after an empty page would loop forever")
		}
		rest, _, ok := paginate(httptest.NewRecorder(), items, maxp, next)
		if !ok || len(rest) == 0 || rest[0] != page[len(page)-1]+1 {
			t.Fatalf("next token %q does not resume after %v: ok %v rest %v", *next, page, ok, rest)
		}
	})
}
