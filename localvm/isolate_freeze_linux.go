//go:build linux

package localvm

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"time"
)

// waitStopped polls until every pid is stopped (T, t), a zombie or gone,
// bounded by limit.
func waitStopped(pids []int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for _, pid := range pids {
		for {
			st := procStateOf(pid)
			if st == "T" || st == "t" || st == "Z" || st == "" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the guest's process %d did not stop within %s (state %s)", pid, limit, st)
			}
			time.Sleep(time.Millisecond)
		}
	}
	return nil
}

// procStateOf is the state letter of /proc/PID/stat, or "" for a process
// that is gone.
func procStateOf(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || i+3 > len(b) {
		return ""
	}
	return string(b[i+2])
}
