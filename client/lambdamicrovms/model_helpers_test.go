package lambdamicrovms

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/microvms/microvms/api"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
)

// The tests here read the Smithy model (api/lambda-microvms.json) directly,
// not the YAML the generator read, so a transcription or generation slip
// shows up as a disagreement between the two.

const ns = "com.amazonaws.lambdamicrovms#"

type smithyShape struct {
	Type    string `json:"type"`
	Input   *struct{ Target string }
	Output  *struct{ Target string }
	Errors  []struct{ Target string }
	Member  *smithyMember `json:"member"`
	Key     *smithyMember `json:"key"`
	Value   *smithyMember `json:"value"`
	Members map[string]smithyMember
	Traits  map[string]json.RawMessage
}

type smithyMember struct {
	Target string
	Traits map[string]json.RawMessage
}

func (m smithyMember) has(trait string) bool { _, ok := m.Traits[trait]; return ok }

func (m smithyMember) traitString(trait string) string {
	var s string
	_ = json.Unmarshal(m.Traits[trait], &s)
	return s
}

var (
	modelOnce   sync.Once
	modelShapes map[string]smithyShape
)

func shapes(t *testing.T) map[string]smithyShape {
	t.Helper()
	modelOnce.Do(func() {
		var doc struct {
			Shapes map[string]smithyShape `json:"shapes"`
		}
		if err := json.Unmarshal(api.SmithyModel, &doc); err != nil {
			panic(err)
		}
		modelShapes = doc.Shapes
	})
	return modelShapes
}

type httpTrait struct {
	Method string `json:"method"`
	URI    string `json:"uri"`
	Code   int    `json:"code"`
}

func opHTTP(t *testing.T, op string) httpTrait {
	t.Helper()
	var h httpTrait
	if err := json.Unmarshal(shapes(t)[ns+op].Traits["smithy.api#http"], &h); err != nil {
		t.Fatalf("%s: http trait: %v", op, err)
	}
	if h.Code == 0 {
		h.Code = 200
	}
	return h
}

// operations lists the model's operations, sorted.
func operations(t *testing.T) []string {
	t.Helper()
	var out []string
	for k, s := range shapes(t) {
		if s.Type == "operation" {
			out = append(out, strings.TrimPrefix(k, ns))
		}
	}
	sort.Strings(out)
	return out
}

// sampleJSON is a value of the Smithy shape target with every member set,
// built from the model alone.
func sampleJSON(t *testing.T, target, member string) any {
	t.Helper()
	switch target {
	case "smithy.api#String":
		return "s-" + member
	case "smithy.api#Integer", "smithy.api#Long", "smithy.api#PrimitiveInteger", "smithy.api#PrimitiveLong":
		return 7
	case "smithy.api#Boolean", "smithy.api#PrimitiveBoolean":
		return true
	case "smithy.api#Timestamp":
		return 1755278248.5
	case "smithy.api#Double":
		return 1.5
	case "smithy.api#Unit":
		return map[string]any{}
	}
	s, ok := shapes(t)[target]
	if !ok {
		t.Fatalf("unknown shape %s", target)
	}
	switch s.Type {
	case "string":
		return "s-" + member
	case "integer", "long":
		return 7
	case "boolean":
		return true
	case "timestamp":
		return 1755278248.5
	case "double":
		return 1.5
	case "enum":
		names := make([]string, 0, len(s.Members))
		for n := range s.Members {
			names = append(names, n)
		}
		sort.Strings(names)
		return s.Members[names[0]].traitString("smithy.api#enumValue")
	case "list":
		return []any{sampleJSON(t, s.Member.Target, member)}
	case "map":
		return map[string]any{"k-" + member: sampleJSON(t, s.Value.Target, member)}
	case "union":
		names := make([]string, 0, len(s.Members))
		for n := range s.Members {
			names = append(names, n)
		}
		sort.Strings(names)
		return map[string]any{names[0]: sampleJSON(t, s.Members[names[0]].Target, names[0])}
	case "structure":
		out := map[string]any{}
		for n, m := range s.Members {
			if m.has("smithy.api#httpHeader") || m.has("smithy.api#httpLabel") || m.has("smithy.api#httpQuery") {
				continue
			}
			out[n] = sampleJSON(t, m.Target, n)
		}
		return out
	}
	t.Fatalf("sampleJSON: %s is a %s", target, s.Type)
	return nil
}

// fill sets every field of the struct v points to, recursively, with values
// the model's constraints accept; names picks values for members whose
// patterns need a particular form.
func fill(t *testing.T, v reflect.Value, name string) {
	t.Helper()
	switch v.Kind() {
	case reflect.Pointer:
		if v.Type().Elem().Kind() == reflect.Struct && v.Type().Elem().Name() == "Time" {
			v.Set(reflect.ValueOf(aws.Time(time.Unix(1755278248, 0))))
			return
		}
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), name)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			f := v.Type().Field(i)
			if !f.IsExported() || f.Name == "ResultMetadata" {
				continue
			}
			fill(t, v.Field(i), f.Name)
		}
	case reflect.String:
		if vals := v.Addr().MethodByName("Values"); vals.IsValid() {
			v.Set(vals.Call(nil)[0].Index(0))
			return
		}
		v.SetString(sampleString(name))
	case reflect.Int32, reflect.Int64:
		v.SetInt(sampleInt(name))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(t, s.Index(0), name)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		val := reflect.New(v.Type().Elem()).Elem()
		fill(t, val, name)
		m.SetMapIndex(reflect.ValueOf("key-"+strings.ToLower(name)), val)
		v.Set(m)
	case reflect.Interface:
		u, ok := unionSamples[v.Type()]
		if !ok {
			t.Fatalf("no union sample for %s", v.Type())
		}
		v.Set(reflect.ValueOf(u))
	default:
		t.Fatalf("fill: %s (%s)", v.Kind(), name)
	}
}

