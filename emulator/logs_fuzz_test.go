package emulator

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// FuzzServeLogs feeds arbitrary bodies and targets to the CloudWatch Logs
// stand-in, which parses network bytes.
//
// Invariants, each with the wrong edit it catches:
//   - no panic (a cursor past the end of the group sliced unchecked);
//   - every answer is awsJson1.1: a 200 with a JSON object, or a 400 whose
//     body names the error in __type (a refusal written as text, which the
//     SDK cannot classify and would report as a deserialization failure);
//   - a cursor the stand-in handed out resumes where it left off and the
//     union of pages is every line once (an off-by-one between pages).
func FuzzServeLogs(f *testing.F) {
	for _, s := range []string{
		`{"logGroupName":"/aws/lambda-microvms/x"}`,
		`{"logGroupName":"/aws/lambda-microvms/x","limit":1}`,
		`{"logGroupName":"/aws/lambda-microvms/x","nextToken":"2"}`,
		`{"logGroupName":"/aws/lambda-microvms/x","nextToken":"-1"}`,
		`{"logGroupName":"/aws/lambda-microvms/x","nextToken":"99"}`,
		`{"logGroupName":"/aws/lambda-microvms/x","filterPattern":"\"b\""}`,
		`{"logGroupName":"none"}`,
		`{"logGroupName":5}`,
		``, `{`, `null`, `[]`,
	} {
		f.Add("FilterLogEvents", s)
		f.Add("DeleteLogGroup", s)
	}
	f.Add("Nope", `{}`)
	f.Fuzz(func(t *testing.T, op, body string) {
		s := New(Options{})
		for _, m := range []string{"a", "b", "c"} {
			s.logf("/aws/lambda-microvms/x", "build-1.0", "%s", m)
		}
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.Header.Set("X-Amz-Target", logsTargetPrefix+op)
		rec := httptest.NewRecorder()
		s.serveLogs(rec, req, []byte(body))
		var out map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%d answer is not a JSON object: %q", rec.Code, rec.Body.String())
		}
		switch rec.Code {
		case http.StatusOK:
		case http.StatusBadRequest:
			if typ, _ := out["__type"].(string); typ == "" {
				t.Fatalf("a refusal without __type: %q", rec.Body.String())
			}
		default:
			t.Fatalf("status %d", rec.Code)
		}
	})
}

// Catches: pages that skip or repeat a line at their boundary.
func TestServeLogsPages(t *testing.T) {
	s := New(Options{})
	for _, m := range []string{"a", "b", "c", "d", "e"} {
		s.logf("g", "s", "%s", m)
	}
	var got []string
	tok := ""
	for range 10 {
		body := `{"logGroupName":"g","limit":2` + map[bool]string{true: `,"nextToken":"` + tok + `"`}[tok != ""] + `}`
		req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
		req.Header.Set("X-Amz-Target", logsTargetPrefix+"FilterLogEvents")
		rec := httptest.NewRecorder()
		s.serveLogs(rec, req, []byte(body))
		var out filterLogEventsResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatal(err)
		}
		for _, e := range out.Events {
			got = append(got, e.Message)
		}
		if out.NextToken == nil {
			break
		}
		tok = *out.NextToken
	}
	if strings.Join(got, "") != "abcde" {
		t.Fatalf("pages gave %v", got)
	}
}
