package render

import (
	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/workflow"
	"github.com/microvms/microvms/gen/cliapi"
)

// FleetData is a fleet's result as the microvm.run.fleet envelope carries
// it: `run --count` and the engine's run_many answer the same bytes.
func FleetData(r workflow.FleetResult, count, parallel int) cliapi.RunFleetData {
	out := cliapi.RunFleetData{Count: int64(count), Parallel: int64(parallel), Runs: []cliapi.FleetRun{}, Leaked: r.Leaked,
		ImageIdentifier: r.ImageARN, ImageName: r.ImageName}
	if out.Leaked == nil {
		out.Leaked = []string{}
	}
	if r.Cost != nil {
		cr := CostReport(*r.Cost)
		out.Cost = &cr
	}
	for _, o := range r.Report.Outcomes {
		fr := cliapi.FleetRun{Index: int64(o.Index), MicrovmID: o.MicrovmID, Stdout: o.Result.Stdout, Stderr: o.Result.Stderr, Truncated: o.Result.Truncated}
		if o.Result.ExitCode != nil {
			v := int64(*o.Result.ExitCode)
			fr.ExitCode = &v
		}
		if o.Err != nil {
			fr.Code, fr.Error = client.KindOf(o.Err).Code(), o.Err.Error()
		}
		out.Runs = append(out.Runs, fr)
	}
	return out
}

// FleetFailure is the fleet's error when runs failed: the worst run's row,
// its finding, and how many of count failed.
func FleetFailure(worst error, failed, count int) *client.Error {
	ce := AsClientError(worst)
	return client.Errorf(client.KindOf(worst), ce.Finding(), "%d of %d runs failed; the worst: %s", failed, count, ce.Message()).WithCause(worst)
}
