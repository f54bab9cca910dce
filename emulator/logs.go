package emulator

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// logsStore is the CloudWatch Logs slice's state.
type logsStore struct {
	groups map[string][]logEvent // by log group
}

// The emulator's stand-in for CloudWatch Logs: the build log groups the
// service writes (finding build-logs-location), served on the control
// plane's own listener in the awsJson1.1 protocol CloudWatch Logs speaks, so
// aws-sdk-go-v2's cloudwatchlogs client, boto3 and the AWS CLI read and
// delete them unchanged. The operations served are the ones a build log is
// read and cleaned up with: DescribeLogGroups, DescribeLogStreams,
// GetLogEvents and FilterLogEvents (aws logs describe-log-groups,
// describe-log-streams, get-log-events, tail), and DeleteLogGroup. The
// bodies here are CloudWatch Logs' own wire shapes (service model
// Logs_20140328), which gen/controlplane does not model; they carry members
// those operations document and no others. A group exists from its first
// line; nothing creates an empty one.

// logsTargetPrefix is the X-Amz-Target prefix of the CloudWatch Logs API.
const logsTargetPrefix = "Logs_20140328."

type logEvent struct {
	stream  string
	at      time.Time
	message string
}

// logf appends one line to group, called with s.mu held.
func (s *Server) logf(group, stream, format string, args ...any) {
	if s.cwl.groups == nil {
		s.cwl.groups = map[string][]logEvent{}
	}
	s.cwl.groups[group] = append(s.cwl.groups[group], logEvent{stream: stream, at: s.opt.Now(), message: fmt.Sprintf(format, args...)})
}

// LogLines returns the messages of a log group, oldest first.
func (s *Server) LogLines(group string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.cwl.groups[group] {
		out = append(out, e.message)
	}
	return out
}

// logsIdentifier is how a request names a log group: logGroupName, or
// logGroupIdentifier (a name or the group's ARN, with or without :*).
type logsIdentifier struct {
	LogGroupName       *string `json:"logGroupName,omitempty"`
	LogGroupIdentifier *string `json:"logGroupIdentifier,omitempty"`
}

// group resolves the identifier to a group name; ok is false with a reason
// when neither or both are given.
func (id logsIdentifier) group() (string, string, bool) {
	switch {
	case id.LogGroupName != nil && id.LogGroupIdentifier != nil:
		return "", "logGroupName and logGroupIdentifier are mutually exclusive.", false
	case id.LogGroupName != nil:
		return *id.LogGroupName, "", true
	case id.LogGroupIdentifier != nil:
		v := *id.LogGroupIdentifier
		if strings.HasPrefix(v, "arn:") {
			_, name, found := strings.Cut(v, ":log-group:")
			if !found {
				return "", "logGroupIdentifier is not a log group ARN.", false
			}
			v = strings.TrimSuffix(name, ":*")
		}
		return v, "", true
	}
	return "", "Either logGroupName or logGroupIdentifier must be specified.", false
}

type filterLogEventsRequest struct {
	logsIdentifier
	LogStreamNames      []string `json:"logStreamNames,omitempty"`
	LogStreamNamePrefix *string  `json:"logStreamNamePrefix,omitempty"`
	NextToken           *string  `json:"nextToken,omitempty"`
	Limit               *int     `json:"limit,omitempty"`
	StartTime           *int64   `json:"startTime,omitempty"`
	EndTime             *int64   `json:"endTime,omitempty"`
	FilterPattern       *string  `json:"filterPattern,omitempty"`
}

type filteredLogEvent struct {
	EventID       string `json:"eventId"`
	IngestionTime int64  `json:"ingestionTime"`
	LogStreamName string `json:"logStreamName"`
	Message       string `json:"message"`
	Timestamp     int64  `json:"timestamp"`
}

type filterLogEventsResponse struct {
	Events    []filteredLogEvent `json:"events"`
	NextToken *string            `json:"nextToken,omitempty"`
}

type deleteLogGroupRequest struct {
	LogGroupName string `json:"logGroupName"`
}

type describeLogGroupsRequest struct {
	LogGroupNamePrefix  *string `json:"logGroupNamePrefix,omitempty"`
	LogGroupNamePattern *string `json:"logGroupNamePattern,omitempty"`
	NextToken           *string `json:"nextToken,omitempty"`
	Limit               *int    `json:"limit,omitempty"`
}

// logGroup is CloudWatch Logs' LogGroup shape, with the members the
// emulator knows.
type logGroup struct {
	LogGroupName      string `json:"logGroupName"`
	CreationTime      int64  `json:"creationTime"`
	MetricFilterCount int    `json:"metricFilterCount"`
	Arn               string `json:"arn"`
	LogGroupArn       string `json:"logGroupArn"`
	StoredBytes       int64  `json:"storedBytes"`
	LogGroupClass     string `json:"logGroupClass"`
}

