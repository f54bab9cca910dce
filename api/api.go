// Package api holds the contracts: the only place a wire field is declared.
// Everything under gen/ and docs/schema.json is generated from the YAML here.
// It must never hold behaviour: it embeds the YAML for tests and tools, and
// code that acts on a contract imports the generated packages instead.
package api

import _ "embed"

// OpenAPI is api/openapi.yaml, the OpenAPI 3.0.3 description of agentd protocol v1.
//
//go:embed openapi.yaml
var OpenAPI []byte
