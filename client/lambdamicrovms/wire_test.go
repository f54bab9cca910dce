package lambdamicrovms

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	smithy "github.com/aws/smithy-go"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from what the client sends")

// escapeLabel percent-encodes everything outside RFC 3986's unreserved set,
// as an httpLabel is encoded; written here independently of the client.
func escapeLabel(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if 'A' <= c && c <= 'Z' || 'a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

func fieldString(v reflect.Value) string {
	for v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	return fmt.Sprint(v.Interface())
}

// Golden request bytes for every operation, with every input member set, and
// each request checked against the Smithy model's http, httpLabel and
// httpQuery traits and body members.
//
// Catches: a member dropped from or invented in a request body (the model's
// body members must be exactly the keys sent), a query parameter under the
// wrong name, a path label left unescaped (an image ARN's ':' must be %3A), a
// wrong method, a clientToken missing from an operation the model marks
// idempotent, and any byte of a request changing unnoticed (the golden files).
func TestGoldenRequests(t *testing.T) {
	for _, op := range operations(t) {
		t.Run(op, func(t *testing.T) {
			sh := shapes(t)[ns+op]
			h := opHTTP(t, op)
			srv := newStandIn(t, reply{status: h.Code, body: "{}"})
			var tokens []string
			c := testClient(srv.srv.URL, func(o *Options) {
				o.clientTokenObserver = func(_, tok string) { tokens = append(tokens, tok) }
			})
			in := newInput(t, c, op)
			fill(t, in.Elem(), op)
			if _, err := call(ctxT(t), c, op, in.Interface()); err != nil {
				var re *RefusalError
				if !errors.As(err, &re) {
					t.Fatalf("%s: %v", op, err)
				}
				t.Fatalf("%s refused locally: %v", op, err)
			}
			reqs := srv.requests()
			if len(reqs) != 1 {
				t.Fatalf("%d requests sent, want 1", len(reqs))
			}
			r := reqs[0]
			if r.Method != h.Method {
				t.Errorf("method %s, model says %s", r.Method, h.Method)
			}
			inShape := shapes(t)[sh.Input.Target]
			wantPath := h.URI
			wantQuery := url.Values{}
			wantBody := map[string]bool{}
			for name, m := range inShape.Members {
				f := in.Elem().FieldByName(strings.ToUpper(name[:1]) + name[1:])
				switch {
				case m.has("smithy.api#httpLabel"):
					if !f.IsValid() {
						t.Fatalf("input has no field for label %s", name)
					}
					wantPath = strings.Replace(wantPath, "{"+name+"}", escapeLabel(fieldString(f)), 1)
				case m.has("smithy.api#httpQuery"):
					if !f.IsValid() {
						t.Fatalf("input has no field for query member %s", name)
					}
					q := m.traitString("smithy.api#httpQuery")
					if f.Kind() == reflect.Slice {
						for i := 0; i < f.Len(); i++ {
							wantQuery.Add(q, fieldString(f.Index(i)))
						}
					} else {
						wantQuery.Set(q, fieldString(f))
					}
				case m.has("smithy.api#httpHeader"):
					t.Fatalf("input member %s is a header; this test does not check headers", name)
				default:
					wantBody[name] = true
				}
			}
			if r.Path != wantPath {
				t.Errorf("path %s, model says %s", r.Path, wantPath)
			}
			if got := r.RawQuery; got != wantQuery.Encode() {
				t.Errorf("query %q, model says %q", got, wantQuery.Encode())
			}
			gotBody := map[string]bool{}
			if len(r.Body) > 0 {
				var obj map[string]json.RawMessage
				if err := json.Unmarshal(r.Body, &obj); err != nil {
					t.Fatalf("body is not a JSON object: %s", r.Body)
				}
				for k := range obj {
					gotBody[k] = true
				}
				if ct := r.Header.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
			}
			if !reflect.DeepEqual(gotBody, wantBody) && !(len(gotBody) == 0 && len(wantBody) == 0) {
				t.Errorf("body keys %v, model's body members %v", keys(gotBody), keys(wantBody))
			}
			for name, m := range inShape.Members {
				if m.has("smithy.api#idempotencyToken") && len(tokens) != 1 {
					t.Errorf("%s is an idempotency token but %d were minted", name, len(tokens))
				}
			}
			body := string(r.Body)
			for _, tok := range tokens {
				body = strings.ReplaceAll(body, tok, "<minted clientToken>")
			}
			target := r.Path
			if r.RawQuery != "" {
				target += "?" + r.RawQuery
			}
			got := fmt.Sprintf("%s %s\nContent-Type: %s\nContent-Length: %s\n\n%s\n", r.Method, target, r.Header.Get("Content-Type"), r.Header.Get("Content-Length"), body)
			golden := filepath.Join("testdata", "golden", op+".http")
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGoldenRequests -update)", err)
			}
			if got != string(want) {
				t.Errorf("request differs from %s:\n got: %s\nwant: %s", golden, got, want)
			}
		})
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// requireAllSet fails for every exported field of v (recursively through
// structures, slices, maps and union members) that is unset.
func requireAllSet(t *testing.T, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			t.Errorf("%s is unset", path)
			return
		}
		requireAllSet(t, v.Elem(), path)
	case reflect.Struct:
		if v.Type().Name() == "Time" {
			if v.Interface() == reflect.Zero(v.Type()).Interface() {
				t.Errorf("%s is the zero time", path)
			}
			return
		}
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if !f.IsExported() || f.Name == "ResultMetadata" || f.Name == "ErrorCodeOverride" {
				continue
			}
			requireAllSet(t, v.Field(i), path+"."+f.Name)
		}
	case reflect.Slice, reflect.Map:
		if v.Len() == 0 {
			t.Errorf("%s is empty", path)
			return
		}
		if v.Kind() == reflect.Slice {
			requireAllSet(t, v.Index(0), path+"[0]")
		} else {
			requireAllSet(t, v.MapIndex(v.MapKeys()[0]), path+"[k]")
		}
	case reflect.String:
		if v.Len() == 0 {
			t.Errorf("%s is empty", path)
		}
	}
}

