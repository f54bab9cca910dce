package emulator

import (
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
)

// DescribeLogGroups for `microvm gc` and `ls --all`: the log groups the
// emulated service wrote, by name prefix, in CloudWatch Logs' own
// awsJson1.1 shapes (the members that operation documents). A group's
// creation time is its first event's.

type describeLogGroupsRequest struct {
	LogGroupNamePrefix *string `json:"logGroupNamePrefix,omitempty"`
	NextToken          *string `json:"nextToken,omitempty"`
	Limit              *int    `json:"limit,omitempty"`
}

type describedLogGroup struct {
	LogGroupName string `json:"logGroupName"`
	Arn          string `json:"arn"`
	CreationTime int64  `json:"creationTime"`
	StoredBytes  int64  `json:"storedBytes"`
}

func (s *Server) describeLogGroups(w http.ResponseWriter, body []byte) {
	var req describeLogGroupsRequest
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeLogsError(w, http.StatusBadRequest, "InvalidParameterException", "could not parse the request: "+err.Error())
		return
	}
	limit := 50
	if req.Limit != nil {
		if *req.Limit < 1 || *req.Limit > 50 {
			writeLogsError(w, http.StatusBadRequest, "InvalidParameterException", "1 validation error detected: Value at 'limit' failed to satisfy constraint: Member must have value between 1 and 50")
			return
		}
		limit = *req.Limit
	}
	prefix := ""
	if req.LogGroupNamePrefix != nil {
		prefix = *req.LogGroupNamePrefix
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	names := slices.Sorted(mapKeys(s.logs))
	start := 0
	if req.NextToken != nil {
		n, err := strconv.Atoi(*req.NextToken)
		if err != nil || n < 0 || n > len(names) {
			writeLogsError(w, http.StatusBadRequest, "InvalidParameterException", "The specified nextToken is invalid.")
			return
		}
		start = n
	}
	out := struct {
		LogGroups []describedLogGroup `json:"logGroups"`
		NextToken *string             `json:"nextToken,omitempty"`
	}{LogGroups: []describedLogGroup{}}
	for i := start; i < len(names); i++ {
		name := names[i]
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		if len(out.LogGroups) == limit {
			out.NextToken = ptr(strconv.Itoa(i))
			break
		}
		g := describedLogGroup{LogGroupName: name, Arn: "arn:aws:logs:" + s.opt.Region + ":" + s.opt.Account + ":log-group:" + name + ":*"}
		if ev := s.logs[name]; len(ev) > 0 {
			g.CreationTime = ev[0].at.UnixMilli()
		}
		for _, e := range s.logs[name] {
			g.StoredBytes += int64(len(e.message))
		}
		out.LogGroups = append(out.LogGroups, g)
	}
	w.Header().Set("Content-Type", "application/x-amz-json-1.1")
	_ = json.NewEncoder(w).Encode(out)
}
