package emulator

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"
)

// logsFixture is an emulator holding two build log groups and one other:
// group a has stream build-1 (one, two, three) written before build-2 (four,
// five), a second apart each; group b has one line.
func logsFixture(t *testing.T) (*Server, string) {
	t.Helper()
	c := &clock{t: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	s, base := serve(t, Options{Now: c.Now})
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range []struct{ group, stream, msg string }{
		{"/aws/lambda-microvms/a", "build-1", "one"},
		{"/aws/lambda-microvms/a", "build-1", "two"},
		{"/aws/lambda-microvms/a", "build-1", "three"},
		{"/aws/lambda-microvms/b", "build-1", "solo"},
		{"/aws/lambda-microvms/a", "build-2", "four"},
		{"/aws/lambda-microvms/a", "build-2", "five"},
		{"other", "s", "elsewhere"},
	} {
		s.logf(l.group, l.stream, "%s", l.msg)
		c.Advance(time.Second)
	}
	return s, base
}

func messages(events []cwtypes.OutputLogEvent) string {
	var out []string
	for _, e := range events {
		out = append(out, aws.ToString(e.Message))
	}
	return strings.Join(out, ",")
}

// Catches (through aws-sdk-go-v2's own cloudwatchlogs client): the reads
// `aws logs describe-log-groups`, `describe-log-streams` and
// `get-log-events` make answered UnknownOperationException (issue 51), a
// prefix that does not filter, pages that repeat or skip a group or a
// stream, LastEventTime ordering ignored, GetLogEvents returning the head
// when startFromHead is unset (the service returns the latest events), a
// forward token that does not hand itself back at the end (a reader
// following a log would never know it had caught up), and a log group ARN
// not accepted as logGroupIdentifier.
func TestLogsSliceServesTheReadsTheCLIMakes(t *testing.T) {
	_, base := logsFixture(t)
	ctx := context.Background()
	c := cloudwatchlogs.New(cloudwatchlogs.Options{Region: "us-east-1", Credentials: testCreds, BaseEndpoint: aws.String(base)})

	var groups []string
	p := cloudwatchlogs.NewDescribeLogGroupsPaginator(c, &cloudwatchlogs.DescribeLogGroupsInput{LogGroupNamePrefix: aws.String("/aws/lambda-microvms/"), Limit: aws.Int32(1)})
	for pages := 0; p.HasMorePages() && pages < 10; pages++ {
		out, err := p.NextPage(ctx)
		if err != nil {
			t.Fatalf("DescribeLogGroups: %v", err)
		}
		for _, g := range out.LogGroups {
			groups = append(groups, aws.ToString(g.LogGroupName))
			if aws.ToString(g.LogGroupArn) != "arn:aws:logs:us-east-1:123456789012:log-group:"+aws.ToString(g.LogGroupName) || aws.ToInt64(g.CreationTime) == 0 {
				t.Errorf("group %+v", g)
			}
		}
	}
	if strings.Join(groups, ",") != "/aws/lambda-microvms/a,/aws/lambda-microvms/b" {
		t.Fatalf("DescribeLogGroups by prefix, a page each: %v", groups)
	}

	streams, err := c.DescribeLogStreams(ctx, &cloudwatchlogs.DescribeLogStreamsInput{LogGroupName: aws.String("/aws/lambda-microvms/a"), OrderBy: cwtypes.OrderByLastEventTime, Descending: aws.Bool(true)})
	if err != nil {
		t.Fatalf("DescribeLogStreams: %v", err)
	}
	if len(streams.LogStreams) != 2 || aws.ToString(streams.LogStreams[0].LogStreamName) != "build-2" ||
		aws.ToInt64(streams.LogStreams[0].LastEventTimestamp) <= aws.ToInt64(streams.LogStreams[1].LastEventTimestamp) {
		t.Fatalf("streams by last event, newest first: %+v", streams.LogStreams)
	}
	if _, err := c.DescribeLogStreams(ctx, &cloudwatchlogs.DescribeLogStreamsInput{LogGroupName: aws.String("/aws/lambda-microvms/none")}); !errors.As(err, new(*cwtypes.ResourceNotFoundException)) {
		t.Fatalf("DescribeLogStreams of a missing group: %v", err)
	}

	get := func(in cloudwatchlogs.GetLogEventsInput) *cloudwatchlogs.GetLogEventsOutput {
		t.Helper()
		in.LogGroupName, in.LogStreamName = aws.String("/aws/lambda-microvms/a"), aws.String("build-1")
		out, err := c.GetLogEvents(ctx, &in)
		if err != nil {
			t.Fatalf("GetLogEvents: %v", err)
		}
		return out
	}
	head := get(cloudwatchlogs.GetLogEventsInput{StartFromHead: aws.Bool(true), Limit: aws.Int32(2)})
	if messages(head.Events) != "one,two" {
		t.Fatalf("from the head: %q", messages(head.Events))
	}
	rest := get(cloudwatchlogs.GetLogEventsInput{NextToken: head.NextForwardToken, Limit: aws.Int32(2)})
	if messages(rest.Events) != "three" {
		t.Fatalf("the forward page: %q", messages(rest.Events))
	}
	end := get(cloudwatchlogs.GetLogEventsInput{NextToken: rest.NextForwardToken})
	if len(end.Events) != 0 || aws.ToString(end.NextForwardToken) != aws.ToString(rest.NextForwardToken) {
		t.Fatalf("at the end: %q, token %q after %q", messages(end.Events), aws.ToString(end.NextForwardToken), aws.ToString(rest.NextForwardToken))
	}
	latest := get(cloudwatchlogs.GetLogEventsInput{Limit: aws.Int32(2)})
	if messages(latest.Events) != "two,three" {
		t.Fatalf("without startFromHead, the latest: %q", messages(latest.Events))
	}
	back := get(cloudwatchlogs.GetLogEventsInput{NextToken: latest.NextBackwardToken, Limit: aws.Int32(2)})
	if messages(back.Events) != "one" {
		t.Fatalf("the backward page: %q", messages(back.Events))
	}
	if _, err := c.GetLogEvents(ctx, &cloudwatchlogs.GetLogEventsInput{LogGroupName: aws.String("/aws/lambda-microvms/a"), LogStreamName: aws.String("build-9")}); !errors.As(err, new(*cwtypes.ResourceNotFoundException)) {
		t.Fatalf("GetLogEvents of a missing stream: %v", err)
	}

	// What `aws logs tail` sends: the group by ARN, streams named.
	f, err := c.FilterLogEvents(ctx, &cloudwatchlogs.FilterLogEventsInput{LogGroupIdentifier: aws.String("arn:aws:logs:us-east-1:123456789012:log-group:/aws/lambda-microvms/a"), LogStreamNames: []string{"build-2"}})
	if err != nil || len(f.Events) != 2 || aws.ToString(f.Events[0].Message) != "four" {
		t.Fatalf("FilterLogEvents by ARN and stream: %+v %v", f, err)
	}
}

// Catches, through boto3 and botocore's own CloudWatch Logs model (not one
// this project wrote): an answer with a member the model does not have, or
// one missing the members a reader uses, and paginators that do not page.
// EMULATOR_BOTO3_STRICT=1 fails instead of skipping without boto3.
func TestBoto3ReadsTheLogsSlice(t *testing.T) {
	python := "python3"
	if p := os.Getenv("EMULATOR_PYTHON"); p != "" {
		python = p
	}
	if err := exec.Command(python, "-c", "import boto3").Run(); err != nil {
		if os.Getenv("EMULATOR_BOTO3_STRICT") == "1" {
			t.Fatalf("python3 with boto3 is needed (apt-get install python3-boto3): %v", err)
		}
		t.Skip("python3 with boto3 is not installed")
	}
	_, base := logsFixture(t)
	cmd := exec.CommandContext(t.Context(), python, "-c", boto3LogsScript)
	cmd.Env = append(os.Environ(), "MICROVMS_EMULATOR_URL="+base, "AWS_CONFIG_FILE=/dev/null", "AWS_SHARED_CREDENTIALS_FILE=/dev/null",
		"AWS_ACCESS_KEY_ID=AKIDEMULATOR", "AWS_SECRET_ACCESS_KEY=emulator-secret", "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "logs: 5 reads inside the model") {
		t.Fatalf("the boto3 logs reads failed: %v", err)
	}
}

const boto3LogsScript = `
import os, sys, boto3
c = boto3.client("logs", region_name="us-east-1", endpoint_url=os.environ["MICROVMS_EMULATOR_URL"])
model = c.meta.service_model

def check(op, resp, need):
    """Every member of resp is in op's output shape, recursively; need are
    top-level members a reader uses."""
    def walk(shape, v, where):
        t = shape.type_name
        if t == "structure":
            assert isinstance(v, dict), where
            for k, x in v.items():
                if k == "ResponseMetadata" and where == op:
                    continue
                assert k in shape.members, "%s.%s is not in the model" % (where, k)
                walk(shape.members[k], x, where + "." + k)
        elif t == "list":
            assert isinstance(v, list), where
            for i, x in enumerate(v):
                walk(shape.member, x, "%s[%d]" % (where, i))
    walk(model.operation_model(op).output_shape, resp, op)
    for k in need:
        assert k in resp, "%s lacks %s" % (op, k)

groups = []
for page in c.get_paginator("describe_log_groups").paginate(logGroupNamePrefix="/aws/lambda-microvms/", PaginationConfig={"PageSize": 1}):
    check("DescribeLogGroups", page, ["logGroups"])
    groups += [g["logGroupName"] for g in page["logGroups"]]
assert groups == ["/aws/lambda-microvms/a", "/aws/lambda-microvms/b"], groups

streams = []
for page in c.get_paginator("describe_log_streams").paginate(logGroupName="/aws/lambda-microvms/a", PaginationConfig={"PageSize": 1}):
    check("DescribeLogStreams", page, ["logStreams"])
    streams += [s["logStreamName"] for s in page["logStreams"]]
assert streams == ["build-1", "build-2"], streams

r = c.get_log_events(logGroupName="/aws/lambda-microvms/a", logStreamName="build-1", startFromHead=True)
check("GetLogEvents", r, ["events", "nextForwardToken", "nextBackwardToken"])
assert [e["message"] for e in r["events"]] == ["one", "two", "three"], r["events"]

msgs = []
for page in c.get_paginator("filter_log_events").paginate(logGroupName="/aws/lambda-microvms/a", PaginationConfig={"PageSize": 2}):
    check("FilterLogEvents", page, ["events"])
    msgs += [e["message"] for e in page["events"]]
assert msgs == ["one", "two", "three", "four", "five"], msgs

try:
    c.get_log_events(logGroupName="/aws/lambda-microvms/a", logStreamName="nope")
    sys.exit("a missing stream was answered")
except c.exceptions.ResourceNotFoundException:
    pass
print("logs: 5 reads inside the model")
`