var unionSamples = map[reflect.Type]any{
	reflect.TypeOf((*types.CodeArtifact)(nil)).Elem():      &types.CodeArtifactMemberUri{Value: "s3://bucket/code.zip"},
	reflect.TypeOf((*types.Logging)(nil)).Elem():           &types.LoggingMemberCloudWatch{Value: types.CloudWatchLogging{LogGroup: aws.String("/aws/microvms/app"), LogStream: aws.String("main")}},
	reflect.TypeOf((*types.PortSpecification)(nil)).Elem(): &types.PortSpecificationMemberRange{Value: types.PortRange{StartPort: aws.Int32(8000), EndPort: aws.Int32(8080)}},
}

const imageARN = "arn:aws:lambda:us-east-1:123456789012:microvm-image:my-image"

func sampleString(name string) string {
	switch name {
	case "ImageIdentifier", "Resource", "ImageArn":
		return imageARN
	case "BaseImageArn":
		return "arn:aws:lambda:us-east-1:aws:microvm-image:al2023"
	case "BuildRoleArn", "ExecutionRoleArn":
		return "arn:aws:iam::123456789012:role/microvms-build"
	case "IngressNetworkConnectors":
		return ConnectorARN("us-east-1", "ALL_INGRESS")
	case "EgressNetworkConnectors":
		return ConnectorARN("us-east-1", "INTERNET_EGRESS")
	case "MicrovmIdentifier":
		return "mvm-0123456789abcdef"
	case "NextToken":
		return "cursor+/=="
	case "RunHookPayload":
		return `{"agent_token":"tok"}`
	case "LogGroup":
		return "/aws/microvms/app"
	case "TagKeys":
		return "team"
	}
	return "sample-" + strings.ToLower(name)
}

func sampleInt(name string) int64 {
	switch name {
	case "MaxResults":
		return 25
	case "ExpirationInMinutes":
		return 15
	case "MaximumDurationInSeconds":
		return 3600
	case "Port", "StartPort":
		return 8080
	case "EndPort":
		return 8090
	case "MinimumMemoryInMiB":
		return 2048
	case "MaxIdleDurationSeconds", "SuspendedDurationSeconds":
		return 600
	}
	if strings.HasSuffix(name, "TimeoutInSeconds") {
		return 30
	}
	return 7
}

// recorded is one request as the stand-in received it.
type recorded struct {
	Method, Path, RawQuery string
	Header                 http.Header
	Body                   []byte
}

// standIn is an HTTP server on loopback answering every request with the
// next queued reply (the last one repeats), recording what it received.
type standIn struct {
	t       *testing.T
	srv     *httptest.Server
	mu      sync.Mutex
	reqs    []recorded
	replies []reply
}

type reply struct {
	status int
	header map[string]string
	body   string
}

func newStandIn(t *testing.T, replies ...reply) *standIn {
	s := &standIn{t: t, replies: replies}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		s.reqs = append(s.reqs, recorded{Method: r.Method, Path: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery, Header: r.Header.Clone(), Body: b})
		rep := s.replies[min(len(s.reqs), len(s.replies))-1]
		s.mu.Unlock()
		for k, v := range rep.header {
			w.Header().Set(k, v)
		}
		w.WriteHeader(rep.status)
		_, _ = io.WriteString(w, rep.body)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *standIn) requests() []recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]recorded(nil), s.reqs...)
}

// fixedNow pins the signing clock so signatures are reproducible.
var fixedNow = time.Date(2026, 8, 15, 17, 17, 28, 0, time.UTC)

var testCreds = credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY", "")

// fastRetryer keeps aws-sdk-go-v2's standard retry policy but caps its
// backoff at a millisecond.
func fastRetryer(r aws.Retryer) aws.Retryer { return retry.AddWithMaxBackoffDelay(r, time.Millisecond) }

// testClient points a client at url with fixed credentials and clock and no
// retry delay worth waiting for.
func testClient(url string, optFns ...func(*Options)) *Client {
	o := Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(url),
		Credentials:  testCreds,
		clock:        func() time.Time { return fixedNow },
	}
	return New(o, append([]func(*Options){func(o *Options) {
		o.Retryer = fastRetryer(o.Retryer)
	}}, optFns...)...)
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// call invokes the operation named op on c with input (a *<Op>Input) by
// reflection, returning the output and the error.
func call(ctx context.Context, c *Client, op string, input any) (any, error) {
	m := reflect.ValueOf(c).MethodByName(op)
	res := m.Call([]reflect.Value{reflect.ValueOf(ctx), reflect.ValueOf(input)})
	err, _ := res[1].Interface().(error)
	return res[0].Interface(), err
}

// newInput is a fresh *<Op>Input.
func newInput(t *testing.T, c *Client, op string) reflect.Value {
	t.Helper()
	m := reflect.ValueOf(c).MethodByName(op)
	if !m.IsValid() {
		t.Fatalf("the client has no method %s", op)
	}
	return reflect.New(m.Type().In(1).Elem())
}
