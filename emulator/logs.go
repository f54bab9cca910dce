package emulator

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The emulator's stand-in for CloudWatch Logs: the build log groups the
// service writes (finding build-logs-location), served on the control
// plane's own listener in the awsJson1.1 protocol CloudWatch Logs speaks, so
// aws-sdk-go-v2's cloudwatchlogs client reads and deletes them unchanged.
// Only the operations this project calls exist: FilterLogEvents and
// DeleteLogGroup. The bodies here are CloudWatch Logs' own wire shapes,
// which gen/controlplane does not model; they carry the members those two
// operations document and no others.

// logsTargetPrefix is the X-Amz-Target prefix of the CloudWatch Logs API.
const logsTargetPrefix = "Logs_20140328."

type logEvent struct {
	stream  string
	at      time.Time
	message string
}

// logf appends one line to group, called with s.mu held.
func (s *Server) logf(group, stream, format string, args ...any) {
	if s.logs == nil {
		s.logs = map[string][]logEvent{}
	}
	s.logs[group] = append(s.logs[group], logEvent{stream: stream, at: s.opt.Now(), message: fmt.Sprintf(format, args...)})
}

// LogLines returns the messages of a log group, oldest first.
func (s *Server) LogLines(group string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, e := range s.logs[group] {
		out = append(out, e.message)
	}
	return out
}

type filterLogEventsRequest struct {
	LogGroupName  string  `json:"logGroupName"`
	NextToken     *string `json:"nextToken,omitempty"`
	Limit         *int    `json:"limit,omitempty"`
	StartTime     *int64  `json:"startTime,omitempty"`
	FilterPattern *string `json:"filterPattern,omitempty"`
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

func writeLogsError(w http.ResponseWriter, status int, errType, msg string) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	w.WriteHeader(status)
	b, _ := json.Marshal(map[string]string{"__type": errType, "message": msg})
	_, _ = w.Write(b)
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
	switch op {
	case "FilterLogEvents":
		var req filterLogEventsRequest
		if !strict(&req) {
			return
		}
		s.mu.Lock()
		events, ok := s.logs[req.LogGroupName]
		events = append([]logEvent(nil), events...)
		s.mu.Unlock()
		if !ok {
			writeLogsError(w, http.StatusBadRequest, "ResourceNotFoundException", "The specified log group does not exist.")
			return
		}
		start := 0
		if req.NextToken != nil {
			n, err := strconv.Atoi(*req.NextToken)
			if err != nil || n < 0 || n > len(events) {
				writeLogsError(w, http.StatusBadRequest, "InvalidParameterException", "The specified nextToken is invalid.")
				return
			}
			start = n
		}
		limit := 10000
		if req.Limit != nil && *req.Limit > 0 && *req.Limit < limit {
			limit = *req.Limit
		}
		out := filterLogEventsResponse{Events: []filteredLogEvent{}}
		end := min(start+limit, len(events))
		for i, e := range events[start:end] {
			if req.StartTime != nil && e.at.UnixMilli() < *req.StartTime {
				continue
			}
			if req.FilterPattern != nil && *req.FilterPattern != "" && !strings.Contains(e.message, strings.Trim(*req.FilterPattern, `"`)) {
				continue
			}
			out.Events = append(out.Events, filteredLogEvent{EventID: strconv.Itoa(start + i), IngestionTime: e.at.UnixMilli(), LogStreamName: e.stream, Message: e.message, Timestamp: e.at.UnixMilli()})
		}
		if end < len(events) {
			out.NextToken = ptr(strconv.Itoa(end))
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_ = json.NewEncoder(w).Encode(out)
	case "DeleteLogGroup":
		var req deleteLogGroupRequest
		if !strict(&req) {
			return
		}
		s.mu.Lock()
		_, ok := s.logs[req.LogGroupName]
		delete(s.logs, req.LogGroupName)
		s.mu.Unlock()
		if !ok {
			writeLogsError(w, http.StatusBadRequest, "ResourceNotFoundException", "The specified log group does not exist.")
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.1")
		_, _ = io.WriteString(w, "{}")
	case "DescribeLogGroups":
		s.describeLogGroups(w, body) // logs_groups.go
	default:
		writeLogsError(w, http.StatusBadRequest, "UnknownOperationException", "the emulator serves FilterLogEvents, DescribeLogGroups and DeleteLogGroup only")
	}
}
