package checkpoint

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/microvms/microvms/client"
	"github.com/microvms/microvms/client/cplane"
	"github.com/microvms/microvms/client/lambdamicrovms"
	"github.com/microvms/microvms/client/lambdamicrovms/types"
	"github.com/microvms/microvms/client/sandbox"
	"github.com/microvms/microvms/gen/taxonomy"
)

// A volume is a named chain of checkpoint generations of one directory: a
// sandbox attaching it gets the newest generation laid at the mount path
// (nothing, an empty directory, on first use), and each Sync or the detach
// at terminate saves a new generation. Generations live in a Store of
// their own under the base store's prefix + "volumes/<name>/", so the
// checkpoints' own List never shows them and removing a volume is removing
// that prefix.
//
// One writer at a time: attaching takes a lease, one small object beside
// the generations written with S3's conditional put (If-None-Match "*" to
// take a free lease, If-Match on the ETag read to take over an expired one
// or renew one's own), so of two attaches racing exactly one wins; the
// other is refused with ReasonVolumeLeased naming the holder's MicroVM id.
// A lease names an expiry LeaseTTL after its last renewal: a holder that
// dies without detaching stops renewing, and after the TTL the next attach
// takes the volume over rather than finding it locked for ever, unless
// HolderAlive says the holder MicroVM is still up (a kept one nobody
// renews for): then it stays the holder until it ends.

const (
	// DefaultKeep is how many generations a volume keeps: a new generation
	// beyond it removes the oldest.
	DefaultKeep = 3
	// DefaultLeaseTTL is how long a lease holds after its last renewal.
	DefaultLeaseTTL = 5 * time.Minute
	// maxLeaseBytes bounds a lease object read back from the bucket.
	maxLeaseBytes = 4 << 10
)

// ReasonVolumeLeased: the volume is attached for writing by another live
// sandbox (RefusalError.Detail names its MicroVM id).
const ReasonVolumeLeased Reason = "volume-leased"

