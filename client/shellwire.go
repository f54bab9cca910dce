package client

import (
	"encoding/json"
	"errors"
	"fmt"

	"golang.org/x/net/websocket"

	"github.com/microvms/microvms/gen/taxonomy"
)

// ShellFrame is one WebSocket message of the shell endpoint, decoded
// (finding shell-endpoint): terminal bytes travel in binary frames, and a
// text frame is a JSON control message (session_init from the endpoint,
// resize from the caller). A text frame that is not a control message the
// endpoint knows is typed into the shell as keys, as the platform does.
type ShellFrame struct {
	// Data is the terminal bytes of a binary frame, or a text frame's
	// bytes when it is not a known control message.
	Data []byte
	// Control is the control message's type ("" for bytes).
	Control   string
	SessionID string
	Rows      uint16
	Cols      uint16
}

// shellControl is the JSON of a control frame.
type shellControl struct {
	Type      string `json:"type"`
	SessionID string `json:"session_id,omitempty"`
	Cols      int    `json:"cols,omitempty"`
	Rows      int    `json:"rows,omitempty"`
}

// errShellFrameTooLong is a frame over taxonomy.MaxShellFrameBytes.
var errShellFrameTooLong = errors.New("shell frame longer than the bound")

// DecodeShellFrame reads one received frame. Bytes past
// taxonomy.MaxShellFrameBytes are refused (the WebSocket reader holds the
// same bound, so this only guards a caller feeding frames itself).
func DecodeShellFrame(text bool, payload []byte) (ShellFrame, error) {
	if len(payload) > taxonomy.MaxShellFrameBytes {
		return ShellFrame{}, fmt.Errorf("%w: %d bytes", errShellFrameTooLong, len(payload))
	}
	if !text {
		return ShellFrame{Data: payload}, nil
	}
	var c shellControl
	if json.Unmarshal(payload, &c) == nil {
		switch c.Type {
		case taxonomy.ShellSessionInit:
			return ShellFrame{Control: c.Type, SessionID: c.SessionID}, nil
		case taxonomy.ShellResize:
			if c.Rows < 1 || c.Rows > 0xffff || c.Cols < 1 || c.Cols > 0xffff {
				return ShellFrame{}, fmt.Errorf("resize to %dx%d: rows and cols must be 1..65535", c.Rows, c.Cols)
			}
			return ShellFrame{Control: c.Type, Rows: uint16(c.Rows), Cols: uint16(c.Cols)}, nil
		}
	}
	// Measured: an unknown control frame reaches the shell as keys.
	return ShellFrame{Data: payload}, nil
}

// ShellResizeFrame is the text frame that sizes the terminal.
func ShellResizeFrame(rows, cols uint16) []byte {
	b, _ := json.Marshal(shellControl{Type: taxonomy.ShellResize, Cols: int(cols), Rows: int(rows)})
	return b
}

// ShellSessionInitFrame is the text frame the endpoint sends first.
func ShellSessionInitFrame(id string) []byte {
	b, _ := json.Marshal(shellControl{Type: taxonomy.ShellSessionInit, SessionID: id})
	return b
}

// ShellCodec sends and receives shell frames over x/net/websocket keeping
// the text/binary distinction: Send takes a ShellOut, Receive fills a
// *ShellIn.
var ShellCodec = websocket.Codec{
	Marshal: func(v any) ([]byte, byte, error) {
		o, ok := v.(ShellOut)
		if !ok {
			return nil, 0, websocket.ErrNotSupported
		}
		if o.Text {
			return o.Data, websocket.TextFrame, nil
		}
		return o.Data, websocket.BinaryFrame, nil
	},
	Unmarshal: func(data []byte, payloadType byte, v any) error {
		in, ok := v.(*ShellIn)
		if !ok {
			return websocket.ErrNotSupported
		}
		in.Text, in.Data = payloadType == websocket.TextFrame, append([]byte(nil), data...)
		return nil
	},
}

// ShellOut is a frame to send; ShellIn a frame received.
type ShellOut struct {
	Text bool
	Data []byte
}

// ShellIn is a frame received through ShellCodec.
type ShellIn = ShellOut
