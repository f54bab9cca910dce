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

// LambdaMicrovms is api/lambda-microvms.yaml, the control plane's REST-JSON
// API transcribed from the Smithy model.
//
//go:embed lambda-microvms.yaml
var LambdaMicrovms []byte

// SmithyModel is api/lambda-microvms.json, the AWS Smithy model (JSON AST) of
// Lambda MicroVMs that api/lambda-microvms.yaml is checked against. It lives
// in the repository so the cross-check runs on every clone.
//
//go:embed lambda-microvms.json
var SmithyModel []byte
