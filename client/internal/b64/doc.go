// Package b64 is the client's base64 decoder for the exec stream's output
// payloads: standard, padded base64, decoded with vector instructions where
// the CPU has them.
//
// It must never judge input differently from base64.StdEncoding.Decode (same
// count, bytes and error), save CR and LF, which it refuses where the
// standard decoder skips them; and it must never write outside dst.
package b64