// Every operation's success reply, built from the model's output shape with
// every member set and sent with the model's status code, decodes with
// nothing lost.
//
// Catches: an output member the deserializer skips or reads under another
// key, a timestamp or union not decoded, a 201 or 204 success treated as an
// error.
func TestResponsesDecodeEveryMember(t *testing.T) {
	for _, op := range operations(t) {
		t.Run(op, func(t *testing.T) {
			sh := shapes(t)[ns+op]
			h := opHTTP(t, op)
			body := ""
			if sh.Output.Target != "smithy.api#Unit" {
				b, _ := json.Marshal(sampleJSON(t, sh.Output.Target, ""))
				body = string(b)
			}
			srv := newStandIn(t, reply{status: h.Code, header: map[string]string{"Content-Type": "application/json"}, body: body})
			c := testClient(srv.srv.URL)
			in := newInput(t, c, op)
			fill(t, in.Elem(), op)
			out, err := call(ctxT(t), c, op, in.Interface())
			if err != nil {
				t.Fatalf("HTTP %d %s: %v", h.Code, body, err)
			}
			requireAllSet(t, reflect.ValueOf(out), op+"Output")
		})
	}
}

func asType[T error](err error) (any, bool) {
	var target T
	ok := errors.As(err, &target)
	return target, ok
}

// errorTypes maps each modeled exception to errors.As with its type.
var errorTypes = map[string]func(error) (any, bool){
	"AccessDeniedException":          asType[*types.AccessDeniedException],
	"ConflictException":              asType[*types.ConflictException],
	"InternalServerException":        asType[*types.InternalServerException],
	"InvalidParameterValueException": asType[*types.InvalidParameterValueException],
	"ResourceConflictException":      asType[*types.ResourceConflictException],
	"ResourceNotFoundException":      asType[*types.ResourceNotFoundException],
	"ServiceException":               asType[*types.ServiceException],
	"ServiceQuotaExceededException":  asType[*types.ServiceQuotaExceededException],
	"ThrottlingException":            asType[*types.ThrottlingException],
	"TooManyRequestsException":       asType[*types.TooManyRequestsException],
	"ValidationException":            asType[*types.ValidationException],
}

