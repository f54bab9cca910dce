// Package docs embeds the generated protocol document so agentd can serve it
// at GET /v1/schema. It must never contain anything but generated artifacts
// and prose; schema.json is written by `make gen` only.
package docs

import _ "embed"

// SchemaJSON is docs/schema.json, byte for byte.
//
//go:embed schema.json
var SchemaJSON []byte
