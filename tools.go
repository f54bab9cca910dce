//go:build tools

// Package tools pins the versions of the code generators `make gen` runs, so
// every machine regenerates byte-identical output from the same api/ sources.
package tools

import (
	_ "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen"
	_ "honnef.co/go/tools/cmd/staticcheck"
)