var volumeName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`) })

// Mount is one volume attached at one absolute path in the sandbox.
type Mount struct {
	Name string
	Path string
}

// ParseMount reads "NAME:/path", the --volume flag's form.
func ParseMount(s string) (Mount, error) {
	name, p, ok := strings.Cut(s, ":")
	m := Mount{Name: name, Path: p}
	if !ok {
		return m, client.Errorf(taxonomy.KindInvalidArg, "", "volume %q is not NAME:/path", s)
	}
	return m, m.check()
}

func (m Mount) check() error {
	if !volumeName().MatchString(m.Name) {
		return client.Errorf(taxonomy.KindInvalidArg, "", "volume name %q is not [A-Za-z0-9][A-Za-z0-9._-]{0,62}", m.Name)
	}
	if !path.IsAbs(m.Path) || path.Clean(m.Path) != m.Path || m.Path == "/" {
		return client.Errorf(taxonomy.KindInvalidArg, "", "volume path %q must be a clean absolute path other than /", m.Path)
	}
	return nil
}

// Volumes manages volumes in a checkpoint store.
type Volumes struct {
	// Store is the checkpoint store the volumes live under.
	Store *Store
	// Keep is how many generations each volume keeps; zero is DefaultKeep.
	Keep int
	// LeaseTTL is how long a lease holds after its last renewal; zero is
	// DefaultLeaseTTL.
	LeaseTTL time.Duration
	// Now is the leases' and generations' clock; nil is time.Now.
	Now func() time.Time
	// HolderAlive, when set, is asked about a lease past its expiry before
	// it is taken over or its volume removed: a holder MicroVM that is still
	// up (kept by `run --keep`, whose process no longer renews) keeps its
	// lease until it ends, since its files would otherwise be saved over
	// the taker's. HolderAliveOn answers from the control plane; nil trusts
	// the expiry alone.
	HolderAlive func(ctx context.Context, microvmID string) (bool, error)
}

// HolderAliveOn is a Volumes.HolderAlive asking c: a MicroVM the control
// plane does not know, or knows as TERMINATING or TERMINATED, is gone.
func HolderAliveOn(c *lambdamicrovms.Client) func(context.Context, string) (bool, error) {
	return func(ctx context.Context, id string) (bool, error) {
		out, err := c.GetMicrovm(ctx, &lambdamicrovms.GetMicrovmInput{MicrovmIdentifier: aws.String(id)})
		var nf *types.ResourceNotFoundException
		switch {
		case errors.As(err, &nf):
			return false, nil
		case err != nil:
			return false, cplane.SDKError("GetMicrovm "+id+" (the holder of a lapsed volume lease)", err)
		}
		return out.State != types.MicrovmStateTerminated && out.State != types.MicrovmStateTerminating, nil
	}
}

// heldBy reports whether lease l keeps its volume from holder: unexpired,
// or lapsed with its holder MicroVM still up (HolderAlive).
func (v *Volumes) heldBy(ctx context.Context, l *Lease, holder string) (bool, error) {
	if l == nil || l.Holder == "" || l.Holder == holder {
		return false, nil
	}
	if v.now().Before(l.Expires) {
		return true, nil
	}
	if v.HolderAlive == nil {
		return false, nil
	}
	return v.HolderAlive(ctx, l.Holder)
}

// Lease is the lease object's body.
type Lease struct {
	Volume  string    `json:"volume"`
	Holder  string    `json:"holder"`
	Path    string    `json:"path"`
	Expires time.Time `json:"expires"`
}

// VolumeInfo describes one volume for a listing.
type VolumeInfo struct {
	Name string
	// Generations are its manifests, newest first.
	Generations []Manifest
	// Lease is its current lease, nil when none is held (an expired one is
	// reported with Expired set).
	Lease   *Lease
	Expired bool
}

func (v *Volumes) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

func (v *Volumes) keep() int {
	if v.Keep > 0 {
		return v.Keep
	}
	return DefaultKeep
}

func (v *Volumes) ttl() time.Duration {
	if v.LeaseTTL > 0 {
		return v.LeaseTTL
	}
	return DefaultLeaseTTL
}

func (v *Volumes) root() string { return v.Store.prefix() + "volumes/" }

// store is the checkpoint store of one volume's generations.
func (v *Volumes) store(name string) *Store {
	s := *v.Store
	s.Prefix = v.root() + name + "/"
	return &s
}

func (v *Volumes) leaseKey(name string) string { return v.root() + name + "/lease.json" }

// readLease is the lease of name and its ETag; a missing lease is nil.
func (v *Volumes) readLease(ctx context.Context, name string) (*Lease, string, error) {
	out, err := v.Store.S3.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(v.Store.Bucket), Key: aws.String(v.leaseKey(name))})
	if err != nil {
		if notFound(err) {
			return nil, "", nil
		}
		return nil, "", v.Store.platformErr("reading the lease of volume "+name, err)
	}
	defer out.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(out.Body, maxLeaseBytes+1))
	if err != nil {
		return nil, "", v.Store.platformErr("reading the lease of volume "+name, err)
	}
	var l Lease
	if len(raw) > maxLeaseBytes || json.Unmarshal(raw, &l) != nil || l.Holder == "" {
		// A lease this client cannot read holds nobody: treat it as
		// expired so a stray object cannot lock the volume for ever.
		return &Lease{Volume: name}, aws.ToString(out.ETag), nil
	}
	return &l, aws.ToString(out.ETag), nil
}

// preconditionFailed reports S3's answer to a conditional write that lost.
func preconditionFailed(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && (ae.ErrorCode() == "PreconditionFailed" || ae.ErrorCode() == "ConditionalRequestConflict")
}

// putLease writes l conditionally: over no object when etag is "", else
// over the object of that ETag. It returns the new ETag, or won=false when
// another writer got there first.
func (v *Volumes) putLease(ctx context.Context, l Lease, etag string) (string, bool, error) {
	body, err := json.Marshal(l)
	if err != nil {
		return "", false, client.Errorf(taxonomy.KindUnexpected, "", "encoding a lease: %w", err)
	}
	in := &s3.PutObjectInput{Bucket: aws.String(v.Store.Bucket), Key: aws.String(v.leaseKey(l.Volume)), Body: bytes.NewReader(body), ContentType: aws.String("application/json")}
	if etag == "" {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(etag)
	}
	out, err := v.Store.S3.PutObject(ctx, in)
	if err != nil {
		if preconditionFailed(err) || (etag != "" && notFound(err)) {
			return "", false, nil
		}
		return "", false, v.Store.platformErr("writing the lease of volume "+l.Volume, err)
	}
	return aws.ToString(out.ETag), true, nil
}

func leasedBy(l *Lease) error {
	return refusef(ReasonVolumeLeased, "volume %s is attached for writing by MicroVM %s (lease until %s)", l.Volume, l.Holder, l.Expires.UTC().Format(time.RFC3339))
}

// leasedBy is the refusal for a lease heldBy found holding: a lapsed one
// says its holder is still up and what ends the hold.
func (v *Volumes) leasedBy(l *Lease) error {
	if v.now().Before(l.Expires) {
		return leasedBy(l)
	}
	return refusef(ReasonVolumeLeased, "volume %s is attached for writing by MicroVM %s, which is still up though its lease lapsed at %s (nothing renews it since the process that attached it ended): terminate it, which saves a last generation and lets go, or `microvm volume sync %s` to save and renew", l.Volume, l.Holder, l.Expires.UTC().Format(time.RFC3339), l.Holder)
}

// acquire takes name's lease for holder, or refuses naming the live holder.
// A lease the same holder already has is taken again (a re-attach).
func (v *Volumes) acquire(ctx context.Context, m Mount, holder string) (string, error) {
	for range 4 { // bounded: each lost race re-reads the winner
		cur, etag, err := v.readLease(ctx, m.Name)
		if err != nil {
			return "", err
		}
		held, err := v.heldBy(ctx, cur, holder)
		if err != nil {
			return "", err
		}
		if held {
			return "", v.leasedBy(cur)
		}
		l := Lease{Volume: m.Name, Holder: holder, Path: m.Path, Expires: v.now().Add(v.ttl())}
		tag, won, err := v.putLease(ctx, l, etag)
		if err != nil {
			return "", err
		}
		if won {
			return tag, nil
		}
	}
	cur, _, err := v.readLease(ctx, m.Name)
	if err == nil && cur != nil {
		return "", leasedBy(cur)
	}
	return "", client.Errorf(taxonomy.KindRetryable, "", "the lease of volume %s kept changing under this attach; try again", m.Name)
}

// Generations are name's generation manifests, newest first.
func (v *Volumes) Generations(ctx context.Context, name string) ([]Manifest, error) {
	if err := (Mount{Name: name, Path: "/x"}).check(); err != nil {
		return nil, err
	}
	ms, err := v.store(name).List(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortStableFunc(ms, func(a, b Manifest) int { return strings.Compare(b.Name, a.Name) })
	return ms, nil
}

// generationName orders lexically as it orders in time: the number of
// the generation, zero-padded.
func generationName(n int) string { return fmt.Sprintf("g%09d", n) }

func generationNumber(m Manifest) int {
	var n int
	if _, err := fmt.Sscanf(m.Name, "g%09d", &n); err != nil {
		return 0
	}
	return n
}

// Attachment is a volume held by one sandbox.
type Attachment struct {
	v     *Volumes
	sb    *sandbox.Sandbox
	mount Mount

	mu       sync.Mutex
	etag     string
	detached bool
	stop     chan struct{}
	done     chan struct{}
}

// Mount is the attached volume and where.
func (a *Attachment) Mount() Mount { return a.mount }

// Attach takes m's lease for sb (refusing, with ReasonVolumeLeased and the
// holder's MicroVM id, a volume another live sandbox holds) and lays the
// volume's newest generation at m.Path; a volume with none gets an empty
// directory there. On any failure after the lease is taken the lease is
// released.
func (v *Volumes) Attach(ctx context.Context, sb *sandbox.Sandbox, m Mount) (*Attachment, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	etag, err := v.acquire(ctx, m, sb.ID())
	if err != nil {
		return nil, err
	}
	a := &Attachment{v: v, sb: sb, mount: m, etag: etag}
	if err := a.lay(ctx); err != nil {
		_ = a.release(context.WithoutCancel(ctx))
		return nil, err
	}
	return a, nil
}

func (a *Attachment) lay(ctx context.Context) error {
	gens, err := a.v.Generations(ctx, a.mount.Name)
	if err != nil {
		return err
	}
	if res, err := a.sb.Run(ctx, []string{"mkdir", "-p", a.mount.Path}, client.RunOptions{}); err != nil {
		return err
	} else if res.ExitStatus != 0 {
		return client.Errorf(taxonomy.KindExecFailed, "", "making the volume's directory %s failed (exit %d): %s", a.mount.Path, res.ExitStatus, strings.TrimSpace(res.Stderr))
	}
	if len(gens) == 0 {
		return nil
	}
	p, err := a.v.store(a.mount.Name).Prepare(ctx, gens[0].Name)
	if err != nil {
		return err
	}
	defer p.Close()
	if got := p.Manifest().Paths; len(got) != 1 || got[0] != a.mount.Path {
		return refusef(ReasonForeign, "volume %s was saved from %v, not %s; attach it at its own path", a.mount.Name, got, a.mount.Path)
	}
	return Lay(ctx, a.sb, p)
}

// Renew pushes the lease's expiry LeaseTTL past now. A lease lost to a
// taker (it expired first) is refused with the new holder's id.
func (a *Attachment) Renew(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.renewLocked(ctx)
}

func (a *Attachment) renewLocked(ctx context.Context) error {
	if a.detached {
		return client.Errorf(taxonomy.KindPrecondition, "", "volume %s is detached from %s", a.mount.Name, a.sb.ID())
	}
	l := Lease{Volume: a.mount.Name, Holder: a.sb.ID(), Path: a.mount.Path, Expires: a.v.now().Add(a.v.ttl())}
	tag, won, err := a.v.putLease(ctx, l, a.etag)
	if err != nil {
		return err
	}
	if !won {
		cur, _, err := a.v.readLease(ctx, a.mount.Name)
		if err != nil {
			return err
		}
		if cur == nil {
			cur = &Lease{Volume: a.mount.Name, Holder: "(nobody)"}
		}
		return leasedBy(cur)
	}
	a.etag = tag
	return nil
}

// KeepLeased renews the lease every LeaseTTL/3 until Detach (or ctx ends),
// so a long-lived holder keeps its volume; errors go to onErr, if set.
func (a *Attachment) KeepLeased(ctx context.Context, onErr func(error)) {
	a.mu.Lock()
	if a.stop != nil || a.detached {
		a.mu.Unlock()
		return
	}
	a.stop, a.done = make(chan struct{}), make(chan struct{})
	stop, done := a.stop, a.done
	a.mu.Unlock()
	go func() {
		defer close(done)
		t := time.NewTicker(a.v.ttl() / 3)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-stop:
				return
			case <-t.C:
				if err := a.Renew(ctx); err != nil && onErr != nil {
					onErr(err)
				}
			}
		}
	}()
}

// Sync saves the volume's directory as a new generation, renews the lease
// and removes generations beyond Keep. The lease is checked before the
// save: a holder that lost its lease saves nothing.
func (a *Attachment) Sync(ctx context.Context) (Manifest, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.syncLocked(ctx)
}

func (a *Attachment) syncLocked(ctx context.Context) (Manifest, error) {
	if err := a.renewLocked(ctx); err != nil {
		return Manifest{}, err
	}
	gens, err := a.v.Generations(ctx, a.mount.Name)
	if err != nil {
		return Manifest{}, err
	}
	next := 1
	if len(gens) > 0 {
		next = generationNumber(gens[0]) + 1
	}
	st := a.v.store(a.mount.Name)
	m, err := Checkpoint(ctx, a.sb, st, Options{Paths: []string{a.mount.Path}, Name: generationName(next), Labels: map[string]string{"volume": a.mount.Name}, Now: a.v.Now})
	if err != nil {
		return Manifest{}, err
	}
	if err := a.v.prune(ctx, a.mount.Name); err != nil {
		return m, err
	}
	return m, nil
}

// prune removes name's generations beyond Keep, oldest first.
func (v *Volumes) prune(ctx context.Context, name string) error {
	gens, err := v.Generations(ctx, name)
	if err != nil {
		return err
	}
	st := v.store(name)
	for _, g := range gens[min(len(gens), v.keep()):] {
		if _, err := st.Remove(ctx, g.Name); err != nil {
			return err
		}
	}
	return nil
}

// Detach stops the renewals, saves a last generation when save is set
// (what a terminate does; leave it unset for a sandbox that already
// died), and releases the lease. After it the Attachment does nothing.
func (a *Attachment) Detach(ctx context.Context, save bool) (*Manifest, error) {
	a.mu.Lock()
	stop, done := a.stop, a.done
	a.stop = nil
	a.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.detached {
		return nil, nil
	}
	var saved *Manifest
	var serr error
	if save {
		m, err := a.syncLocked(ctx)
		if err == nil {
			saved = &m
		}
		serr = err
	}
	if rerr := a.releaseLocked(ctx); serr == nil {
		serr = rerr
	}
	a.detached = true
	return saved, serr
}

func (a *Attachment) release(ctx context.Context) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.releaseLocked(ctx)
}

// releaseLocked deletes the lease if it is still this holder's.
func (a *Attachment) releaseLocked(ctx context.Context) error {
	cur, etag, err := a.v.readLease(ctx, a.mount.Name)
	if err != nil || cur == nil || cur.Holder != a.sb.ID() {
		return err
	}
	_, err = a.v.Store.S3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(a.v.Store.Bucket), Key: aws.String(a.v.leaseKey(a.mount.Name)), IfMatch: aws.String(etag)})
	if err != nil && !preconditionFailed(err) && !notFound(err) {
		return a.v.Store.platformErr("releasing the lease of volume "+a.mount.Name, err)
	}
	return nil
}

// List is every volume with its generations and lease, by name.
func (v *Volumes) List(ctx context.Context) ([]VolumeInfo, error) {
	if err := v.Store.check(); err != nil {
		return nil, err
	}
	// Every key under the root, not a delimited listing: a volume is the
	// first segment of its keys, and the keys are few (a lease and Keep
	// generations' manifests and objects each).
	var names []string
	p := s3.NewListObjectsV2Paginator(v.Store.S3, &s3.ListObjectsV2Input{Bucket: aws.String(v.Store.Bucket), Prefix: aws.String(v.root())})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, v.Store.platformErr("listing volumes", err)
		}
		for _, o := range page.Contents {
			name, _, _ := strings.Cut(strings.TrimPrefix(aws.ToString(o.Key), v.root()), "/")
			if volumeName().MatchString(name) {
				names = append(names, name)
			}
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]VolumeInfo, 0, len(names))
	for _, n := range names {
		gens, err := v.Generations(ctx, n)
		if err != nil {
			return nil, err
		}
		l, _, err := v.readLease(ctx, n)
		if err != nil {
			return nil, err
		}
		info := VolumeInfo{Name: n, Generations: gens, Lease: l}
		if l != nil {
			info.Expired = !v.now().Before(l.Expires)
		}
		out = append(out, info)
	}
	return out, nil
}

// Remove deletes a volume: every generation and its lease. A volume a
// live sandbox holds is refused with the holder's id.
func (v *Volumes) Remove(ctx context.Context, name string) ([]string, error) {
	if err := (Mount{Name: name, Path: "/x"}).check(); err != nil {
		return nil, err
	}
	l, _, err := v.readLease(ctx, name)
	if err != nil {
		return nil, err
	}
	if held, err := v.heldBy(ctx, l, ""); err != nil {
		return nil, err
	} else if held {
		return nil, v.leasedBy(l)
	}
	gens, err := v.Generations(ctx, name)
	if err != nil {
		return nil, err
	}
	var removed []string
	st := v.store(name)
	for _, g := range gens {
		keys, err := st.Remove(ctx, g.Name)
		removed = append(removed, keys...)
		if err != nil {
			return removed, err
		}
	}
	if l != nil {
		if _, err := v.Store.S3.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(v.Store.Bucket), Key: aws.String(v.leaseKey(name))}); err != nil && !notFound(err) {
			return removed, v.Store.platformErr("removing the lease of volume "+name, err)
		}
		removed = append(removed, v.leaseKey(name))
	}
	return removed, nil
}

// Held is the leases MicroVM id holds, for `microvm volume sync ID`.
func (v *Volumes) Held(ctx context.Context, id string) ([]Lease, error) {
	all, err := v.List(ctx)
	if err != nil {
		return nil, err
	}
	var out []Lease
	for _, info := range all {
		if info.Lease != nil && info.Lease.Holder == id {
			out = append(out, *info.Lease)
		}
	}
	return out, nil
}

// Resume re-takes a lease sb already holds (another process attached it,
// e.g. `microvm launch --volume`), without laying anything: the volume's
// files are already in sb. Sync and Detach then work as after Attach.
func (v *Volumes) Resume(ctx context.Context, sb *sandbox.Sandbox, m Mount) (*Attachment, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	etag, err := v.acquire(ctx, m, sb.ID())
	if err != nil {
		return nil, err
	}
	return &Attachment{v: v, sb: sb, mount: m, etag: etag}, nil
}