// Every modeled error of every operation, sent with every member set (body
// members in the body, httpHeader members as headers) and the model's
// httpError status, decodes as its own type with every member.
//
// Catches: a modeled member dropped (resourceId, resourceType, quotaCode,
// serviceCode, Retry-After's retryAfterSeconds), an exception decoded as a
// generic error, a wrong ErrorFault, and errors.As failing through the
// OperationError and ResponseError wrappers.
func TestErrorsDecodeEveryMember(t *testing.T) {
	seen := map[string]bool{}
	for _, op := range operations(t) {
		sh := shapes(t)[ns+op]
		for _, e := range sh.Errors {
			name := strings.TrimPrefix(e.Target, ns)
			seen[name] = true
			t.Run(op+"/"+name, func(t *testing.T) {
				es := shapes(t)[e.Target]
				var status int
				_ = json.Unmarshal(es.Traits["smithy.api#httpError"], &status)
				var fault string
				_ = json.Unmarshal(es.Traits["smithy.api#error"], &fault)
				hdr := map[string]string{"X-Amzn-ErrorType": name + ":http://internal.amazon.com/coral/com.amazonaws.lambdamicrovms/", "Content-Type": "application/json"}
				for mn, m := range es.Members {
					if m.has("smithy.api#httpHeader") {
						hdr[m.traitString("smithy.api#httpHeader")] = "7"
						_ = mn
					}
				}
				b, _ := json.Marshal(sampleJSON(t, e.Target, ""))
				srv := newStandIn(t, reply{status: status, header: hdr, body: string(b)})
				c := testClient(srv.srv.URL, func(o *Options) { o.RetryMaxAttempts = 1 })
				in := newInput(t, c, op)
				fill(t, in.Elem(), op)
				_, err := call(ctxT(t), c, op, in.Interface())
				as, ok := errorTypes[name]
				if !ok {
					t.Fatalf("no Go type registered for %s", name)
				}
				typed, ok := as(err)
				if !ok {
					t.Fatalf("errors.As to *types.%s failed for %T: %v", name, err, err)
				}
				var apiErr smithy.APIError
				if !errors.As(err, &apiErr) || apiErr.ErrorCode() != name {
					t.Errorf("smithy.APIError: %v", apiErr)
				}
				if want := map[string]smithy.ErrorFault{"client": smithy.FaultClient, "server": smithy.FaultServer}[fault]; apiErr.ErrorFault() != want {
					t.Errorf("ErrorFault %v, model says %s", apiErr.ErrorFault(), fault)
				}
				v := reflect.ValueOf(typed).Elem()
				for mn, m := range es.Members {
					f := v.FieldByName(strings.ToUpper(mn[:1]) + mn[1:])
					if !f.IsValid() {
						t.Errorf("%s has no field for member %s", name, mn)
						continue
					}
					if f.IsNil() {
						t.Errorf("%s.%s not decoded", name, mn)
						continue
					}
					want := "s-" + mn
					if m.has("smithy.api#httpHeader") {
						want = "7"
					}
					if got := fieldString(f); got != want {
						t.Errorf("%s.%s = %q, sent %q", name, mn, got, want)
					}
				}
			})
		}
	}
	for name := range errorTypes {
		if !seen[name] {
			t.Errorf("%s is registered but no operation of the model declares it", name)
		}
	}
}

// Catches: the ResourceNotFoundException idiom of aws-sdk-go-v2 not working
// (a value receiver, or the type lost inside the OperationError wrapper).
func TestErrorsAsResourceNotFound(t *testing.T) {
	srv := newStandIn(t, reply{status: 404, header: map[string]string{"X-Amzn-ErrorType": "ResourceNotFoundException"},
		body: `{"message":"MicroVM mvm-1 not found","resourceId":"mvm-1","resourceType":"Microvm"}`})
	c := testClient(srv.srv.URL)
	_, err := c.GetMicrovm(ctxT(t), &GetMicrovmInput{MicrovmIdentifier: strPtr("mvm-1")})
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &rnf) {
		t.Fatalf("errors.As(err, &rnf) false for %T %v", err, err)
	}
	if *rnf.ResourceId != "mvm-1" || *rnf.ResourceType != "Microvm" || rnf.ErrorMessage() != "MicroVM mvm-1 not found" {
		t.Fatalf("members: %+v", rnf)
	}
	var oe *smithy.OperationError
	if !errors.As(err, &oe) || oe.Service() != ServiceID || oe.Operation() != "GetMicrovm" {
		t.Fatalf("OperationError: %v", oe)
	}
}

func strPtr(s string) *string { return &s }
