//go:build !linux

package guestinit

// Main does nothing where guests are not confined locally.
func Main() {}
