// Package testguest holds what tests run inside a guest to give it a
// server to reach: files embedded so every test package uses one copy. It
// is test support only and must never be imported by a product package.
package testguest

import _ "embed"

// WSEchoPy is a minimal RFC 6455 echo server on python3's standard library
// (a guest has no websocket package): it answers the upgrade, then echoes
// each text frame prefixed with "echo:" until a close frame.
//
//go:embed wsecho.py
var WSEchoPy string
