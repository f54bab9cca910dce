package render

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/cliapi"
	"github.com/microvms/microvms/gen/protocol"
	"github.com/microvms/microvms/gen/taxonomy"
)

// FileEntry is a guest file as every answer shows it (stat, dir, and the
// engine's and the MCP tools' listings): the daemon's record, its time in
// RFC 3339 UTC.
func FileEntry(fi protocol.FileInfo) cliapi.FileEntry {
	return cliapi.FileEntry{Path: fi.Path, Name: fi.Name, Type: string(fi.Type), Size: int64(fi.Size), Mode: fi.Mode,
		UID: int64(fi.UID), GID: int64(fi.GID), Mtime: fi.Mtime.UTC().Format(time.RFC3339Nano), SymlinkTarget: fi.SymlinkTarget}
}

// AsClientError classifies any error into the client's one error type.
func AsClientError(err error) *client.Error {
	var ce *client.Error
	if errors.As(err, &ce) {
		return ce
	}
	return client.Errorf(client.KindOf(err), "", "%s", err.Error()).WithCause(err)
}

// InvalidArg is a local refusal: the request never left this process, so it
// carries no wire kind and the envelope no data.kind.
func InvalidArg(finding taxonomy.FindingID, format string, args ...any) error {
	return client.Errorf(taxonomy.KindInvalidArg, finding, format, args...)
}

// Int64Of is an exit code or signal as the schemas' integers carry it; nil
// stays nil (no code: a signal ended it, or it runs).
func Int64Of(p *int32) *int64 {
	if p == nil {
		return nil
	}
	v := int64(*p)
	return &v
}

// ExecData is an exec's record as the microvm.exec envelope carries it.
func ExecData(r client.Result) cliapi.ExecData {
	d := cliapi.ExecData{ExecID: r.ExecID, Phase: string(r.Phase), Stdout: r.Stdout, Stderr: r.Stderr, Truncated: r.Truncated,
		ExitCode: Int64Of(r.ExitCode), Signal: Int64Of(r.Signal)}
	d.Usage, d.OomKilled = ExecUsage(r.Usage), r.OOMKilled
	return d
}

// ExecUsage is an exec's usage as api/cli.yaml's execUsage shape; nil stays nil.
func ExecUsage(u *protocol.ExecUsage) *cliapi.ExecUsage {
	if u == nil {
		return nil
	}
	out := &cliapi.ExecUsage{Source: string(u.Source), WallSecs: u.WallSecs, UserCPUSecs: u.UserCPUSecs, SystemCPUSecs: u.SystemCPUSecs,
		PeakMemoryBytes: int64(u.PeakMemoryBytes), StdoutBytes: int64(u.StdoutBytes), StderrBytes: int64(u.StderrBytes), Missing: u.Missing}
	if out.Missing == nil {
		out.Missing = []string{}
	}
	if u.PeakProcesses != nil {
		v := int64(*u.PeakProcesses)
		out.PeakProcesses = &v
	}
	return out
}

// UsageLine is the one-line summary `microvm exec` writes to stderr in
// human mode, e.g. "usage: 0.012s wall, 0.004s user + 0.002s sys CPU, peak
// 3.1 MiB, 12 B out, 0 B err (rusage)".
func UsageLine(u *protocol.ExecUsage, oomKilled bool) string {
	s := fmt.Sprintf("usage: %.3fs wall, %.3fs user + %.3fs sys CPU, peak %.1f MiB, %d B out, %d B err",
		u.WallSecs, u.UserCPUSecs, u.SystemCPUSecs, float64(u.PeakMemoryBytes)/(1<<20), u.StdoutBytes, u.StderrBytes)
	if u.PeakProcesses != nil {
		s += fmt.Sprintf(", %d processes at most", *u.PeakProcesses)
	}
	s += " (" + string(u.Source) + ")"
	if oomKilled {
		s += "; OOM-killed: over its memory limit"
	}
	return s
}

// CostReport is a cost report as api/cli.yaml's costReport shape.
func CostReport(r cost.Report) cliapi.CostReport {
	lines := []cliapi.CostLine{}
	for _, l := range r.Lines {
		cl := cliapi.CostLine{Phase: fmt.Sprint(l.Phase), Billing: fmt.Sprint(l.Billing), Quantity: l.Quantity.String(), Unit: l.Unit, Note: Present(l.Note)}
		if usd, ok := l.Amount.Estimate(); ok {
			cl.USD = Present(usd.String()) // omitted, never zero, for an unpriced line
		} else {
			cl.Unpriced = Present(l.Amount.UnpricedReason())
		}
		if !l.Duration.IsZero() {
			cl.Provenance = Present(l.Duration.Provenance().String())
		}
		lines = append(lines, cl)
	}
	t := r.Total()
	return cliapi.CostReport{
		Label:        r.Label,
		Size:         r.Size.String(),
		Lines:        lines,
		TotalUSD:     t.Floor().String(),
		IsLowerBound: t.IsLowerBound(),
		Staleness:    r.Staleness,
		Text:         r.String(),
	}
}

// URLData is a PortURL as the microvm.url envelope carries it, for the CLI
// and the engine alike. The header names are spelled as the platform spells
// them (finding auth-token-header-map), not as Go canonicalizes them.
func URLData(u sandbox.PortURL) cliapi.URLData {
	headers := map[string]string{}
	for k := range u.Headers {
		name := k
		for _, known := range []string{taxonomy.ProxyAuthHeader, taxonomy.ProxyPortHeader} {
			if strings.EqualFold(k, known) {
				name = known
			}
		}
		headers[name] = u.Headers.Get(k)
	}
	return cliapi.URLData{MicrovmID: u.MicrovmID, Port: int64(u.Port), URL: u.URL, Headers: headers, ExpiresAt: u.ExpiresAt.UTC().Format(time.RFC3339),
		Subprotocols: slices.Clone(u.Subprotocols)}
}

// ExitLine is an exec's exit event as a streamed JSON line, the same for
// `microvm exec --stream --json` and the engine's stream.
func ExitLine(e protocol.ExitEvent) cliapi.StreamExitLine {
	return cliapi.StreamExitLine{Event: cliapi.EventExit, ExitCode: Int64Of(e.ExitCode), Signal: Int64Of(e.Signal), Truncated: e.Truncated,
		WritersMayBeAlive: e.WritersMayBeAlive, Offset: int64(e.Offset)}
}