type describeLogGroupsResponse struct {
	LogGroups []logGroup `json:"logGroups"`
	NextToken *string    `json:"nextToken,omitempty"`
}

type describeLogStreamsRequest struct {
	logsIdentifier
	LogStreamNamePrefix *string `json:"logStreamNamePrefix,omitempty"`
	OrderBy             *string `json:"orderBy,omitempty"`
	Descending          *bool   `json:"descending,omitempty"`
	NextToken           *string `json:"nextToken,omitempty"`
	Limit               *int    `json:"limit,omitempty"`
}

// logStream is CloudWatch Logs' LogStream shape (storedBytes, which the
// service documents as deprecated and no longer fills, is left out).
type logStream struct {
	LogStreamName       string `json:"logStreamName"`
	CreationTime        int64  `json:"creationTime"`
	FirstEventTimestamp int64  `json:"firstEventTimestamp"`
	LastEventTimestamp  int64  `json:"lastEventTimestamp"`
	LastIngestionTime   int64  `json:"lastIngestionTime"`
	Arn                 string `json:"arn"`
}

type describeLogStreamsResponse struct {
	LogStreams []logStream `json:"logStreams"`
	NextToken  *string     `json:"nextToken,omitempty"`
}

type getLogEventsRequest struct {
	logsIdentifier
	LogStreamName *string `json:"logStreamName,omitempty"`
	StartTime     *int64  `json:"startTime,omitempty"`
	EndTime       *int64  `json:"endTime,omitempty"`
	NextToken     *string `json:"nextToken,omitempty"`
	Limit         *int    `json:"limit,omitempty"`
	StartFromHead *bool   `json:"startFromHead,omitempty"`
}

type outputLogEvent struct {
	Timestamp     int64  `json:"timestamp"`
	Message       string `json:"message"`
	IngestionTime int64  `json:"ingestionTime"`
}

type getLogEventsResponse struct {
	Events            []outputLogEvent `json:"events"`
	NextForwardToken  string           `json:"nextForwardToken"`
	NextBackwardToken string           `json:"nextBackwardToken"`
}

// The service's page bounds (Logs_20140328: DescribeLogGroups and
// DescribeLogStreams take 1..50, GetLogEvents and FilterLogEvents
// 1..10000).
const (
	logsDescribeMaxLimit = 50
	logsEventsMaxLimit   = 10000
)

func writeLogsError(w http.ResponseWriter, status int, errType, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"__type": errType, "message": msg})
	_, _ = w.Write(b)
}

func writeLogsJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(v)
}

// pageLimit is a request's limit within 1..max, def when absent; ok is
// false for a limit outside the range, which the service refuses.
func pageLimit(limit *int, def, max int) (int, bool) {
	if limit == nil {
		return def, true
	}
	if *limit < 1 || *limit > max {
		return 0, false
	}
	return *limit, true
}

// indexToken reads a nextToken the emulator handed out: an index in 0..n.
func indexToken(tok *string, n int) (int, bool) {
	if tok == nil {
		return 0, true
	}
	i, err := strconv.Atoi(*tok)
	if err != nil || i < 0 || i > n {
		return 0, false
	}
	return i, true
}

func (s *Server) logGroupArn(group string) string {
	return fmt.Sprintf("arn:aws:logs:%s:%s:log-group:%s", s.opt.Region, s.opt.Account, group)
}

// eventsOf copies group's events, reporting whether the group exists.
func (s *Server) eventsOf(group string) ([]logEvent, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	events, ok := s.cwl.groups[group]
	return append([]logEvent(nil), events...), ok
}

// streamsOf summarises a group's events by stream, in name order.
func (s *Server) streamsOf(group string, events []logEvent) []logStream {
	byName := map[string]*logStream{}
	var names []string
	for _, e := range events {
		ms := e.at.UnixMilli()
		st, ok := byName[e.stream]
		if !ok {
			st = &logStream{LogStreamName: e.stream, CreationTime: ms, FirstEventTimestamp: ms, Arn: s.logGroupArn(group) + ":log-stream:" + e.stream}
			byName[e.stream] = st
			names = append(names, e.stream)
		}
		st.LastEventTimestamp, st.LastIngestionTime = ms, ms
	}
	sort.Strings(names)
	out := make([]logStream, 0, len(names))
	for _, n := range names {
		out = append(out, *byName[n])
	}
	return out
}

