package ssetest

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/microvms/microvms/gen/protocol"
)

// OutputFrame is one output event carrying data from offset on stream.
func OutputFrame(offset uint64, stream protocol.StreamKind, data []byte) string {
	b, _ := json.Marshal(protocol.OutputEvent{Offset: offset, Stream: stream, Output: base64.StdEncoding.EncodeToString(data)})
	return fmt.Sprintf("event: output\nid: %d\ndata: %s\n\n", offset+uint64(len(data)), b)
}

// ExitFrame is the exit event of a child that exited with code after total
// bytes of output.
func ExitFrame(code int32, total uint64) string {
	b, _ := json.Marshal(protocol.ExitEvent{ExitCode: &code, Offset: total})
	return fmt.Sprintf("event: exit\nid: %d\ndata: %s\n\n", total, b)
}

// GapFrame is a gap event: [from, to) was lost.
func GapFrame(from, to uint64) string {
	b, _ := json.Marshal(protocol.GapEvent{From: from, To: to})
	return fmt.Sprintf("event: gap\nid: %d\ndata: %s\n\n", to, b)
}
