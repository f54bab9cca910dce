// Package ledger is the local run ledger: one JSON file per run under a state
// directory, naming every resource that run created or may have created. It
// is written before each billable step and updated after, so a process killed
// between the two still leaves a record of what may be billing and by what
// identifier to clean it up.
//
// It reads the records the reference CLI (microvms-cli) writes as well:
// camelCase keys (runId, region, imageIdentifier, imageName, microvmId,
// leaked) and no steps. The differences are deliberate: this ledger writes
// snake_case keys with every billable step, and keeps a closed record
// (closed: true) where the reference deletes the file of a clean run, so
// `microvm ls` can show what ran; Close rewrites a reference record in this
// format when a later terminate closes it.
//
// What it must never do: hold a secret (no agent or proxy token, no payload),
// delete a record that still names a live or unconfirmed resource, or make a
// caller's operation fail because a cloud call failed — a failed write of the
// ledger itself is the only error it returns.
package ledger

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/microvms/microvms/gen/protocol"
)

// StepState is where one billable step stands.
type StepState string

// A step is recorded Started before the call and Done or Failed after. A step
// left Started means the process died mid-call: the resource may exist.
const (
	Started StepState = "started"
	Done    StepState = "done"
	Failed  StepState = "failed"
)

// Step is one billable call and its outcome.
type Step struct {
	Op     string    `json:"op"`               // e.g. "CreateMicrovmImage", "RunMicrovm"
	Target string    `json:"target,omitempty"` // the identifier it acts on, once known
	State  StepState `json:"state"`
	Error  string    `json:"error,omitempty"`
	At     time.Time `json:"at"`
}