// serveLogs answers one CloudWatch Logs request; gate has checked that it is
// signed for the logs service.
func (s *Server) serveLogs(w http.ResponseWriter, r *http.Request, body []byte) {
	op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), logsTargetPrefix)
	if s.fault(w, op) {
		return
	}
	strict := func(v any) bool {
		dec := json.NewDecoder(strings.NewReader(string(body)))
		if err := dec.Decode(v); err != nil && err != io.EOF {
			writeLogsError(w, http.StatusBadRequest, "InvalidParameterException", "could not parse the request: "+err.Error())
			return false
		}
		return true
	}
	invalid := func(msg string) { writeLogsError(w, http.StatusBadRequest, "InvalidParameterException", msg) }
	noGroup := func() {
		writeLogsError(w, http.StatusBadRequest, "ResourceNotFoundException", "The specified log group does not exist.")
	}
	switch op {
	case "DescribeLogGroups":
		var req describeLogGroupsRequest
		if !strict(&req) {
			return
		}
		if req.LogGroupNamePrefix != nil && req.LogGroupNamePattern != nil {
			invalid("LogGroup name prefix and LogGroup name pattern are mutually exclusive parameters.")
			return
		}
		limit, ok := pageLimit(req.Limit, logsDescribeMaxLimit, logsDescribeMaxLimit)
		if !ok {
			invalid("limit must be between 1 and 50.")
			return
		}
		s.mu.Lock()
		var groups []logGroup
		for name, events := range s.cwl.groups {
			switch {
			case req.LogGroupNamePrefix != nil && !strings.HasPrefix(name, *req.LogGroupNamePrefix):
				continue
			case req.LogGroupNamePattern != nil && !strings.Contains(strings.ToLower(name), strings.ToLower(*req.LogGroupNamePattern)):
				continue
			}
			g := logGroup{LogGroupName: name, Arn: s.logGroupArn(name) + ":*", LogGroupArn: s.logGroupArn(name), LogGroupClass: "STANDARD"}
			if len(events) > 0 {
				g.CreationTime = events[0].at.UnixMilli()
			}
			for _, e := range events {
				g.StoredBytes += int64(len(e.message))
			}
			groups = append(groups, g)
		}
		s.mu.Unlock()
		sort.Slice(groups, func(i, j int) bool { return groups[i].LogGroupName < groups[j].LogGroupName })
		start, ok := indexToken(req.NextToken, len(groups))
		if !ok {
			invalid("The specified nextToken is invalid.")
			return
		}
		end := min(start+limit, len(groups))
		out := describeLogGroupsResponse{LogGroups: append([]logGroup{}, groups[start:end]...)}
		if end < len(groups) {
			out.NextToken = ptr(strconv.Itoa(end))
		}
		writeLogsJSON(w, out)
	case "DescribeLogStreams":
		var req describeLogStreamsRequest
		if !strict(&req) {
			return
		}
		group, why, ok := req.group()
		if !ok {
			invalid(why)
			return
		}
		orderBy := "LogStreamName"
		if req.OrderBy != nil {
			orderBy = *req.OrderBy
		}
		switch {
		case orderBy != "LogStreamName" && orderBy != "LastEventTime":
			invalid("orderBy must be LogStreamName or LastEventTime.")
			return
		case orderBy == "LastEventTime" && req.LogStreamNamePrefix != nil:
			invalid("Cannot order by LastEventTime with a logStreamNamePrefix.")
			return
		}
		limit, ok := pageLimit(req.Limit, logsDescribeMaxLimit, logsDescribeMaxLimit)
		if !ok {
			invalid("limit must be between 1 and 50.")
			return
		}
		events, ok := s.eventsOf(group)
		if !ok {
			noGroup()
			return
		}
		var streams []logStream
		for _, st := range s.streamsOf(group, events) {
			if req.LogStreamNamePrefix == nil || strings.HasPrefix(st.LogStreamName, *req.LogStreamNamePrefix) {
				streams = append(streams, st)
			}
		}
		if orderBy == "LastEventTime" {
			sort.SliceStable(streams, func(i, j int) bool { return streams[i].LastEventTimestamp < streams[j].LastEventTimestamp })
		}
		if req.Descending != nil && *req.Descending {
			slices.Reverse(streams)
		}
		start, ok := indexToken(req.NextToken, len(streams))
		if !ok {
			invalid("The specified nextToken is invalid.")
			return
		}
		end := min(start+limit, len(streams))
		out := describeLogStreamsResponse{LogStreams: append([]logStream{}, streams[start:end]...)}
		if end < len(streams) {
			out.NextToken = ptr(strconv.Itoa(end))
		}
		writeLogsJSON(w, out)
	case "GetLogEvents":
		var req getLogEventsRequest
		if !strict(&req) {
			return
		}
		group, why, ok := req.group()
		if !ok {
			invalid(why)
			return
		}
		if req.LogStreamName == nil {
			invalid("logStreamName is required.")
			return
		}
		limit, ok := pageLimit(req.Limit, logsEventsMaxLimit, logsEventsMaxLimit)
		if !ok {
			invalid("limit must be between 1 and 10000.")
			return
		}
		all, ok := s.eventsOf(group)
		if !ok {
			noGroup()
			return
		}
		var events []logEvent
		found := false
		for _, e := range all {
			if e.stream != *req.LogStreamName {
				continue
			}
			found = true
			ms := e.at.UnixMilli()
			if (req.StartTime != nil && ms < *req.StartTime) || (req.EndTime != nil && ms >= *req.EndTime) {
				continue
			}
			events = append(events, e)
		}
		if !found {
			writeLogsError(w, http.StatusBadRequest, "ResourceNotFoundException", "The specified log stream does not exist.")
			return
		}
		// Tokens are f/N (the page starting at event N) and b/N (the page
		// ending before N). Without one, the page is the stream's head with
		// startFromHead, else its most recent events, as the service reads.
		// At either end the token handed back is the one passed in, which
		// is how a reader knows it has caught up.
		from, to := 0, 0
		switch {
		case req.NextToken != nil:
			dir, n, _ := strings.Cut(*req.NextToken, "/")
			i, err := strconv.Atoi(n)
			if (dir != "f" && dir != "b") || err != nil || i < 0 || i > len(events) {
				invalid("The specified nextToken is invalid.")
				return
			}
			if dir == "f" {
				from, to = i, min(i+limit, len(events))
			} else {
				from, to = max(0, i-limit), i
			}
		case req.StartFromHead != nil && *req.StartFromHead:
			from, to = 0, min(limit, len(events))
		default:
			from, to = max(0, len(events)-limit), len(events)
		}
		out := getLogEventsResponse{Events: []outputLogEvent{}, NextForwardToken: "f/" + strconv.Itoa(to), NextBackwardToken: "b/" + strconv.Itoa(from)}
		for _, e := range events[from:to] {
			ms := e.at.UnixMilli()
			out.Events = append(out.Events, outputLogEvent{Timestamp: ms, Message: e.message, IngestionTime: ms})
		}
		writeLogsJSON(w, out)
	case "FilterLogEvents":
		var req filterLogEventsRequest
		if !strict(&req) {
			return
		}
		group, why, ok := req.group()
		if !ok {
			invalid(why)
			return
		}
		if len(req.LogStreamNames) > 0 && req.LogStreamNamePrefix != nil {
			invalid("logStreamNames and logStreamNamePrefix are mutually exclusive.")
			return
		}
		limit, ok := pageLimit(req.Limit, logsEventsMaxLimit, logsEventsMaxLimit)
		if !ok {
			invalid("limit must be between 1 and 10000.")
			return
		}
		events, ok := s.eventsOf(group)
		if !ok {
			noGroup()
			return
		}
		start, ok := indexToken(req.NextToken, len(events))
		if !ok {
			invalid("The specified nextToken is invalid.")
			return
		}
		// The token is the index of the next event to look at, so a page of
		// limit matches never skips one that did not fit.
		out := filterLogEventsResponse{Events: []filteredLogEvent{}}
		i := start
		for ; i < len(events) && len(out.Events) < limit; i++ {
			e := events[i]
			ms := e.at.UnixMilli()
			switch {
			case req.StartTime != nil && ms < *req.StartTime, req.EndTime != nil && ms > *req.EndTime:
				continue
			case len(req.LogStreamNames) > 0 && !slices.Contains(req.LogStreamNames, e.stream):
				continue
			case req.LogStreamNamePrefix != nil && !strings.HasPrefix(e.stream, *req.LogStreamNamePrefix):
				continue
			case req.FilterPattern != nil && *req.FilterPattern != "" && !strings.Contains(e.message, strings.Trim(*req.FilterPattern, `"`)):
				continue
			}
			out.Events = append(out.Events, filteredLogEvent{EventID: strconv.Itoa(i), IngestionTime: ms, LogStreamName: e.stream, Message: e.message, Timestamp: ms})
		}
		if i < len(events) {
			out.NextToken = ptr(strconv.Itoa(i))
		}
		writeLogsJSON(w, out)
	case "DeleteLogGroup":
		var req deleteLogGroupRequest
		if !strict(&req) {
			return
		}
		s.mu.Lock()
		_, ok := s.cwl.groups[req.LogGroupName]
		delete(s.cwl.groups, req.LogGroupName)
		s.mu.Unlock()
		if !ok {
			noGroup()
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = io.WriteString(w, "{}")
	default:
		writeLogsError(w, http.StatusBadRequest, "UnknownOperationException", "the emulator serves DescribeLogGroups, DescribeLogStreams, GetLogEvents, FilterLogEvents and DeleteLogGroup only")
	}
}
