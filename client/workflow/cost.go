package workflow

import (
	"context"
	"fmt"
	"time"

	"github.com/shopspring/decimal"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cost"
	"github.com/microvms/microvms/client/sandbox"
)

// Cost prices what a run measured with the pinned rate table.
func Cost(label string, size client.SizeClass, region client.Region, buildFor, ranFor time.Duration, built, launched bool) (cost.Report, error) {
	u := cost.Usage{Launched: launched}
	var err error
	if ranFor > 0 {
		if u.Running, err = cost.MeasuredDuration(ranFor); err != nil {
			return cost.Report{}, err
		}
	}
	if buildFor > 0 {
		if u.ImageBuild, err = cost.MeasuredDuration(buildFor); err != nil {
			return cost.Report{}, err
		}
	}
	if built {
		// A built image is stored: its size is unknown here, so the
		// baseline memory stands in, as the reference does.
		u.ImageGB = decimal.NewFromInt(int64(size.BaselineMiB())).Div(decimal.NewFromInt(1024))
	}
	return cost.RunReport(label, size, u, cost.Pinned(region), time.Now())
}

// fleetCost is the fleet's one report: every MicroVM priced from the
// platform's record of it, and the image the fleet built (its build
// unpriced, its storage at the retention floor), summed.
func fleetCost(ctx context.Context, fleet sandbox.FleetReport, name string, size client.SizeClass, region client.Region, buildFor time.Duration, built, launched bool) (cost.Report, error) {
	rates := cost.Pinned(region)
	ctx = context.WithoutCancel(ctx)
	var reports []cost.Report
	if launched {
		rs, err := fleet.Costs(ctx, rates)
		if err != nil {
			return cost.Report{}, err
		}
		reports = append(reports, rs...)
		if len(rs) > 0 {
			size = rs[0].Size
		}
	}
	if built {
		u := cost.Usage{ImageGB: decimal.NewFromInt(int64(size.BaselineMiB())).Div(decimal.NewFromInt(1024))}
		if buildFor > 0 {
			var err error
			if u.ImageBuild, err = cost.MeasuredDuration(buildFor); err != nil {
				return cost.Report{}, err
			}
		}
		r, err := cost.RunReport("image "+name, size, u, rates, time.Now())
		if err != nil {
			return cost.Report{}, err
		}
		reports = append(reports, r)
	}
	return cost.Sum(fmt.Sprintf("fleet of %d from %s", len(fleet.Outcomes), name), reports...)
}
