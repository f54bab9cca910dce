//go:build tools

// Package tools pins the versions of the tools make runs: the code generators
// of `make gen`, so every machine regenerates byte-identical output from the
// same api/ sources; staticcheck; and go-gremlins, the mutation tester of
// `make mutate`.
package tools

import (
	_ "github.com/go-gremlins/gremlins/cmd/gremlins"
	_ "github.com/oapi-codegen/oapi-codegen/v2/cmd/oapi-codegen"
	_ "honnef.co/go/tools/cmd/staticcheck"
)
