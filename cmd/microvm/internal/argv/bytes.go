package argv

import (
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/gen/taxonomy"
)

// The parser turns bytes that are not UTF-8 into U+FFFD, so a word typed
// with them would reach a handler altered: a path that is not the file's,
// a command that is not the one typed. Before parsing, each such byte is
// spelled as NUL, two hex digits, NUL (argv cannot hold a NUL, so the
// spelling never collides with a typed word); after parsing every string the
// parser filled is spelled back. A handler then either carries the bytes as
// typed (a local path) or refuses them by name (an argv the protocol sends
// as JSON text, which cannot hold them).

// ProtectBytes spells every invalid byte of args, and reports whether any was.
func ProtectBytes(args []string) ([]string, bool) {
	out := make([]string, len(args))
	changed := false
	for i, a := range args {
		if utf8.ValidString(a) {
			out[i] = a
			continue
		}
		changed = true
		var b strings.Builder
		for len(a) > 0 {
			r, n := utf8.DecodeRuneInString(a)
			if r == utf8.RuneError && n == 1 {
				fmt.Fprintf(&b, "\x00%02x\x00", a[0])
			} else {
				b.WriteString(a[:n])
			}
			a = a[n:]
		}
		out[i] = b.String()
	}
	return out, changed
}

// unspell turns the spelling back into the bytes.
func unspell(s string) string {
	if !strings.Contains(s, "\x00") {
		return s
	}
	var b strings.Builder
	for len(s) > 0 {
		if len(s) >= 4 && s[0] == 0 && s[3] == 0 {
			var v byte
			if _, err := fmt.Sscanf(s[1:3], "%02x", &v); err == nil {
				b.WriteByte(v)
				s = s[4:]
				continue
			}
		}
		b.WriteByte(s[0])
		s = s[1:]
	}
	return b.String()
}

// RestoreBytes unspells every string the parser filled in v (a pointer to
// the command tree), through structs, pointers and slices.
func RestoreBytes(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			RestoreBytes(v.Elem())
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				RestoreBytes(v.Field(i))
			}
		}
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			RestoreBytes(v.Index(i))
		}
	case reflect.String:
		if v.CanSet() {
			v.SetString(unspell(v.String()))
		}
	}
}

// RequireText refuses a word that is not UTF-8, naming it and the first
// bad byte: what cannot be carried is refused, never replaced.
func RequireText(what string, words []string) error {
	for i, w := range words {
		if utf8.ValidString(w) {
			continue
		}
		at := 0
		for at < len(w) {
			r, n := utf8.DecodeRuneInString(w[at:])
			if r == utf8.RuneError && n == 1 {
				break
			}
			at += n
		}
		return client.Errorf(taxonomy.KindInvalidArg, "", "%s word %d (%q) holds the byte 0x%02x at offset %d, which is not UTF-8: the protocol carries it as JSON text, which cannot hold it, and replacing it would run something else; spell it inside a shell word instead, e.g. microvm exec 'printf \"\\%03o\"'", what, i+1, w, w[at], at, w[at])
	}
	return nil
}
