package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs"
	cwtypes "github.com/aws/aws-sdk-go-v2/service/cloudwatchlogs/types"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/client/ledger"
	"github.com/microvms/microvms/gen/taxonomy"
)

// ImageDeletion is whether teardown deleted the image: not asked, not this
// run's to delete, deleted, or failed. Distinct values, because "not
// deleted" must not read as "failed" when nobody asked, as "not asked" when
// the caller asked about an image it did not build, nor as "deleted" when
// the call failed.
type ImageDeletion string

// The outcomes.
const (
	ImageNotAsked ImageDeletion = "not_asked"
	// ImageNotOwned: DeleteImage was asked, but this run did not build the
	// image (Options.ImageOwned false: a reused, attached or shared image),
	// so it was kept.
	ImageNotOwned ImageDeletion = "not_owned"
	ImageDeleted  ImageDeletion = "deleted"
	ImageFailed   ImageDeletion = "failed"
)

// Leak is one resource teardown could not delete, by the identifier a person
// or a later run needs to delete it.
type Leak struct {
	Kind   string `json:"kind"` // "microvm", "image", "log_group"
	ID     string `json:"id"`
	Reason string `json:"reason"`
}

func (l Leak) String() string { return l.Kind + " " + l.ID + ": " + l.Reason }

// TeardownReport says what teardown did. It replaces an error: teardown
// always finishes every step it can, and what it could not do is listed.
type TeardownReport struct {
	MicrovmID         string        `json:"microvm_id,omitempty"`
	MicrovmTerminated bool          `json:"microvm_terminated"`
	ImageDeleted      ImageDeletion `json:"image_deleted"`
	LogGroupDeleted   bool          `json:"log_group_deleted"`
	Leaked            []Leak        `json:"leaked,omitempty"`
}

// Clean reports whether nothing leaked.
func (r TeardownReport) Clean() bool { return len(r.Leaked) == 0 }

// TeardownOptions choose what besides the VM is deleted.
type TeardownOptions struct {
	// DeleteImage deletes the image (only one this run built: ImageOwned).
	DeleteImage bool
	// DeleteLogGroup deletes the image's build log group, which the service
	// leaves behind after the image is gone.
	DeleteLogGroup bool
}

// teardownBudget bounds a whole teardown, whatever the caller's context.
const teardownBudget = 5 * time.Minute

// Terminate tears the sandbox down: the VM, then (if asked) the image and its
// build log group. It never returns an error; a failed step is a Leak in the
// report, named so it can still be cleaned up. Call it on a nil-error and an
// error Launch alike, and on a nil *Sandbox (it reports nothing to do).
func (s *Sandbox) Terminate(ctx context.Context, o TeardownOptions) TeardownReport {
	rep := TeardownReport{ImageDeleted: ImageNotAsked}
	if s == nil {
		return rep
	}
	// Teardown runs exactly when the caller's context has often just been
	// cancelled (an interrupt); inheriting that cancellation would report
	// every resource as leaked without trying. It gets its own budget instead.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), teardownBudget)
	defer cancel()
	s.op.Lock()
	defer s.op.Unlock()
	rep.MicrovmID = s.id
	if s.id != "" {
		if err := s.terminateVM(ctx); err != nil {
			rep.Leaked = append(rep.Leaked, Leak{"microvm", s.id, err.Error()})
		} else {
			rep.MicrovmTerminated = true
		}
	}
	if o.DeleteImage {
		switch {
		case !s.opts.ImageOwned:
			// Someone else's image (a reused one, say) is never deleted here.
			rep.ImageDeleted = ImageNotOwned
		case !rep.MicrovmTerminated && s.id != "":
			rep.ImageDeleted = ImageFailed
			rep.Leaked = append(rep.Leaked, Leak{"image", s.ref.String(), "not deleted: the MicroVM launched from it may still be running"})
		default:
			if err := s.deleteImage(ctx); err != nil {
				rep.ImageDeleted = ImageFailed
				rep.Leaked = append(rep.Leaked, Leak{"image", s.ref.String(), err.Error()})
			} else {
				rep.ImageDeleted = ImageDeleted
			}
		}
	}
	if o.DeleteLogGroup && s.opts.LogGroup != "" {
		if err := deleteLogGroup(ctx, s.opts.Logs, s.opts.LogGroup); err != nil {
			rep.Leaked = append(rep.Leaked, Leak{"log_group", s.opts.LogGroup, err.Error()})
		} else {
			rep.LogGroupDeleted = true
		}
	}
	if s.opts.Ledger != nil {
		_ = s.opts.Ledger.Update(func(r *ledger.Run) {
			r.Leaked = r.Leaked[:0]
			for _, l := range rep.Leaked {
				r.Leaked = append(r.Leaked, l.Kind+" "+l.ID)
			}
			// A run that keeps its image on purpose still closes: it leaked
			// nothing, it kept something.
			r.Closed = rep.Clean()
		})
	}
	return rep
}

func (s *Sandbox) terminateVM(ctx context.Context) error {
	st := s.Lifecycle()
	if st == Suspending {
		// A terminate is not accepted mid-suspend; let the suspend land.
		if _, err := s.waitFor(ctx, types.MicrovmStateSuspended); err == nil {
			s.apply((*model).suspended)
		}
	}
	s.mu.Lock()
	send, err := s.m.terminate()
	s.mu.Unlock()
	if err != nil {
		return err
	}
	if s.Lifecycle() == Terminated {
		return nil
	}
	if send {
		if err := s.billable(ctx, "TerminateMicrovm", func() error { return s.terminateCall(ctx) }); err != nil {
			// Whether the VM is gone is now unknown; look before calling it leaked.
			if g, gerr := s.getMicrovm(ctx); gerr == nil && isDead(g.State) {
				s.apply((*model).terminated)
				return nil
			}
			return err
		}
	}
	if _, err := s.waitFor(ctx, types.MicrovmStateTerminated); err != nil {
		return err
	}
	s.apply((*model).terminated)
	return nil
}

func deleteLogGroup(ctx context.Context, d LogGroupDeleter, group string) error {
	if d == nil {
		return client.Errorf(taxonomy.KindPrecondition, taxonomy.FindingBuildLogGroupSurvives, "no CloudWatch Logs client was given, so the build log group was left in place")
	}
	_, err := d.DeleteLogGroup(ctx, &cloudwatchlogs.DeleteLogGroupInput{LogGroupName: &group})
	var nf *cwtypes.ResourceNotFoundException
	if errors.As(err, &nf) {
		return nil // already gone, which is what teardown wanted
	}
	if err != nil {
		return fmt.Errorf("DeleteLogGroup: %w", err)
	}
	return nil
}