// Run is one ledger file. Resource fields are filled in as soon as the
// identifier is known, before the next step starts.
type Run struct {
	ID          string    `json:"id"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	Region      string    `json:"region,omitempty"`
	Image       string    `json:"image,omitempty"`
	ImageARN    string    `json:"image_arn,omitempty"`
	ImageOwned  bool      `json:"image_owned,omitempty"` // this run created the image, so its teardown may delete it
	ArtifactURI string    `json:"artifact_uri,omitempty"`
	LogGroup    string    `json:"log_group,omitempty"`
	MicrovmID   string    `json:"microvm_id,omitempty"`
	Steps       []Step    `json:"steps"`
	// Leaked names what teardown could not delete.
	Leaked []string `json:"leaked,omitempty"`
	// Closed is set once teardown confirmed nothing of this run is left.
	Closed bool `json:"closed"`
	// PID is the process that began the run, so a reader can tell a run
	// still going in another process from one whose process ended.
	PID int `json:"pid,omitempty"`
	// BaselineMiB is the size class the MicroVM was launched with, so the
	// run can be priced again later (microvm cost ID).
	BaselineMiB int `json:"baseline_mib,omitempty"`
	// Running is when the MicroVM was RUNNING, as this process timed it:
	// what its running cost is billed over.
	Running []Span `json:"running,omitempty"`
	// Commands are the commands the run executed, each with its usage, so
	// the running cost can be split over them (microvm cost ID --by-command).
	Commands []Command `json:"commands,omitempty"`
}

// Span is a stretch of wall-clock time.
type Span struct {
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
}

// Command is one command a run executed: when, its outcome, and what it
// used as the daemon measured it. It holds the command line, which is the
// caller's own text; never an environment value or a token.
type Command struct {
	ExecID    string              `json:"exec_id"`
	Command   string              `json:"command"`
	Start     time.Time           `json:"start"`
	End       time.Time           `json:"end"`
	ExitCode  *int32              `json:"exit_code,omitempty"`
	Signal    *int32              `json:"signal,omitempty"`
	OOMKilled bool                `json:"oom_killed,omitempty"`
	Usage     *protocol.ExecUsage `json:"usage,omitempty"`
}

// Ledger is a state directory of run files.
type Ledger struct {
	dir string
	now func() time.Time
}

// Open uses dir (created 0700 if missing) as the ledger's directory.
func Open(dir string, now func() time.Time) (*Ledger, error) {
	if now == nil {
		now = time.Now
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	return &Ledger{dir: dir, now: now}, nil
}

// Record is an open run being written.
type Record struct {
	l   *Ledger
	mu  sync.Mutex
	run Run
}

// Begin creates a new run file and writes it before returning, so a run
// exists on disk before its first billable step.
func (l *Ledger) Begin(region string) (*Record, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("ledger: %w", err)
	}
	t := l.now().UTC()
	r := &Record{l: l, run: Run{
		ID:        t.Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:]),
		CreatedAt: t, UpdatedAt: t, Region: region, Steps: []Step{}, PID: os.Getpid(),
	}}
	return r, r.writeLocked()
}

// Snapshot is a copy of the run as last written.
func (r *Record) Snapshot() Run {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.run
	c.Steps = append([]Step(nil), r.run.Steps...)
	c.Leaked = append([]string(nil), r.run.Leaked...)
	return c
}

// Path is the run's file.
func (r *Record) Path() string { return filepath.Join(r.l.dir, r.run.ID+".json") }

// Update applies f to the run and writes it.
func (r *Record) Update(f func(*Run)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.run)
	return r.writeLocked()
}

// Before records op as started and writes the file; call it before the
// billable call. The returned after records the outcome and writes again.
func (r *Record) Before(op, target string) (after func(target string, err error) error, werr error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	i := len(r.run.Steps)
	r.run.Steps = append(r.run.Steps, Step{Op: op, Target: target, State: Started, At: r.l.now().UTC()})
	if err := r.writeLocked(); err != nil {
		return nil, err
	}
	return func(target string, err error) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		s := &r.run.Steps[i]
		if target != "" {
			s.Target = target
		}
		s.State, s.At = Done, r.l.now().UTC()
		if err != nil {
			s.State, s.Error = Failed, err.Error()
		}
		return r.writeLocked()
	}, nil
}

func (r *Record) writeLocked() error {
	r.run.UpdatedAt = r.l.now().UTC()
	b, err := json.MarshalIndent(&r.run, "", "  ")
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	// Write-then-rename, so a crash mid-write leaves the previous version
	// rather than a truncated file nobody can read.
	tmp, err := os.CreateTemp(r.l.dir, ".run-*")
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	_, werr := tmp.Write(append(b, '\n'))
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("ledger: %w", err)
	}
	if err := os.Rename(tmp.Name(), r.Path()); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("ledger: %w", err)
	}
	return nil
}

// Open lists the runs not closed, oldest first: what may still be billing.
// An unreadable run file is an error here, since it may name a live resource.
func (l *Ledger) Open() ([]Run, error) {
	runs, unreadable, err := List(l.dir)
	if err != nil {
		return nil, err
	}
	if len(unreadable) > 0 {
		return nil, fmt.Errorf("ledger: unreadable run files: %s", strings.Join(unreadable, ", "))
	}
	var out []Run
	for _, r := range runs {
		if !r.Closed {
			out = append(out, r)
		}
	}
	return out, nil
}

// List reads every run under dir, oldest first, without creating dir (a
// missing directory has no runs). Files that do not parse are named in
// unreadable rather than hidden: each may be a run that leaked.
func List(dir string) (runs []Run, unreadable []string, err error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("ledger: %w", err)
	}
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, nil, fmt.Errorf("ledger: %w", err)
		}
		r, ok := decodeRun(b)
		if !ok {
			unreadable = append(unreadable, e.Name())
			continue
		}
		if r.ID == "" {
			r.ID = strings.TrimSuffix(e.Name(), ".json")
		}
		runs = append(runs, r)
	}
	sort.Slice(runs, func(i, j int) bool { return runs[i].CreatedAt.Before(runs[j].CreatedAt) })
	return runs, unreadable, nil
}

// DefaultDir is where runs are recorded when no directory is named:
// $MICROVM_STATE_DIR, else $XDG_STATE_HOME/microvm/runs, else
// ~/.microvm/runs, so a run's record outlives the shell that made it.
func DefaultDir() (string, error) {
	if d := os.Getenv("MICROVM_STATE_DIR"); d != "" {
		return d, nil
	}
	if x := os.Getenv("XDG_STATE_HOME"); x != "" {
		return filepath.Join(x, "microvm", "runs"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("ledger: no state directory: %w", err)
	}
	return filepath.Join(home, ".microvm", "runs"), nil
}

// referenceRun is a record the reference CLI (microvms-cli) writes: camelCase
// keys, no steps, no timestamps, and a file that exists only while
// something is outstanding (it deletes the file of a clean run).
type referenceRun struct {
	RunID           string   `json:"runId"`
	Region          string   `json:"region"`
	ImageIdentifier *string  `json:"imageIdentifier"`
	ImageName       *string  `json:"imageName"`
	MicrovmID       *string  `json:"microvmId"`
	Leaked          []string `json:"leaked"`
}

// decodeRun reads a run file in this package's format or the reference
// CLI's. A reference record is open, since its file outlives a run only
// while something may still bill; its runId ("<epoch>-<pid>") dates it.
func decodeRun(b []byte) (Run, bool) {
	var probe map[string]json.RawMessage
	if json.Unmarshal(b, &probe) != nil || probe == nil {
		return Run{}, false
	}
	if _, ref := probe["runId"]; !ref {
		var r Run
		if json.Unmarshal(b, &r) != nil {
			return Run{}, false
		}
		return r, true
	}
	var rr referenceRun
	if json.Unmarshal(b, &rr) != nil {
		return Run{}, false
	}
	r := Run{ID: rr.RunID, Region: rr.Region, Steps: []Step{}, Leaked: rr.Leaked}
	if rr.ImageIdentifier != nil {
		r.ImageARN = *rr.ImageIdentifier
	}
	if rr.ImageName != nil {
		r.Image = *rr.ImageName
	}
	if rr.MicrovmID != nil {
		r.MicrovmID = *rr.MicrovmID
	}
	if epoch, _, ok := strings.Cut(rr.RunID, "-"); ok {
		var sec int64
		if _, err := fmt.Sscan(epoch, &sec); err == nil {
			r.CreatedAt = time.Unix(sec, 0).UTC()
			r.UpdatedAt = r.CreatedAt
		}
	}
	return r, true
}

// Close records the teardown of run id under dir, done by a later process
// than the one that wrote it (microvm terminate): leaked names what is
// still left, and the run is closed when nothing is. A reference-format
// record is rewritten in this package's format.
func Close(dir, id string, leaked []string) error {
	path := filepath.Join(dir, id+".json")
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("ledger: %w", err)
	}
	run, ok := decodeRun(b)
	if !ok {
		return fmt.Errorf("ledger: %s is unreadable", path)
	}
	l, err := Open(dir, nil)
	if err != nil {
		return err
	}
	r := &Record{l: l, run: run}
	r.run.ID = id
	if r.run.Steps == nil {
		r.run.Steps = []Step{}
	}
	r.run.Leaked = append([]string(nil), leaked...)
	r.run.Closed = len(leaked) == 0
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.writeLocked()
}
